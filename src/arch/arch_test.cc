// The dependency rule of the tree (docs/design.md, "Dependency rule"), checked on both graphs that
// can break it:
//   - the CMake target graph, from `cmake --graphviz` of a fresh configure of this source tree in
//     a temporary directory (the build tree is never touched), closed transitively: a target that
//     reaches a forbidden one through any path of links fails, with the path;
//   - the source includes, `#include "module/..."` in each module's product files (src/MODULE/,
//     not its tests or test fixtures), each a module edge.
// Forbidden edges (who may not depend on whom):
//   runner (cloister_vm, src/vm)      -> proxy, aws, oauth, sshagent (the wire boundary is the supervisor's)
//   store                             -> vm, supervisor, cli
//   catalog                           -> store (and everything above it)
//   proxy, sshagent                   -> cli
//   guest                             -> any host module but channel, protocol and base
//   protocol (the host-guest contract) -> any module (header-only, below everything)
//   browser (the profile disk)        -> supervisor, cli, proxy, aws, oauth, sshagent (below the supervisor)
//   devcontainer (hostile repo input) -> vm, supervisor, cli, proxy, aws, oauth, sshagent
// Each violation is printed as FILE:LINE with the edge, so the failure says what to change.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/subprocess.h"

namespace cloister {
namespace {

namespace fs = std::filesystem;

std::string SourceDir() {
  const char* s = getenv("CLOISTER_SOURCE_DIR");
  return s ? s : CLOISTER_ARCH_SOURCE_DIR;
}

// ---- The rule, as data ----

struct ModuleRule {
  std::string module;                 // directory under src/ (and target cloister_<module>)
  std::set<std::string> forbidden;    // modules it may not depend on
  std::set<std::string> only_allowed;  // if non-empty: every other cloister module is forbidden
  std::string why;
};

const std::vector<std::string> kHostModules = {
    "audit", "aws",      "catalog",    "cli",   "image", "lifecycle", "proxy",
    "sshagent", "store", "supervisor", "transfer", "vault", "vm", "oauth", "browser",
    "devcontainer"};

std::vector<ModuleRule> Rules() {
  return {
      {"vm", {"proxy", "aws", "oauth", "sshagent"}, {},
       "the QEMU runner never holds the wire boundary (the supervisor wires it)"},
      {"store", {"vm", "supervisor", "cli"}, {}, "the store sits below the VM and the CLI"},
      {"catalog", {"store", "vm", "supervisor", "cli", "proxy", "sshagent", "image"}, {},
       "the catalog sits below the store (the CLI wires the resolver)"},
      {"proxy", {"cli"}, {}, "the proxy never calls up into the CLI"},
      {"sshagent", {"cli"}, {}, "the SSH agent never calls up into the CLI"},
      {"guest", {}, {"base", "channel", "protocol"},
       "the guest shares only the contract (protocol, channel) and base with the host"},
      {"protocol", {}, {"protocol"}, "the contract is header-only and below every module"},
      {"browser", {"supervisor", "cli", "proxy", "aws", "oauth", "sshagent"}, {},
       "the browser profile disk sits below the supervisor (which attaches it) and the CLI"},
      {"devcontainer", {"vm", "supervisor", "cli", "proxy", "aws", "oauth", "sshagent"}, {},
       "reading a repository's devcontainer starts no VM and holds no credential"},
  };
}

bool Forbids(const ModuleRule& r, const std::string& other) {
  if (other == r.module) return false;
  if (!r.only_allowed.empty()) return !r.only_allowed.count(other);
  return r.forbidden.count(other) > 0;
}

// ---- The CMake graph ----

struct TargetGraph {
  std::map<std::string, std::set<std::string>> links;  // target -> targets it links directly
  std::set<std::string> targets;
};

// cmake --graphviz lines: `"node3" [ label = "cloister_vm", ... ];` and
// `"node3" -> "node7"  // cloister_vm -> cloister_proxy`.
TargetGraph ParseGraphviz(const std::string& text) {
  TargetGraph g;
  static const std::regex kNode(R"re(^\s*"(node\d+)" \[ label = "([^"]+)")re");
  static const std::regex kEdge(R"re(^\s*"(node\d+)" -> "(node\d+)")re");
  std::map<std::string, std::string> names;
  std::vector<std::pair<std::string, std::string>> edges;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kNode)) {
      names[m[1]] = m[2];
      g.targets.insert(m[2]);
    } else if (std::regex_search(line, m, kEdge)) {
      edges.emplace_back(m[1], m[2]);
    }
  }
  for (const auto& [from, to] : edges) g.links[names[from]].insert(names[to]);
  return g;
}

// Where each target is declared, and the lines of that CMakeLists.txt naming another target.
struct CMakeSources {
  std::map<std::string, std::string> file_of_target;
  std::map<std::string, std::vector<std::string>> lines;  // file -> lines
};

CMakeSources ReadCMakeLists(const std::string& src) {
  CMakeSources out;
  static const std::regex kDecl(R"re(add_(?:library|executable)\(\s*([A-Za-z0-9_\-]+))re");
  for (const auto& dir : fs::directory_iterator(src + "/src")) {
    fs::path p = dir.path() / "CMakeLists.txt";
    if (!fs::exists(p)) continue;
    std::string rel = "src/" + dir.path().filename().string() + "/CMakeLists.txt";
    std::ifstream in(p);
    std::string line;
    while (std::getline(in, line)) {
      out.lines[rel].push_back(line);
      std::smatch m;
      if (std::regex_search(line, m, kDecl)) out.file_of_target[m[1]] = rel;
    }
  }
  return out;
}

// Module of a cloister target: cloister_<module>; a module's sub-library, cloister_<module>_<part>
// declared in src/<module>/CMakeLists.txt (no module's directory has a '_' in its name);
// cloister-agent -> guest; else "".
std::string ModuleOfTarget(const std::string& target, const CMakeSources& cm) {
  if (target == "cloister-agent") return "guest";
  const std::string prefix = "cloister_";
  if (target.rfind(prefix, 0) != 0) return "";
  std::string m = target.substr(prefix.size());
  if (m.find("_testing") != std::string::npos) return "";  // test fixtures are not product
  size_t sub = m.find('_');
  if (sub == std::string::npos) return m;
  auto declared = cm.file_of_target.find(target);
  std::string module = m.substr(0, sub);
  if (declared != cm.file_of_target.end() && declared->second == "src/" + module + "/CMakeLists.txt") {
    return module;
  }
  return m;
}

// FILE:LINE of the first line in `from`'s CMakeLists.txt that names `to` as a word.
std::string WhereLinked(const CMakeSources& cm, const std::string& from, const std::string& to) {
  auto f = cm.file_of_target.find(from);
  if (f == cm.file_of_target.end()) return "(CMake)";
  const auto& lines = cm.lines.at(f->second);
  std::regex word("(^|[^A-Za-z0-9_\\-])" + to + "($|[^A-Za-z0-9_\\-])");
  for (size_t i = 0; i < lines.size(); ++i) {
    size_t start = lines[i].find_first_not_of(" ");
    if (start == std::string::npos || lines[i][start] == '#' ||
        lines[i].compare(start, 3, "if(") == 0) {
      continue;  // comments and conditions name targets without linking them
    }
    if (std::regex_search(lines[i], word)) return f->second + ":" + std::to_string(i + 1);
  }
  return f->second;
}

// Every cloister target `from` reaches, with the path (from, ..., target).
std::map<std::string, std::vector<std::string>> Reach(const TargetGraph& g,
                                                      const std::string& from) {
  std::map<std::string, std::vector<std::string>> paths;
  std::vector<std::string> queue = {from};
  paths[from] = {from};
  for (size_t i = 0; i < queue.size(); ++i) {
    auto it = g.links.find(queue[i]);
    if (it == g.links.end()) continue;
    for (const std::string& next : it->second) {
      if (paths.count(next)) continue;
      paths[next] = paths[queue[i]];
      paths[next].push_back(next);
      queue.push_back(next);
    }
  }
  paths.erase(from);
  return paths;
}

std::vector<std::string> TargetViolations(const TargetGraph& g, const CMakeSources& cm) {
  std::vector<std::string> out;
  for (const ModuleRule& rule : Rules()) {
    for (const std::string& target : g.targets) {
      if (ModuleOfTarget(target, cm) != rule.module) continue;
      for (const auto& [reached, path] : Reach(g, target)) {
        std::string m = ModuleOfTarget(reached, cm);
        if (m.empty() || !Forbids(rule, m)) continue;
        std::string chain;
        for (const std::string& t : path) chain += (chain.empty() ? "" : " -> ") + t;
        out.push_back(WhereLinked(cm, path[0], path[1]) + ": " + target + " reaches " + reached +
                      " (" + chain + "): " + rule.why);
      }
    }
  }
  return out;
}

// ---- The includes ----

// Test files and test fixtures of a module: *_test.cc, and the sources of its *_testing library
// (named in its CMakeLists.txt), plus the shared test helpers named like one.
std::set<std::string> TestFiles(const CMakeSources& cm, const std::string& module) {
  std::set<std::string> out;
  auto it = cm.lines.find("src/" + module + "/CMakeLists.txt");
  if (it == cm.lines.end()) return out;
  std::string all;
  for (const std::string& l : it->second) all += l + "\n";
  static const std::regex kTesting(R"re(add_library\(\s*cloister_\w+_testing([^)]*)\))re");
  static const std::regex kFile(R"re([A-Za-z0-9_]+\.cc)re");
  for (std::sregex_iterator m(all.begin(), all.end(), kTesting), end; m != end; ++m) {
    std::string srcs = (*m)[1];
    for (std::sregex_iterator f(srcs.begin(), srcs.end(), kFile); f != end; ++f) {
      std::string cc = f->str();
      out.insert(cc);
      out.insert(cc.substr(0, cc.size() - 3) + ".h");
    }
  }
  return out;
}

bool IsTestFile(const std::string& name, const std::set<std::string>& fixtures) {
  if (fixtures.count(name)) return true;
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends("_test.cc") || name == "testing.h" || name == "testing.cc" ||
         name == "test_util.h" || name == "test_util.cc" || name == "test_env.h" ||
         name == "testdata.h";
}

struct Include {
  std::string file;  // src/MODULE/NAME
  int line;
  std::string module;  // the included module
  std::string text;
};

std::vector<Include> ProductIncludes(const std::string& src, const CMakeSources& cm,
                                     const std::string& module) {
  std::vector<Include> out;
  fs::path dir = fs::path(src) / "src" / module;
  if (!fs::is_directory(dir)) return out;
  std::set<std::string> fixtures = TestFiles(cm, module);
  static const std::regex kInclude(R"re(^\s*#\s*include\s*"([a-z_]+)/[^"]+")re");
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".cc" || ext == ".h")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    if (IsTestFile(p.filename(), fixtures)) continue;
    std::ifstream in(p);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      std::smatch m;
      if (!std::regex_search(line, m, kInclude)) continue;
      out.push_back({fs::relative(p, src).string(), n, m[1], line});
    }
  }
  return out;
}

std::vector<std::string> IncludeViolations(const std::string& src, const CMakeSources& cm) {
  std::vector<std::string> out;
  std::set<std::string> known(kHostModules.begin(), kHostModules.end());
  known.insert({"base", "channel", "guest", "protocol"});
  for (const ModuleRule& rule : Rules()) {
    for (const Include& inc : ProductIncludes(src, cm, rule.module)) {
      if (!known.count(inc.module) || !Forbids(rule, inc.module)) continue;
      out.push_back(inc.file + ":" + std::to_string(inc.line) + ": " + rule.module + " -> " +
                    inc.module + " (" + inc.text + "): " + rule.why);
    }
  }
  return out;
}

// Every target declares what it includes: a product file of module M that includes module X's
// header is in a target cloister_M that links (directly or through its PUBLIC links) cloister_X.
// An include the graph does not show is an edge nobody can see in the CMake files.
std::vector<std::string> UndeclaredIncludes(const std::string& src, const CMakeSources& cm,
                                            const TargetGraph& g) {
  std::vector<std::string> out;
  for (const auto& dir : fs::directory_iterator(src + "/src")) {
    std::string module = dir.path().filename().string();
    std::string target = "cloister_" + module;
    if (!g.targets.count(target)) continue;
    std::set<std::string> reached_modules;  // a sub-library counts as its module
    for (const auto& [reached, path] : Reach(g, target)) {
      reached_modules.insert(ModuleOfTarget(reached, cm));
    }
    for (const Include& inc : ProductIncludes(src, cm, module)) {
      std::string to = "cloister_" + inc.module;
      if (inc.module == module || !g.targets.count(to) || reached_modules.count(inc.module)) {
        continue;
      }
      out.push_back(inc.file + ":" + std::to_string(inc.line) + ": " + target + " includes " +
                    inc.module + " (" + inc.text + ") but does not link " + to);
    }
  }
  return out;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "  " + x + "\n";
  return s;
}

// ---- The rule's own checks (a rule that cannot fire proves nothing) ----

// A graph as `cmake --graphviz` writes it: `targets` become node0, node1, ...; each edge links
// targets[from] to targets[to]. GraphvizParsesTransitivePaths checks the parser on literal text.
TargetGraph Graph(const std::vector<std::string>& targets,
                  const std::vector<std::pair<size_t, size_t>>& edges) {
  std::string text;
  for (size_t i = 0; i < targets.size(); ++i) {
    text += "    \"node" + std::to_string(i) + "\" [ label = \"" + targets[i] +
            "\", shape = octagon ];\n";
  }
  for (const auto& [from, to] : edges) {
    text += "    \"node" + std::to_string(from) + "\" -> \"node" + std::to_string(to) + "\"  // " +
            targets[from] + " -> " + targets[to] + "\n";
  }
  return ParseGraphviz(text);
}

TEST(ArchRuleTest, GraphvizParsesTransitivePaths) {
  TargetGraph g = ParseGraphviz(
      "    \"node0\" [ label = \"cloister_vm\", shape = octagon ];\n"
      "    \"node1\" [ label = \"cloister_store\", shape = octagon ];\n"
      "    \"node2\" [ label = \"cloister_proxy\", shape = octagon ];\n"
      "    \"node0\" -> \"node1\"  // cloister_vm -> cloister_store\n"
      "    \"node1\" -> \"node2\"  // cloister_store -> cloister_proxy\n");
  CMakeSources none;
  std::vector<std::string> v = TargetViolations(g, none);
  ASSERT_EQ(v.size(), 1u) << Joined(v);
  EXPECT_NE(v[0].find("cloister_vm -> cloister_store -> cloister_proxy"), std::string::npos) << v[0];
}

TEST(ArchRuleTest, GuestMayOnlyReachTheContractAndBase) {
  ModuleRule guest;
  for (const ModuleRule& r : Rules()) {
    if (r.module == "guest") guest = r;
  }
  EXPECT_FALSE(Forbids(guest, "channel"));
  EXPECT_FALSE(Forbids(guest, "protocol"));
  EXPECT_FALSE(Forbids(guest, "base"));
  for (const std::string& host : kHostModules) EXPECT_TRUE(Forbids(guest, host)) << host;
}

TEST(ArchRuleTest, AnIncludeInAProductFileIsAnEdgeButATestFileIsNot) {
  std::string src = testing::TempDir() + "/arch_rule_" + std::to_string(getpid());
  fs::remove_all(src);
  fs::create_directories(src + "/src/vm");
  std::ofstream(src + "/src/vm/CMakeLists.txt") << "add_library(cloister_vm runner.cc)\n";
  std::ofstream(src + "/src/vm/runner.cc") << "#include \"base/result.h\"\n"
                                             "#include \"proxy/proxy.h\"\n";
  std::ofstream(src + "/src/vm/runner_test.cc") << "#include \"sshagent/agent.h\"\n";
  CMakeSources cm = ReadCMakeLists(src);
  std::vector<std::string> v = IncludeViolations(src, cm);
  fs::remove_all(src);
  ASSERT_EQ(v.size(), 1u) << Joined(v);
  EXPECT_EQ(v[0].rfind("src/vm/runner.cc:2: vm -> proxy", 0), 0u) << v[0];
}

TEST(ArchRuleTest, AnIncludeOfAModuleTheTargetDoesNotLinkIsUndeclared) {
  std::string src = testing::TempDir() + "/arch_decl_" + std::to_string(getpid());
  fs::remove_all(src);
  fs::create_directories(src + "/src/aws");
  std::ofstream(src + "/src/aws/CMakeLists.txt") << "add_library(cloister_aws a.cc)\n";
  std::ofstream(src + "/src/aws/a.cc") << "#include \"vault/vault.h\"\n"
                                         "#include \"proxy/extension_filter.h\"\n";
  CMakeSources cm = ReadCMakeLists(src);
  TargetGraph g = Graph({"cloister_aws", "cloister_vault", "cloister_proxy"}, {{0, 1}});
  std::vector<std::string> u = UndeclaredIncludes(src, cm, g);
  fs::remove_all(src);
  ASSERT_EQ(u.size(), 1u) << Joined(u);
  EXPECT_EQ(u[0].rfind("src/aws/a.cc:2: cloister_aws includes proxy", 0), 0u) << u[0];
}

TEST(ArchRuleTest, ASubLibraryCountsAsItsModule) {
  // A sub-library declared in its module's directory is that module; a target elsewhere (a
  // bench's helper library) whose name only looks like one is not.
  std::string src = testing::TempDir() + "/arch_sub_" + std::to_string(getpid());
  fs::remove_all(src);
  fs::create_directories(src + "/src/ui");
  fs::create_directories(src + "/src/supervisor");
  std::ofstream(src + "/src/ui/CMakeLists.txt") << "add_library(cloister_ui a.cc)\n";
  std::ofstream(src + "/src/ui/a.cc") << "#include \"supervisor/control.h\"\n";
  std::ofstream(src + "/src/supervisor/CMakeLists.txt")
      << "add_library(cloister_supervisor_protocol control.cc)\n"
         "add_library(cloister_supervisor s.cc)\n";
  CMakeSources cm = ReadCMakeLists(src);
  EXPECT_EQ(ModuleOfTarget("cloister_supervisor_protocol", cm), "supervisor");
  EXPECT_EQ(ModuleOfTarget("cloister_supervisor", cm), "supervisor");
  EXPECT_EQ(ModuleOfTarget("cloister_proxy_testing", cm), "");
  EXPECT_EQ(ModuleOfTarget("cloister_vm_bench_util", cm), "vm_bench_util");
  // Linking the sub-library declares an include of its module...
  TargetGraph g =
      Graph({"cloister_ui", "cloister_supervisor_protocol", "cloister_supervisor"}, {{0, 1}});
  std::vector<std::string> u = UndeclaredIncludes(src, cm, g);
  EXPECT_TRUE(u.empty()) << Joined(u);
  // ...and reaching it is reaching the module, for the forbidden edges too.
  TargetGraph guest = Graph({"cloister_guest", "cloister_supervisor_protocol"}, {{0, 1}});
  std::vector<std::string> v = TargetViolations(guest, cm);
  fs::remove_all(src);
  ASSERT_EQ(v.size(), 1u) << Joined(v);
  EXPECT_NE(v[0].find("cloister_guest reaches cloister_supervisor_protocol"), std::string::npos)
      << v[0];
}

// ---- The tree ----

class ArchTest : public testing::Test {
 protected:
  void SetUp() override {
    src_ = SourceDir();
    ASSERT_TRUE(fs::exists(src_ + "/src/CMakeLists.txt")) << "no source tree at " << src_;
    cm_ = ReadCMakeLists(src_);
  }
  std::string src_;
  CMakeSources cm_;
};

TEST_F(ArchTest, TargetGraphHasNoForbiddenEdge) {
  // A fresh configure of the same sources (not the build tree, which others may be building).
  std::string tmp = testing::TempDir() + "/arch_graph_" + std::to_string(getpid());
  fs::remove_all(tmp);
  RunOptions opts;
  opts.timeout = std::chrono::minutes(5);
  auto r = RunProcess({CLOISTER_ARCH_CMAKE, "-S", src_, "-B", tmp, "--graphviz=" + tmp + "/g.dot",
                       "-DCLOISTER_BUILD_GUEST=ON"},
                      opts);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_TRUE(r->success()) << "cmake --graphviz failed (fail closed):\n" << r->out << r->err;
  std::ifstream in(tmp + "/g.dot");
  std::stringstream text;
  text << in.rdbuf();
  fs::remove_all(tmp);
  TargetGraph g = ParseGraphviz(text.str());
  // Fail closed: every target the rule speaks of must be in the graph, or the rule checks nothing.
  for (const char* t : {"cloister_vm", "cloister_store", "cloister_catalog", "cloister_proxy",
                        "cloister_sshagent", "cloister_guest", "cloister-agent",
                        "cloister_protocol", "cloister_channel", "cloister_base", "cloister_cli",
                        "cloister_supervisor"}) {
    EXPECT_TRUE(g.targets.count(t)) << t << " is not in the CMake graph: rename the rule too";
  }
  std::vector<std::string> v = TargetViolations(g, cm_);
  EXPECT_TRUE(v.empty()) << "forbidden target edges (docs/design.md, \"Dependency rule\"):\n"
                         << Joined(v);
  std::vector<std::string> u = UndeclaredIncludes(src_, cm_, g);
  EXPECT_TRUE(u.empty()) << "includes the CMake graph does not show (link what you include):\n"
                         << Joined(u);
}

TEST_F(ArchTest, SourceIncludesHaveNoForbiddenEdge) {
  // Fail closed: the modules the rule speaks of must be there with product files.
  for (const char* m : {"vm", "supervisor", "store", "catalog", "proxy", "sshagent", "guest",
                        "protocol"}) {
    EXPECT_TRUE(fs::is_directory(src_ + "/src/" + m)) << "src/" << m << " is gone";
  }
  std::vector<std::string> v = IncludeViolations(src_, cm_);
  EXPECT_TRUE(v.empty()) << "forbidden includes (docs/design.md, \"Dependency rule\"):\n"
                         << Joined(v);
}

}  // namespace
}  // namespace cloister

// The docs cannot name a test that does not exist. docs/threat-model.md is one block per property
// (a `#### ` heading, then exactly the fields Mechanism, Tests, Remains); every name in a Tests
// field is looked up in the sources:
//   `Suite.Name`  a TEST/TEST_F/TEST_P(Suite, Name) in a src/**/*.cc file
//   `Suite.*`     a suite with at least one test
//   `name_test`   a test binary (cloister_add_test) or a test source name_test.cc
//   `fuzz/NAME`   a fuzz target registered in fuzz/CMakeLists.txt (cloister_add_fuzzer)
// A Tests field names at least one, or starts with "none yet" and says why. Anything else in
// backticks there is an error, so a renamed, deleted or mistyped test fails here with its line.
// docs/benchmarks.md has one section per bench of bench/CMakeLists.txt, between the marker lines
// its bench prints with --markdown (bench/report.h), and no section of a bench that is gone.
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace cloister {
namespace {

namespace fs = std::filesystem;

std::string SourceDir() {
  const char* s = getenv("CLOISTER_SOURCE_DIR");
  return s ? s : CLOISTER_ARCH_SOURCE_DIR;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What the sources define, to look names up in.
struct TestIndex {
  std::set<std::pair<std::string, std::string>> cases;  // (suite, name)
  std::set<std::string> suites;
  std::set<std::string> binaries;  // cloister_add_test names and *_test.cc stems
  std::set<std::string> fuzzers;
};

TestIndex IndexSources(const fs::path& root) {
  TestIndex index;
  // A TEST macro's head may wrap after its first argument; two lines are enough.
  static const std::regex kTest(R"(^TEST(?:_F|_P)?\(\s*(\w+),\s*(\w+)\s*\))");
  static const std::regex kAddTest(R"(cloister_add_test\(\s*(\w+))");
  static const std::regex kAddFuzzer(R"(cloister_add_fuzzer\(\s*(\w+))");
  auto scan = [](const std::string& text, const std::regex& re, std::set<std::string>& out) {
    for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
      out.insert((*it)[1]);
    }
  };
  for (const auto& e : fs::recursive_directory_iterator(root / "src")) {
    if (!e.is_regular_file()) continue;
    const fs::path& p = e.path();
    if (p.filename() == "CMakeLists.txt") {
      scan(ReadFile(p), kAddTest, index.binaries);
      continue;
    }
    if (p.extension() != ".cc") continue;
    std::string stem = p.stem().string();
    if (stem.size() > 5 && stem.ends_with("_test")) index.binaries.insert(stem);
    std::istringstream in(ReadFile(p));
    std::string line, next;
    std::getline(in, line);
    while (in) {
      bool more = static_cast<bool>(std::getline(in, next));
      if (line.rfind("TEST", 0) == 0) {
        std::string head = line + (more ? next : "");
        std::smatch m;
        if (std::regex_search(head, m, kTest)) {
          index.cases.insert({m[1], m[2]});
          index.suites.insert(m[1]);
        }
      }
      if (!more) break;
      line = next;
    }
  }
  scan(ReadFile(root / "fuzz" / "CMakeLists.txt"), kAddFuzzer, index.fuzzers);
  return index;
}

// Empty when `name` resolves; else why not.
std::string Resolve(const std::string& name, const TestIndex& index) {
  static const std::regex kCase(R"((\w+)\.(\w+))");
  static const std::regex kSuite(R"((\w+)\.\*)");
  static const std::regex kFuzz(R"(fuzz/(\w+))");
  static const std::regex kBinary(R"(\w+_test)");
  std::smatch m;
  if (std::regex_match(name, m, kCase)) {
    return index.cases.count({m[1], m[2]}) ? "" : "no TEST(" + m[1].str() + ", " + m[2].str() + ")";
  }
  if (std::regex_match(name, m, kSuite)) {
    return index.suites.count(m[1]) ? "" : "no test suite " + m[1].str();
  }
  if (std::regex_match(name, m, kFuzz)) {
    return index.fuzzers.count(m[1]) ? "" : "no fuzz target " + m[1].str() + " in fuzz/CMakeLists.txt";
  }
  if (std::regex_match(name, kBinary)) {
    return index.binaries.count(name) ? "" : "no test binary or source " + name;
  }
  return "not a test name (Suite.Name, Suite.*, name_test or fuzz/NAME)";
}

// Every problem of the document, each "LINE: what"; empty when it holds. `properties` counts the
// blocks seen.
std::vector<std::string> CheckPropertyBlocks(const std::string& doc, const TestIndex& index,
                                             int* properties) {
  std::vector<std::string> problems;
  std::vector<std::string> lines;
  {
    std::istringstream in(doc);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  static const char* kFields[] = {"- **Mechanism:**", "- **Tests:**", "- **Remains:**"};
  static const std::regex kTicked("`([^`]+)`");
  *properties = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("#### ", 0) != 0) continue;
    ++*properties;
    const std::string heading = std::to_string(i + 1) + ": " + lines[i].substr(5);
    size_t j = i + 1;
    for (int f = 0; f < 3; ++f) {
      if (j >= lines.size() || lines[j].rfind(kFields[f], 0) != 0) {
        problems.push_back(heading + ": expected `" + kFields[f] + "` at line " +
                           std::to_string(j + 1));
        break;
      }
      const size_t field_line = j + 1;
      std::string text = lines[j].substr(std::string(kFields[f]).size());
      for (++j; j < lines.size() && lines[j].rfind("  ", 0) == 0; ++j) text += " " + lines[j];
      if (text.find_first_not_of(' ') == std::string::npos) {
        problems.push_back(heading + ": empty field at line " + std::to_string(field_line));
      }
      if (f != 1) continue;
      int named = 0;
      for (std::sregex_iterator it(text.begin(), text.end(), kTicked), end; it != end; ++it) {
        ++named;
        std::string why = Resolve((*it)[1], index);
        if (!why.empty()) {
          problems.push_back(std::to_string(field_line) + ": `" + (*it)[1].str() + "`: " + why);
        }
      }
      bool none_yet = text.find_first_not_of(' ') != std::string::npos &&
                      text.substr(text.find_first_not_of(' ')).rfind("none yet", 0) == 0;
      if (named == 0 && !none_yet) {
        problems.push_back(heading + ": the Tests field names no test (or says `none yet`)");
      }
    }
    if (j < lines.size() && !lines[j].empty() && lines[j].rfind("#", 0) != 0) {
      problems.push_back(heading + ": line " + std::to_string(j + 1) +
                         " follows Remains; a block has exactly three fields");
    }
  }
  return problems;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "  " + s + "\n";
  return out;
}

TEST(DocsTest, EveryTestTheThreatModelNamesExists) {
  fs::path root = SourceDir();
  TestIndex index = IndexSources(root);
  ASSERT_GT(index.cases.size(), 500u) << "the sources were not found under " << root;
  int properties = 0;
  auto problems = CheckPropertyBlocks(ReadFile(root / "docs" / "threat-model.md"), index,
                                      &properties);
  EXPECT_GT(properties, 50) << "docs/threat-model.md lost its property blocks";
  EXPECT_TRUE(problems.empty()) << "docs/threat-model.md:\n" << Join(problems);
}

// The check can fail: a made-up name, a missing field and an empty Tests field are each caught.
TEST(DocsTest, AMissingTestAFieldOutOfOrderAndAnEmptyTestsFieldAreCaught) {
  TestIndex index;
  index.cases.insert({"RealTest", "Holds"});
  index.suites.insert("RealTest");
  index.binaries.insert("real_test");
  index.fuzzers.insert("real");
  int properties = 0;
  const std::string good =
      "#### X1. holds\n- **Mechanism:** m\n  more\n- **Tests:** `RealTest.Holds`, `RealTest.*`,\n"
      "  `real_test`, `fuzz/real`\n- **Remains:** r\n\n#### X2. later\n- **Mechanism:** m\n"
      "- **Tests:** none yet (why)\n- **Remains:** r\n";
  EXPECT_TRUE(CheckPropertyBlocks(good, index, &properties).empty());
  EXPECT_EQ(properties, 2);
  for (const std::string& bad : {
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** `RealTest.Gone`\n- **Remains:** r\n"),
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** `NoSuchTest.*`\n- **Remains:** r\n"),
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** `gone_test`\n- **Remains:** r\n"),
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** `fuzz/gone`\n- **Remains:** r\n"),
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** `vm/qemu.cc`\n- **Remains:** r\n"),
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** the e2e test\n- **Remains:** r\n"),
           std::string("#### X. p\n- **Tests:** `RealTest.Holds`\n- **Mechanism:** m\n- **Remains:** r\n"),
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** `RealTest.Holds`\n"),
           std::string("#### X. p\n- **Mechanism:** m\n- **Tests:** `RealTest.Holds`\n- **Remains:** r\n- extra\n"),
       }) {
    EXPECT_FALSE(CheckPropertyBlocks(bad, index, &properties).empty()) << bad;
  }
}

TEST(DocsTest, EveryBenchHasItsSectionOnTheBenchmarksPage) {
  fs::path root = SourceDir();
  const std::string cmake = ReadFile(root / "bench" / "CMakeLists.txt");
  const std::string page = ReadFile(root / "docs" / "benchmarks.md");
  static const std::regex kBench(R"(add_executable\(\s*(\w+_bench)\b)");
  static const std::regex kMarker(R"(<!-- bench:(\w+) (begin|end) -->)");
  std::set<std::string> benches;
  for (std::sregex_iterator it(cmake.begin(), cmake.end(), kBench), end; it != end; ++it) {
    benches.insert((*it)[1]);
  }
  ASSERT_GT(benches.size(), 10u) << "no benches found in bench/CMakeLists.txt";
  for (const auto& b : benches) {
    EXPECT_NE(page.find("\n<!-- bench:" + b + " begin -->\n"), std::string::npos)
        << "docs/benchmarks.md has no section for " << b
        << " (add `## " << b << "` and its two marker lines, then run scripts/bench-markdown.sh)";
    EXPECT_NE(page.find("\n<!-- bench:" + b + " end -->\n"), std::string::npos) << b;
    std::string source = ReadFile(root / "bench" / (b + ".cc"));
    EXPECT_NE(source.find("Report::Wanted"), std::string::npos)
        << "bench/" << b << ".cc prints no --markdown section (bench/report.h)";
  }
  for (std::sregex_iterator it(page.begin(), page.end(), kMarker), end; it != end; ++it) {
    EXPECT_TRUE(benches.count((*it)[1])) << "docs/benchmarks.md has a section of "
                                          << (*it)[1] << ", which bench/CMakeLists.txt lacks";
  }
}

}  // namespace
}  // namespace cloister

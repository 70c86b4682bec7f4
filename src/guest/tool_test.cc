// The coding agent's guest scripts (guest/tool.h), run on the host by /bin/sh with fake `npm`,
// `claude` and `codex` programs on PATH and temp paths for the marker, status, log and home.
#include "guest/tool.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_file.h"
#include "guest/agent.h"
#include "guest/users.h"

namespace cloister::guest {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using testfile::Slurp;

void WriteExe(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  chmod(p.c_str(), 0755);
}

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);  // polling a condition, bounded
  }
  return true;
}

class ToolScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cloister-tool-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    for (const char* d : {"bin", "run", "home", "work"}) fs::create_directories(dir_ / d);
    paths_.marker_dir = (dir_ / "lib" / "cloister").string();
    paths_.run_dir = (dir_ / "run").string();
    paths_.log = (dir_ / "log" / "cloister-tool.log").string();
    // A fake npm: records its arguments; `install -g SPEC` puts the tool's command on PATH,
    // unless NPM_FAIL is set.
    WriteExe(dir_ / "bin" / "npm", "#!/bin/sh\n"
             "echo \"$*\" >> " + (dir_ / "npm.calls").string() + "\n"
             "echo \"npm http fetch GET 200 https://registry.npm.test/$8 12ms\"\n"
             "if [ -n \"$NPM_FAIL\" ]; then echo 'npm error code E404' >&2; exit \"$NPM_FAIL\"; fi\n"
             "case \"$8\" in @anthropic-ai/*) c=claude ;; @openai/*) c=codex ;; esac\n"
             "cp " + (dir_ / "fake-tool").string() + " " + (dir_ / "bin").string() + "/$c\n");
    WriteExe(dir_ / "fake-tool", "#!/bin/sh\n"
             "if [ \"$1 $2\" = 'login --with-api-key' ]; then mkdir -p $HOME/.codex; "
             "cat > $HOME/.codex/auth.json; exit 0; fi\n"
             "echo \"FAKE ${0##*/} in $PWD key=$ANTHROPIC_API_KEY$OPENAI_API_KEY\"\n");
    // The login shell the window ends in.
    WriteExe(dir_ / "shell", "#!/bin/sh\necho SHELL-FOLLOWS \"$@\"\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::map<std::string, std::string> Env(std::map<std::string, std::string> extra = {}) {
    std::map<std::string, std::string> env = {{"PATH", (dir_ / "bin").string() + ":/usr/bin:/bin"},
                                              {"HOME", (dir_ / "home").string()},
                                              {"SHELL", (dir_ / "shell").string()}};
    for (auto& [k, v] : extra) env[k] = v;
    return env;
  }

  RunOutput Install(const AgentTool& tool, std::map<std::string, std::string> extra = {}) {
    fs::path script = dir_ / "install.sh";
    std::ofstream(script) << ToolInstallScript(tool, paths_);
    RunOptions o;
    o.env_set = Env(extra);
    o.timeout = 60s;
    auto r = RunProcess({"/bin/sh", script.string()}, o);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }

  RunOutput Window(const AgentTool& tool, const std::string& workdir,
                   std::map<std::string, std::string> extra = {}) {
    fs::path script = dir_ / "window.sh";
    std::ofstream(script) << ToolWindowScript(tool, paths_, workdir);
    RunOptions o;
    o.env_set = Env(extra);
    o.cwd = workdir.empty() ? (dir_ / "home").string() : workdir;
    o.timeout = 60s;
    auto r = RunProcess({"/bin/sh", script.string()}, o);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }

  size_t NpmCalls() {
    std::string calls = Slurp(dir_ / "npm.calls");
    return static_cast<size_t>(std::count(calls.begin(), calls.end(), '\n'));
  }

  fs::path dir_;
  ToolPaths paths_;
};

const AgentTool& Claude() { return *FindAgentTool("claude"); }
const AgentTool& Codex() { return *FindAgentTool("codex"); }

TEST(AgentToolsTest, TableNamesPinnedPackages) {
  EXPECT_EQ(AgentToolNames(), "shell, claude, codex");
  EXPECT_EQ(AgentToolPackageSpec(Claude()), "@anthropic-ai/claude-code@2.1.332");
  EXPECT_EQ(AgentToolPackageSpec(Codex()), "@openai/codex@0.171.0");
  EXPECT_EQ(AgentToolPackageSpec(*FindAgentTool("shell")), "");
  auto bad = ParseAgentTool("emacs");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().hint().find("claude"), std::string::npos);
  EXPECT_TRUE(ToolWindowCommand(*FindAgentTool("shell"), ToolPaths{}).empty());
  EXPECT_EQ(ToolWindowCommand(Claude(), ToolPaths{}),
            (std::vector<std::string>{"/bin/sh", "/run/cloister/tool-window.sh"}));
  EXPECT_EQ(ToolPaths{}.Marker(Claude()), "/usr/local/lib/cloister/tool-claude.installed");
}

TEST_F(ToolScriptTest, InstallsOnceRecordsTheMarkerAndInstallsAgainWithoutIt) {
  RunOutput r = Install(Claude());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Slurp(paths_.Status()), "ok\n");
  EXPECT_EQ(Slurp(paths_.Marker(Claude())), "@anthropic-ai/claude-code@2.1.332\n");
  EXPECT_EQ(Trim(Slurp(dir_ / "npm.calls")),
            "install -g --no-fund --no-audit --no-update-notifier --fetch-retries=5 --loglevel=http "
            "@anthropic-ai/claude-code@2.1.332");
  std::string log = Slurp(paths_.log);
  EXPECT_NE(log.find("installing @anthropic-ai/claude-code@2.1.332"), std::string::npos) << log;
  EXPECT_NE(log.find("npm http fetch GET 200"), std::string::npos) << log;  // npm's own output
  EXPECT_NE(log.find("installed @anthropic-ai/claude-code@2.1.332 in "), std::string::npos) << log;

  // The next boot: installed, npm is not run again.
  fs::remove(paths_.Status());
  EXPECT_EQ(Install(Claude()).exit_code, 0);
  EXPECT_EQ(Slurp(paths_.Status()), "ok\n");
  EXPECT_EQ(NpmCalls(), 1u);

  // `reset` drops the system disk (marker and command): the next boot installs again.
  fs::remove_all(dir_ / "lib");
  fs::remove(dir_ / "bin" / "claude");
  EXPECT_EQ(Install(Claude()).exit_code, 0);
  EXPECT_EQ(NpmCalls(), 2u);
  EXPECT_TRUE(fs::exists(paths_.Marker(Claude())));

  // A marker of another version (the pin moved): installed again.
  std::ofstream(paths_.Marker(Claude())) << "@anthropic-ai/claude-code@0.0.1\n";
  EXPECT_EQ(Install(Claude()).exit_code, 0);
  EXPECT_EQ(NpmCalls(), 3u);
  EXPECT_EQ(Slurp(paths_.Marker(Claude())), "@anthropic-ai/claude-code@2.1.332\n");
}

TEST_F(ToolScriptTest, AFailedInstallSaysSoLeavesNoMarkerAndTheWindowNamesTheLog) {
  Install(Claude(), {{"NPM_FAIL", "7"}});
  EXPECT_EQ(Slurp(paths_.Status()), "failed 7\n");
  EXPECT_FALSE(fs::exists(paths_.Marker(Claude())));
  EXPECT_NE(Slurp(paths_.log).find("npm error code E404"), std::string::npos);
  EXPECT_NE(Slurp(paths_.log).find("failed (exit 7)"), std::string::npos);
  RunOutput w = Window(Claude(), "");
  EXPECT_NE(w.out.find("installing @anthropic-ai/claude-code@2.1.332 failed (failed 7); the log "
                       "is " + paths_.log),
            std::string::npos) << w.out;
  EXPECT_NE(w.out.find("npm error code E404"), std::string::npos) << w.out;  // the log's tail
  EXPECT_NE(w.out.find("SHELL-FOLLOWS -l"), std::string::npos) << w.out;
  EXPECT_EQ(w.out.find("FAKE"), std::string::npos) << w.out;  // the tool did not run

  // No npm in the image: a failure naming the reason, not a hang.
  fs::remove(dir_ / "bin" / "npm");
  fs::remove(paths_.Status());
  RunOptions o;
  o.env_set = Env({{"PATH", (dir_ / "bin").string() + ":/nonexistent"}});
  std::ofstream(dir_ / "install.sh") << ToolInstallScript(Claude(), paths_);
  // The script needs the basic utilities; give it a PATH with them but without any npm.
  fs::create_directories(dir_ / "utils");
  for (const char* u : {"cat", "mkdir", "date", "mv", "printf"}) {
    auto where = RunProcess({"/bin/sh", "-c", std::string("command -v ") + u});
    ASSERT_TRUE(where.ok());
    std::string p = Trim(where->out);
    if (!p.empty() && p[0] == '/') fs::create_symlink(p, dir_ / "utils" / u);
  }
  o.env_set["PATH"] = (dir_ / "bin").string() + ":" + (dir_ / "utils").string();
  auto r = RunProcess({"/bin/sh", (dir_ / "install.sh").string()}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Slurp(paths_.Status()), "failed 127\n");
  EXPECT_NE(Slurp(paths_.log).find("npm is not installed in this image"), std::string::npos);
}

TEST_F(ToolScriptTest, WindowPreAnswersClaudesFirstRunAndRunsItInTheWorkdir) {
  if (!ProgramExists("node")) GTEST_SKIP() << "node is not installed here";
  Install(Claude());
  const std::string key = "sk-ant-api03-CLOISTERxPLACEHOLDERxxxxxxxxxxxxxxxxxxxx0123456789abcdefghij";
  const std::string work = (dir_ / "work").string();
  // Settings the user already has are kept; a suffix the user rejected stays rejected.
  std::ofstream(dir_ / "home" / ".claude.json")
      << R"({"theme":"light","numStartups":3,"customApiKeyResponses":{"approved":["x"],"rejected":[]}})";
  RunOutput w = Window(Claude(), work, {{"ANTHROPIC_API_KEY", key}});
  EXPECT_NE(w.out.find("FAKE claude in " + work + " key=" + key), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("claude exited (0); this window is now a shell"), std::string::npos);
  EXPECT_NE(w.out.find("SHELL-FOLLOWS -l"), std::string::npos);
  auto j = nlohmann::json::parse(Slurp(dir_ / "home" / ".claude.json"), nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["hasCompletedOnboarding"], true);
  EXPECT_EQ(j["theme"], "light");
  EXPECT_EQ(j["numStartups"], 3);
  EXPECT_EQ(j["customApiKeyResponses"]["approved"],
            nlohmann::json::array({"x", key.substr(key.size() - 20)}));
  EXPECT_EQ(j["projects"][work]["hasTrustDialogAccepted"], true);
  struct stat st;
  ASSERT_EQ(stat((dir_ / "home" / ".claude.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // Idempotent; a rejection the user made is respected; a damaged file is left alone.
  std::ofstream(dir_ / "home" / ".claude.json")
      << R"({"customApiKeyResponses":{"approved":[],"rejected":[")" + key.substr(key.size() - 20) +
             R"("]}})";
  Window(Claude(), work, {{"ANTHROPIC_API_KEY", key}});
  j = nlohmann::json::parse(Slurp(dir_ / "home" / ".claude.json"), nullptr, false);
  EXPECT_TRUE(j["customApiKeyResponses"]["approved"].empty()) << j.dump();
  std::ofstream(dir_ / "home" / ".claude.json") << "{not json";
  w = Window(Claude(), work, {{"ANTHROPIC_API_KEY", key}});
  EXPECT_EQ(Slurp(dir_ / "home" / ".claude.json"), "{not json");
  EXPECT_NE(w.out.find("FAKE claude"), std::string::npos);  // the tool still runs
}

TEST_F(ToolScriptTest, WindowLogsCodexInWithThePlaceholderAndTrustsTheWorkdirOnce) {
  Install(Codex());
  EXPECT_EQ(Slurp(paths_.Marker(Codex())), "@openai/codex@0.171.0\n");
  const std::string work = (dir_ / "work").string();
  RunOutput w = Window(Codex(), work, {{"OPENAI_API_KEY", "sk-proj-CLOISTERxPLACEHOLDER"}});
  EXPECT_NE(w.out.find("FAKE codex in " + work), std::string::npos) << w.out << w.err;
  EXPECT_EQ(Slurp(dir_ / "home" / ".codex" / "auth.json"), "sk-proj-CLOISTERxPLACEHOLDER");
  Window(Codex(), work, {{"OPENAI_API_KEY", "sk-proj-CLOISTERxPLACEHOLDER"}});
  std::string toml = Slurp(dir_ / "home" / ".codex" / "config.toml");
  EXPECT_EQ(toml, "\n[projects.\"" + work + "\"]\ntrust_level = \"trusted\"\n");
}

TEST_F(ToolScriptTest, WindowShowsTheInstallWhileItRunsThenStartsTheTool) {
  fs::create_directories(fs::path(paths_.log).parent_path());
  std::ofstream(paths_.log) << "cloister: installing something\nnpm http fetch GET 200 x\n";
  std::ofstream(paths_.Status()) << "installing\n";
  std::ofstream(dir_ / "window.sh") << ToolWindowScript(Claude(), paths_, "");
  WriteExe(dir_ / "bin" / "claude", "#!/bin/sh\necho FAKE-CLAUDE-RAN\n");
  WriteExe(dir_ / "bin" / "node", "#!/bin/sh\nexit 0\n");
  fs::path out = dir_ / "window.out";
  std::thread t([&] {
    RunOptions o;
    o.env_set = Env();
    o.timeout = 60s;
    (void)RunProcess({"/bin/sh", "-c", "exec /bin/sh \"$0\" > \"$1\" 2>&1",
                      (dir_ / "window.sh").string(), out.string()}, o);
  });
  // While installing: the header and npm's lines as the log grows; the tool has not run.
  EXPECT_TRUE(WaitFor([&] { return Slurp(out).find("npm http fetch GET 200 x") != std::string::npos; }, 30s))
      << Slurp(out);
  EXPECT_NE(Slurp(out).find("first boot: installing @anthropic-ai/claude-code@2.1.332 (log: " +
                            paths_.log + ")"), std::string::npos);
  std::ofstream(paths_.log, std::ios::app) << "npm http fetch GET 200 later-line\n";
  EXPECT_TRUE(WaitFor([&] { return Slurp(out).find("later-line") != std::string::npos; }, 30s));
  EXPECT_EQ(Slurp(out).find("FAKE-CLAUDE-RAN"), std::string::npos);
  std::ofstream(paths_.Status()) << "ok\n";
  t.join();
  std::string o = Slurp(out);
  EXPECT_NE(o.find("@anthropic-ai/claude-code@2.1.332 is installed"), std::string::npos) << o;
  EXPECT_NE(o.find("FAKE-CLAUDE-RAN"), std::string::npos) << o;
  EXPECT_LT(o.find("is installed"), o.find("FAKE-CLAUDE-RAN"));
}

TEST(AgentTmuxTest, FirstWindowRunsTheGivenCommandInTheGivenFolder) {
  if (!ProgramExists("tmux")) GTEST_SKIP() << "tmux is not installed here";
  fs::path dir = fs::temp_directory_path() / ("cloister-tmux-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "home");
  fs::create_directories(dir / "proj");
  std::ofstream(dir / "passwd") << "me:x:" << getuid() << ":" << getgid() << ":me:"
                                << (dir / "home").string() << ":/bin/sh\n";
  std::ofstream(dir / "group") << "me:x:" << getgid() << ":\n";
  auto user = LookupUser("me", (dir / "passwd").string(), (dir / "group").string());
  ASSERT_TRUE(user.ok());
  std::vector<std::string> env = {"TMUX_TMPDIR=" + dir.string(), "PATH=/usr/bin:/bin",
                                  "HOME=" + (dir / "home").string()};
  ASSERT_TRUE(EnsureTmuxSession(*user, env, false, (dir / "proj").string(),
                                {"/bin/sh", "-c", "pwd > " + (dir / "ran").string() + "; sleep 600"},
                                "claude").ok());
  EXPECT_TRUE(WaitFor([&] { return !Slurp(dir / "ran").empty(); }, 30s));
  EXPECT_EQ(Trim(Slurp(dir / "ran")), (dir / "proj").string());
  RunOptions ro;
  ro.env_set = {{"TMUX_TMPDIR", dir.string()}};
  auto windows = RunProcess({"tmux", "list-windows", "-t", "cloister", "-F", "#{window_name}"}, ro);
  ASSERT_TRUE(windows.ok());
  EXPECT_EQ(Trim(windows->out), "claude");
  // A second call keeps the session (and its window) as it is.
  ASSERT_TRUE(EnsureTmuxSession(*user, env, false, "", {}, "").ok());
  windows = RunProcess({"tmux", "list-windows", "-t", "cloister", "-F", "#{window_name}"}, ro);
  EXPECT_EQ(Trim(windows->out), "claude");
  (void)RunProcess({"tmux", "kill-server"}, ro);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cloister::guest

// A devcontainer's lifecycle commands in the guest (guest/devcontainer.h), run on the host as the
// test's user with temp paths for the marker, status, log and workspace folder.
#include "guest/devcontainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "base/testing_file.h"
#include "guest/config.h"

namespace cloister::guest {
namespace {

namespace fs = std::filesystem;
using testfile::Slurp;

LifecycleStep Shell(const std::string& step, const std::string& text) {
  return {step, "devcontainer.json", false, {{"", text, {}}}};
}

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cloister-lifecycle-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "work");
    fs::create_directories(dir_ / "home");
    run_.paths.marker_dir = (dir_ / "lib").string();
    run_.paths.run_dir = (dir_ / "run").string();
    run_.paths.log = (dir_ / "log" / "devcontainer.log").string();
    run_.switch_user = false;
    run_.user.name = "dev";
    run_.user.home = (dir_ / "home").string();
    run_.cwd = (dir_ / "work").string();
    run_.env = {"PATH=/usr/bin:/bin", "HOME=" + run_.user.home, "GREETING=from containerEnv"};
    lc_.enabled = true;
    lc_.create_id = "abc123";
    std::string counter = (dir_ / "work" / "created").string();
    lc_.create = {Shell("onCreateCommand", "echo on-create >> " + counter),
                  {"updateContentCommand", "Feature ./hello", true,
                   {{"a", "echo a > par-a", {}}, {"b", "", {"sh", "-c", "echo b > par-b"}}}},
                  {"postCreateCommand", "devcontainer.json", false,
                   {{"", "", {"sh", "-c", "printf '%s|%s|%s' \"$1\" \"$PWD\" \"$GREETING\" > argv.txt",
                              "sh", "it's one \"argument\" $HOME"}}}}};
    lc_.start = {Shell("postStartCommand", "echo started >> " + (dir_ / "work" / "starts").string())};
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string StatusText() { return Slurp(run_.paths.Status()); }

  fs::path dir_;
  LifecycleRun run_;
  DevcontainerLifecycle lc_;
};

TEST_F(LifecycleTest, CreateStepsRunOncePerSystemDiskStartStepsEveryBoot) {
  Status st = RunDevcontainerLifecycle(lc_, run_);
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(StatusText(), "ok\n");
  EXPECT_EQ(Slurp(dir_ / "work" / "created"), "on-create\n");
  EXPECT_EQ(Slurp(dir_ / "work" / "par-a"), "a\n");  // both parallel commands ran, in the folder
  EXPECT_EQ(Slurp(dir_ / "work" / "par-b"), "b\n");
  // The array form is argv: no shell re-parses the argument; the environment and folder arrive.
  EXPECT_EQ(Slurp(dir_ / "work" / "argv.txt"),
            "it's one \"argument\" $HOME|" + (dir_ / "work").string() + "|from containerEnv");
  EXPECT_EQ(Slurp(dir_ / "lib" / "devcontainer.created"), "abc123\n");
  std::string log = Slurp(run_.paths.log);
  EXPECT_NE(log.find("cloister: onCreateCommand (devcontainer.json)"), std::string::npos) << log;
  EXPECT_NE(log.find("updateContentCommand (Feature ./hello)"), std::string::npos) << log;
  // A second boot: the create steps are not run again, postStartCommand is.
  ASSERT_TRUE(RunDevcontainerLifecycle(lc_, run_).ok());
  EXPECT_EQ(Slurp(dir_ / "work" / "created"), "on-create\n");
  EXPECT_EQ(Slurp(dir_ / "work" / "starts"), "started\nstarted\n");
  // Other create steps (a new devcontainer) or a new system disk (no marker): they run again.
  lc_.create_id = "def456";
  ASSERT_TRUE(RunDevcontainerLifecycle(lc_, run_).ok());
  fs::remove(dir_ / "lib" / "devcontainer.created");
  ASSERT_TRUE(RunDevcontainerLifecycle(lc_, run_).ok());
  EXPECT_EQ(Slurp(dir_ / "work" / "created"), "on-create\non-create\non-create\n");
}

TEST_F(LifecycleTest, AFailureStopsTheRestAndIsRetriedNextBoot) {
  lc_.create.insert(lc_.create.begin() + 1, Shell("postCreateCommand", "echo oops >&2; exit 3"));
  Status st = RunDevcontainerLifecycle(lc_, run_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(StatusText(), "failed postCreateCommand (exit 3)\n");
  EXPECT_NE(Slurp(run_.paths.log).find("oops"), std::string::npos);  // stderr is logged too
  EXPECT_FALSE(fs::exists(dir_ / "lib" / "devcontainer.created"));
  EXPECT_FALSE(fs::exists(dir_ / "work" / "par-a"));   // later steps did not run
  EXPECT_FALSE(fs::exists(dir_ / "work" / "starts"));
  lc_.create.erase(lc_.create.begin() + 1);
  ASSERT_TRUE(RunDevcontainerLifecycle(lc_, run_).ok());
  EXPECT_EQ(Slurp(dir_ / "work" / "created"), "on-create\non-create\n");
}

TEST_F(LifecycleTest, AParallelFailureFailsTheStepAfterTheOthersEnd) {
  lc_.create = {{"postCreateCommand", "devcontainer.json", true,
                 {{"slow", "sleep 0.2; echo slow > slow", {}}, {"bad", "", {"false"}}}}};
  ASSERT_FALSE(RunDevcontainerLifecycle(lc_, run_).ok());
  EXPECT_EQ(StatusText(), "failed postCreateCommand (exit 1)\n");
  EXPECT_EQ(Slurp(dir_ / "work" / "slow"), "slow\n");
  lc_.create = {{"postCreateCommand", "devcontainer.json", false, {{"", "", {"/no/such/program"}}}}};
  ASSERT_FALSE(RunDevcontainerLifecycle(lc_, run_).ok());
  EXPECT_EQ(StatusText().rfind("failed postCreateCommand", 0), 0u) << StatusText();
}

TEST_F(LifecycleTest, WindowScriptShowsTheOutcomeThenAShell) {
  fs::create_directories(dir_ / "run");
  ASSERT_TRUE(WriteLifecycleWindowScript(run_.paths).ok());
  std::ofstream(dir_ / "shell") << "#!/bin/sh\necho SHELL-FOLLOWS\n";
  chmod((dir_ / "shell").c_str(), 0755);
  std::ofstream(run_.paths.Status()) << "failed postCreateCommand (exit 3)\n";
  RunOptions o;
  o.env_set = {{"SHELL", (dir_ / "shell").string()}};
  o.timeout = std::chrono::seconds(60);
  auto r = RunProcess({"/bin/sh", run_.paths.WindowScript()}, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NE(r->out.find("stopped: failed postCreateCommand (exit 3)"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("SHELL-FOLLOWS"), std::string::npos);
  std::ofstream(run_.paths.Status()) << "ok\n";
  r = RunProcess({"/bin/sh", run_.paths.WindowScript()}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->out.find("lifecycle commands are done"), std::string::npos) << r->out;
}

TEST(LifecycleConfigTest, RoundTripsAndIsBounded) {
  DevcontainerLifecycle l;
  l.enabled = true;
  l.user = "root";
  l.create_id = "0a1b";
  l.create = {{"onCreateCommand", "devcontainer.json", true,
               {{"x", "make", {}}, {"y", "", {"npm", "ci"}}}}};
  l.start = {{"postStartCommand", "Feature ./f", false, {{"", "echo", {}}}}};
  auto back = ParseDevcontainerLifecycle(DevcontainerLifecycleJson(l));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(DevcontainerLifecycleJson(*back), DevcontainerLifecycleJson(l));
  EXPECT_TRUE(back->enabled);

  auto bad = [](nlohmann::json j) { return !ParseDevcontainerLifecycle(j).ok(); };
  nlohmann::json ok = DevcontainerLifecycleJson(l);
  nlohmann::json j = ok;
  j["user"] = "-rf";
  EXPECT_TRUE(bad(j));
  j = ok;
  j["create_id"] = "../x";
  EXPECT_TRUE(bad(j));
  j = ok;
  j["start"][0]["commands"].push_back({{"name", ""}, {"shell", "two"}});  // two, not parallel
  EXPECT_TRUE(bad(j));
  j = ok;
  j["create"][0]["commands"][0] = {{"name", "x"}};  // neither shell nor argv
  EXPECT_TRUE(bad(j));
  j = ok;
  j["create"][0]["commands"][1]["argv"] = nlohmann::json::array();
  EXPECT_TRUE(bad(j));
  j = ok;
  j["create"] = nlohmann::json::array();
  for (size_t i = 0; i <= kMaxLifecycleSteps; ++i) j["create"].push_back(ok["start"][0]);
  EXPECT_TRUE(bad(j));
  EXPECT_TRUE(bad(nlohmann::json("x")));
  // Through the whole metadata config.
  auto c = ParseAgentConfig(nlohmann::json{{"devcontainer", ok}}.dump());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(c->devcontainer.enabled);
  EXPECT_EQ(c->devcontainer.user, "root");
  EXPECT_FALSE(ParseAgentConfig(R"({"devcontainer": {"user": "a b"}})").ok());
  EXPECT_FALSE(ParseAgentConfig("{}")->devcontainer.enabled);
}

}  // namespace
}  // namespace cloister::guest

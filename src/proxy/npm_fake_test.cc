// The fake npm registry (proxy/npm_fake.h) against the real npm client on this host: packages are
// made with `npm pack` from local folders (the shapes of the agents' packages: platform binaries
// as optional dependencies, by name and by `npm:` alias to another version of the same package),
// and `npm install -g` installs from the fake over plain HTTP on 127.0.0.1.
#include "proxy/npm_fake.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/npm_tarball.h"

namespace cloister::proxy::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void WritePackage(const fs::path& dir, const json& manifest, const std::string& bin_js = "") {
  fs::create_directories(dir);
  std::ofstream(dir / "package.json") << manifest.dump(2);
  if (!bin_js.empty()) std::ofstream(dir / "bin.js") << bin_js;
}

std::map<std::string, std::string> NpmEnv(const fs::path& root) {
  return {{"HOME", (root / "home").string()},
          {"npm_config_cache", (root / "cache").string()},
          {"npm_config_update_notifier", "false"},
          {"npm_config_userconfig", (root / "npmrc").string()}};
}

// The host's real npm installing `specs` globally under ROOT/prefix from the fake at `address`,
// with none of the host's proxy or registry settings.
Result<RunOutput> NpmInstall(const fs::path& root, const std::string& address,
                             std::vector<std::string> specs, std::chrono::seconds limit) {
  RunOptions o;
  o.env_set = NpmEnv(root);
  o.env_unset = {"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy",
                 "npm_config_proxy", "npm_config_https_proxy", "npm_config_registry"};
  o.timeout = limit;
  std::vector<std::string> argv = {"npm", "install", "-g", "--prefix", (root / "prefix").string(),
                                   "--registry", "http://" + address + "/", "--no-audit",
                                   "--no-fund", "--loglevel=http"};
  argv.insert(argv.end(), specs.begin(), specs.end());
  return RunProcess(argv, o);
}

TEST(NpmRegistryFakeTest, RealNpmInstallsFromItSkippingOtherPlatformsOptionalPackages) {
  if (!ProgramExists("npm")) GTEST_SKIP() << "npm is not installed here";
  fs::path root = fs::temp_directory_path() / ("cloister-npm-fake-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "tgz");
  fs::create_directories(root / "home");
  // The main package: a bin, platform packages by name (one for this host, one for another) and
  // by alias (as @openai/codex does), and a postinstall that proves the platform package is there.
  WritePackage(root / "src" / "tool",
               {{"name", "@cloister-test/tool"},
                {"version", "1.0.0"},
                {"bin", {{"cloister-test-tool", "bin.js"}}},
                {"optionalDependencies",
                 {{"@cloister-test/tool-linux-x64", "1.0.0"},
                  {"@cloister-test/tool-darwin-arm64", "1.0.0"},
                  {"@cloister-test/tool-win32-x64", "npm:@cloister-test/tool@1.0.0-win32-x64"},
                  {"@cloister-test/tool-alias-linux-x64", "npm:@cloister-test/tool@1.0.0-linux-x64"}}}},
               "#!/usr/bin/env node\n"
               "require('@cloister-test/tool-linux-x64');\n"
               "require('@cloister-test/tool-alias-linux-x64');\n"
               "console.log('cloister-test-tool 1.0.0 with its linux-x64 binaries');\n");
  WritePackage(root / "src" / "linux",
               {{"name", "@cloister-test/tool-linux-x64"}, {"version", "1.0.0"}, {"main", "bin.js"},
                {"os", {"linux"}}, {"cpu", {"x64"}}},
               "module.exports = 1;\n");
  WritePackage(root / "src" / "alias",
               {{"name", "@cloister-test/tool"}, {"version", "1.0.0-linux-x64"}, {"main", "bin.js"},
                {"os", {"linux"}}, {"cpu", {"x64"}}},
               "module.exports = 2;\n");
  for (const char* p : {"tool", "linux", "alias"}) {
    RunOptions o;
    o.env_set = NpmEnv(root);
    o.cwd = (root / "tgz").string();
    auto r = RunProcess({"npm", "pack", "--silent", (root / "src" / p).string()}, o);
    ASSERT_TRUE(r.ok() && r->success()) << (r.ok() ? r->err : r.error().ToString());
  }
  auto fake = NpmRegistryFake::Load((root / "tgz").string());
  ASSERT_TRUE(fake.ok()) << fake.error().ToString();
  ASSERT_EQ((*fake)->tarballs().size(), 3u);
  json doc = json::parse((*fake)->Packument("@cloister-test/tool", "http://r.test"));
  EXPECT_EQ(doc["dist-tags"]["latest"], "1.0.0");  // not the platform prerelease
  EXPECT_EQ(doc["versions"]["1.0.0"]["dist"]["tarball"],
            "http://r.test/@cloister-test/tool/-/tool-1.0.0.tgz");
  EXPECT_EQ(doc["versions"]["1.0.0"]["dist"]["integrity"].get<std::string>().rfind("sha512-", 0), 0u);
  EXPECT_EQ(doc["versions"]["1.0.0-win32-x64"]["os"][0], "cloister-unavailable");
  EXPECT_EQ((*fake)->Packument("@cloister-test/nothing", "http://r.test"), "");

  auto server = FakeUpstream::Start(nullptr, (*fake)->handler());
  ASSERT_TRUE(server.ok());
  auto install = NpmInstall(root, (*server)->Address(), {"@cloister-test/tool@1.0.0"},
                            std::chrono::seconds(240));
  ASSERT_TRUE(install.ok());
  ASSERT_EQ(install->exit_code, 0) << install->out << install->err;
  auto run = RunProcess({(root / "prefix" / "bin" / "cloister-test-tool").string()});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(Trim(run->out), "cloister-test-tool 1.0.0 with its linux-x64 binaries") << run->err;
  // The other platforms' packuments were asked for and their tarballs never.
  bool darwin_packument = false;
  for (const SeenRequest& r : (*server)->requests()) {
    if (r.target.find("darwin") != std::string::npos && r.target.find(".tgz") == std::string::npos) {
      darwin_packument = true;
    }
    EXPECT_EQ(r.target.find("/-/unavailable/"), std::string::npos) << r.target;
  }
  EXPECT_TRUE(darwin_packument);
  fs::remove_all(root);
}

// The pinned agents' real tarballs (cached by scripts/install-deps.sh test): the host's npm installs
// both from the fake (their other-platform optional packages skipped), and both CLIs run here.
TEST(NpmRegistryFakeTest, ThePinnedAgentsInstallFromTheCachedTarballs) {
  if (!ProgramExists("npm")) GTEST_SKIP() << "npm is not installed here";
  const std::string cache = image::NpmCacheDir();
  ASSERT_TRUE(fs::exists(cache + "/anthropic-ai-claude-code-2.1.332.tgz"))
      << "run scripts/install-deps.sh test (it caches the pinned tarballs in " << cache << ")";
  auto fake = NpmRegistryFake::Load(cache);
  ASSERT_TRUE(fake.ok()) << fake.error().ToString();
  auto server = FakeUpstream::Start(nullptr, (*fake)->handler());
  ASSERT_TRUE(server.ok());
  fs::path root = fs::temp_directory_path() / ("cloister-npm-agents-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "home");
  auto install = NpmInstall(root, (*server)->Address(),
                            {"@anthropic-ai/claude-code@2.1.332", "@openai/codex@0.171.0"},
                            std::chrono::seconds(600));
  ASSERT_TRUE(install.ok());
  ASSERT_EQ(install->exit_code, 0) << install->out << install->err;
  RunOptions run;
  run.env_set = {{"DISABLE_AUTOUPDATER", "1"}, {"HOME", (root / "home").string()}};
  run.timeout = std::chrono::seconds(120);
  auto claude = RunProcess({(root / "prefix" / "bin" / "claude").string(), "--version"}, run);
  ASSERT_TRUE(claude.ok());
  EXPECT_NE(claude->out.find("2.1.332"), std::string::npos) << claude->out << claude->err;
  auto codex = RunProcess({(root / "prefix" / "bin" / "codex").string(), "--version"}, run);
  ASSERT_TRUE(codex.ok());
  EXPECT_NE(codex->out.find("0.171.0"), std::string::npos) << codex->out << codex->err;
  fs::remove_all(root);
}

}  // namespace
}  // namespace cloister::proxy::testing

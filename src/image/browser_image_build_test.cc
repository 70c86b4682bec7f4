// `cloister image build --browser` into a temporary store: the browser image is signed into the
// local catalog with its recipe (version, post-install steps), `image verify` passes and fails
// once the signed catalog is tampered with, and the disk holds Chromium, certutil, nft and the
// boot hook but no package manager and no init system but busybox.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "base/subprocess.h"
#include "catalog/names.h"
#include "image/boot_hook.h"
#include "image/builder.h"
#include "image/debs.h"
#include "image/testing.h"

namespace cloister::image {
namespace {

namespace fs = std::filesystem;

// debugfs's output; with `with_err` also its stderr (where "File not found" goes).
std::string Debugfs(const std::string& disk, const std::string& request, bool with_err = true) {
  auto r = RunProcess({"debugfs", "-R", request, disk});
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->out + (with_err ? r->err : "") : "";
}

TEST(DependencyClosureTest, TakesApt_sInstLinesInOrder) {
  const std::string out =
      "Reading package lists...\n"
      "The following NEW packages will be installed:\n"
      "  chromium libc6\n"
      "Inst gcc-12-base (12.2.0-14 Debian:12.8/stable [amd64])\n"
      "Inst libc6 (2.36-9+deb12u9 Debian:12.8/stable [amd64])\n"
      "Conf libc6 (2.36-9+deb12u9 Debian:12.8/stable [amd64])\n"
      "Inst chromium (156.0.8078.114-1~deb12u1 Debian-Security:12/stable-security [amd64])\n";
  EXPECT_EQ(ParseSimulatedInstalls(out),
            (std::vector<std::string>{"gcc-12-base", "libc6", "chromium"}));
  EXPECT_TRUE(ParseSimulatedInstalls("E: Unable to locate package nope\n").empty());
}

TEST(BrowserImageBuildTest, SignedWithItsRecipeAndHoldsChromiumButNoPackageManager) {
  const char* bin_dir = getenv("CLOISTER_BINARY_DIR");
  ASSERT_NE(bin_dir, nullptr);
  std::string cloister = std::string(bin_dir) + "/src/cli/cloister";
  testing::TempDir t;
  std::string store = t.path() + "/store";
  // The tests' shared package cache instead of downloading into the temporary store.
  fs::create_directories(store + "/cache");
  fs::create_directory_symlink(testing::TestCacheDir(), store + "/" + catalog::names::kDebCacheDir);
  RunOptions ro;
  ro.env_set = {{"CLOISTER_HOME", store}};
  ro.timeout = std::chrono::seconds(800);
  auto built = RunProcess({cloister, "image", "build", "--browser"}, ro);
  ASSERT_TRUE(built.ok()) << built.error().ToString();
  std::cerr << built->out << built->err;
  ASSERT_TRUE(built->success()) << built->err;
  EXPECT_NE(built->out.find("built browser " + std::string(kBrowserRecipeVersion) + "+linux-"),
            std::string::npos)
      << built->out;

  auto ls = RunProcess({cloister, "image", "ls", "--json"}, ro);
  ASSERT_TRUE(ls.ok() && ls->success());
  auto images = nlohmann::json::parse(ls->out, nullptr, false);
  ASSERT_TRUE(images.is_array()) << ls->out;
  nlohmann::json entry;
  for (const auto& i : images) {
    if (i.value("name", "") == kBrowserImageName) entry = i;
  }
  ASSERT_TRUE(entry.is_object()) << ls->out;
  EXPECT_EQ(entry.value("channel", ""), "local");
  std::string version = entry.value("version", "");
  EXPECT_EQ(version.rfind(std::string(kBrowserRecipeVersion) + "+linux-", 0), 0u) << version;
  EXPECT_NE(version.find("+chromium-156."), std::string::npos) << version;
  // The recipe is recorded and signed: its post-install steps, the boot hook verbatim.
  std::ifstream cat_in(store + "/catalogs/local/catalog.json");
  std::string catalog_text((std::istreambuf_iterator<char>(cat_in)), std::istreambuf_iterator<char>());
  auto catalog = nlohmann::json::parse(catalog_text, nullptr, false);
  ASSERT_TRUE(catalog.is_object()) << catalog_text.substr(0, 400);
  std::vector<std::string> steps;
  for (const auto& img : catalog["images"]) {
    if (img.value("name", "") != kBrowserImageName) continue;
    for (const auto& s : img["post_install"]) {
      steps.push_back(s.value("name", ""));
      if (s.value("name", "") == "boot-hook") {
        EXPECT_EQ(s.value("command", ""), BootHookStep().command);
      }
    }
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"prune", "busybox-links", "users", "init",
                                             "browser-prune", "ca-bundle", "browser-dirs",
                                             "boot-hook"}));

  auto verify = RunProcess({cloister, "image", "verify", kBrowserImageName}, ro);
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->success()) << verify->out << verify->err;

  // What the image holds, read from its disk on the host.
  std::string disk = store + "/images/" + kBrowserImageName + "/" + catalog::names::kDiskFile;
  for (const char* present : {"/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/certutil",
                              "/usr/sbin/nft", "/bin/busybox", "/usr/lib/cloister/boot-hook",
                              "/etc/ssl/certs/ca-certificates.crt",
                              "/usr/lib/chromium/locales/en-US.pak"}) {
    EXPECT_EQ(Debugfs(disk, std::string("stat ") + present).find("not found"), std::string::npos)
        << present;
  }
  // (busybox's dpkg applet links /usr/bin/dpkg, but there is no dpkg database or apt)
  for (const char* absent : {"/var/lib/dpkg/status", "/usr/bin/apt-get", "/usr/lib/apt", "/lib/systemd/systemd",
                             "/usr/bin/perl", "/usr/bin/node", "/usr/bin/tmux",
                             "/usr/lib/chromium/locales/de.pak"}) {
    EXPECT_NE(Debugfs(disk, std::string("stat ") + absent).find("not found"), std::string::npos)
        << absent;
  }
  EXPECT_EQ(Debugfs(disk, "cat /usr/lib/cloister/boot-hook", false), BootHookScript());

  // Tampering with the signed catalog (one byte of a step's shell text) makes verify fail.
  size_t at = catalog_text.find("en-US.pak");
  ASSERT_NE(at, std::string::npos);
  catalog_text[at + 4] = 'T';
  std::ofstream(store + "/catalogs/local/catalog.json", std::ios::trunc) << catalog_text;
  auto tampered = RunProcess({cloister, "image", "verify", kBrowserImageName}, ro);
  ASSERT_TRUE(tampered.ok());
  EXPECT_FALSE(tampered->success()) << tampered->out;
  EXPECT_NE(tampered->err.find("signature"), std::string::npos) << tampered->err;
  std::cerr << "tampered catalog: " << tampered->err;
}

}  // namespace
}  // namespace cloister::image

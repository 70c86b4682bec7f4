// Builds the test image twice and checks it is reproducible and holds what the contracts say.
#include <gtest/gtest.h>

#include <iostream>

#include "base/strings.h"
#include "base/subprocess.h"
#include "catalog/sha256.h"
#include "image/boot_hook.h"
#include "image/builder.h"
#include "image/npm_tarball.h"
#include "image/testing.h"

namespace cloister::image {
namespace {

using testing::TempDir;
using testing::TestCacheDir;

std::string Debugfs(const std::string& disk, const std::string& request) {
  auto r = RunProcess({"debugfs", "-R", request, disk});
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->out : "";
}

TEST(TestImageBuildTest, TwoBuildsAreByteIdenticalAndFollowTheContracts) {
  TempDir t;
  std::vector<std::string> lines;
  BuildOptions o;
  o.cache_dir = TestCacheDir();
  o.progress = [&](const std::string& l) {
    lines.push_back(l);
    std::cerr << l << "\n";
  };
  o.out_dir = t.path() + "/a";
  auto a = BuildTestImage(o);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  o.out_dir = t.path() + "/b";
  o.work_dir = t.path() + "/elsewhere-work";  // a different scratch path must not matter
  auto b = BuildTestImage(o);
  ASSERT_TRUE(b.ok()) << b.error().ToString();

  ASSERT_EQ(a->artifacts.size(), 3u);
  EXPECT_EQ(*a, *b);  // same artifacts (sizes and SHA-256), steps, version
  for (const auto& art : a->artifacts) {
    auto d = catalog::Sha256File(t.path() + "/b/" + art.file);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->sha256, art.sha256) << art.file;
    EXPECT_EQ(d->size, art.size) << art.file;
  }
  EXPECT_EQ(a->name, kTestImageName);
  EXPECT_NE(a->kernel_cmdline.find("root=/dev/vda rw console=ttyS0"), std::string::npos);

  // Progress: one numbered line per stage with a duration.
  bool saw_disk = false;
  for (const auto& l : lines) saw_disk = saw_disk || l.find("[5/6] disk: raw ext4") != std::string::npos;
  EXPECT_TRUE(saw_disk);

  // The boot hook is recorded as a post-install step and is in the disk verbatim.
  bool recorded = false;
  for (const auto& s : a->post_install) recorded = recorded || s == BootHookStep();
  EXPECT_TRUE(recorded);
  std::string disk = t.path() + "/a/disk.raw";
  EXPECT_EQ(Debugfs(disk, "cat /usr/lib/cloister/boot-hook"), BootHookScript());
  std::string hook_stat = Debugfs(disk, "stat /usr/lib/cloister/boot-hook");
  EXPECT_NE(hook_stat.find("Mode:  0755"), std::string::npos) << hook_stat;
  // dev is uid/gid 1000 and owns an empty /home/dev.
  std::string home = Debugfs(disk, "stat /home/dev");
  EXPECT_NE(home.find("User:  1000   Group:  1000"), std::string::npos) << home;
  int entries = 0;  // "ls -p" prints one line per entry: only "." and ".." in an empty dir
  for (const auto& line : Split(Debugfs(disk, "ls -p /home/dev"), '\n')) {
    if (!Trim(line).empty()) ++entries;
  }
  EXPECT_EQ(entries, 2);
  EXPECT_NE(Debugfs(disk, "cat /etc/passwd").find("dev:x:1000:1000:dev:/home/dev:"),
            std::string::npos);
  // tmux and its locale are there; the agent is not.
  EXPECT_NE(Debugfs(disk, "stat /usr/bin/tmux").find("Type: regular"), std::string::npos);
  EXPECT_NE(Debugfs(disk, "stat /usr/lib/locale/C.utf8/LC_CTYPE").find("Type: regular"),
            std::string::npos);
  // Recipe 4: Debian's Node with npm 10 on PATH, and nft for the agent's egress redirect.
  EXPECT_NE(Debugfs(disk, "stat /usr/bin/node").find("Type: regular"), std::string::npos);
  EXPECT_NE(Debugfs(disk, "stat /usr/sbin/nft").find("Type: regular"), std::string::npos);
  EXPECT_NE(Debugfs(disk, "stat /usr/local/bin/npm").find("Type: symlink"), std::string::npos);
  EXPECT_NE(Debugfs(disk, "cat /usr/local/lib/node_modules/npm/package.json")
                .find("\"version\": \"" + std::string(kTestImageNpm.version) + "\""),
            std::string::npos);
  EXPECT_NE(a->version.find("+npm-" + std::string(kTestImageNpm.version)), std::string::npos)
      << a->version;
  auto dump = RunProcess({"debugfs", "-R", "ls -p /usr/lib/cloister", disk});
  ASSERT_TRUE(dump.ok());
  EXPECT_EQ(dump->out.find("cloister-agent"), std::string::npos);
  // Fixed filesystem UUID (not random).
  auto dumpe2fs = RunProcess({"dumpe2fs", "-h", disk});
  ASSERT_TRUE(dumpe2fs.ok());
  EXPECT_NE(dumpe2fs->out.find(DeterministicUuid("cloister-image/test/uuid")), std::string::npos);
}

}  // namespace
}  // namespace cloister::image

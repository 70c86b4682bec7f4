// The full debian-12 build (mmdebstrap; minutes, root, network to Debian's archive). Label
// opt-in: runs with CLOISTER_TEST_ALL=1 (scripts/test.sh) or `ctest -L opt-in`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "base/subprocess.h"
#include "image/boot_hook.h"
#include "image/builder.h"
#include "image/testing.h"

namespace cloister::image {
namespace {

std::string Debugfs(const std::string& disk, const std::string& request) {
  auto r = RunProcess({"debugfs", "-R", request, disk});
  return r.ok() ? r->out : "";
}

TEST(FullImageTest, BuildsDebianWithSystemdUserDevSudoAndTheBootHook) {
  if (geteuid() != 0) GTEST_SKIP() << "the full image build needs root";
  testing::TempDir t;
  BuildOptions o;
  o.out_dir = t.path() + "/img";
  o.progress = [](const std::string& l) { std::cerr << l << "\n"; };
  auto e = BuildFullImage(o);
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  EXPECT_EQ(e->name, kFullImageName);
  ASSERT_EQ(e->artifacts.size(), 3u);
  std::string disk = o.out_dir + "/disk.raw";
  EXPECT_EQ(Debugfs(disk, "cat /usr/lib/cloister/boot-hook"), BootHookScript());
  EXPECT_NE(Debugfs(disk, "cat /etc/systemd/system/cloister-boot.service")
                .find("ExecStart=/usr/lib/cloister/boot-hook"),
            std::string::npos);
  EXPECT_NE(Debugfs(disk, "stat /etc/systemd/system/multi-user.target.wants/cloister-boot.service")
                .find("Type: symlink"),
            std::string::npos);
  EXPECT_NE(Debugfs(disk, "cat /etc/sudoers.d/cloister-dev").find("dev ALL=(ALL) NOPASSWD:ALL"),
            std::string::npos);
  EXPECT_NE(Debugfs(disk, "cat /etc/passwd").find("dev:x:1000:1000::/home/dev:/bin/bash"),
            std::string::npos);
  EXPECT_NE(Debugfs(disk, "stat /home/dev").find("User:  1000   Group:  1000"), std::string::npos);
  for (const char* bin : {"/usr/bin/git", "/usr/bin/curl", "/usr/bin/ssh", "/usr/bin/tmux",
                          "/usr/bin/python3", "/usr/bin/node", "/usr/bin/npm", "/usr/bin/gcc",
                          "/usr/bin/sudo", "/lib/systemd/systemd", "/usr/sbin/sshd",
                          "/usr/bin/rsync"}) {
    EXPECT_EQ(Debugfs(disk, std::string("stat ") + bin).find("not found"), std::string::npos)
        << bin;
  }
  for (const std::string& unit : MaskedUnits()) {
    EXPECT_NE(Debugfs(disk, "stat /etc/systemd/system/" + unit).find("Type: symlink"),
              std::string::npos)
        << unit << " is not masked";
  }
  std::string blacklist = Debugfs(disk, "cat /etc/modprobe.d/cloister-vm.conf");
  for (const std::string& m : UnloadedModules()) {
    EXPECT_NE(blacklist.find("blacklist " + m + "\n"), std::string::npos) << m;
  }
  // The initramfs of the root's drivers only: Debian's MODULES=most one was 35 MiB.
  EXPECT_NE(Debugfs(disk, "cat /etc/initramfs-tools/conf.d/cloister").find("MODULES=list"),
            std::string::npos);
  EXPECT_LT(std::filesystem::file_size(o.out_dir + "/initrd.img"), 16u << 20);
  EXPECT_EQ(Debugfs(disk, "stat /usr/lib/cloister/cloister-agent").find("Type: regular"),
            std::string::npos);
  // IDE access (guest/sshd.h): sshd runs only per channel stream, so the image's own service is
  // masked and it carries no host keys; dev is not locked ("!"), which sshd without PAM refuses.
  for (const char* unit : {"ssh.service", "ssh.socket"}) {
    EXPECT_NE(Debugfs(disk, std::string("stat /etc/systemd/system/") + unit).find("Type: symlink"),
              std::string::npos)
        << unit << " is not masked";
  }
  EXPECT_NE(Debugfs(disk, "ls /etc/ssh").find("sshd_config"), std::string::npos);
  EXPECT_EQ(Debugfs(disk, "ls /etc/ssh").find("ssh_host_"), std::string::npos) << "host keys baked in";
  std::string shadow = Debugfs(disk, "cat /etc/shadow");
  EXPECT_NE(shadow.find("\ndev:"), std::string::npos) << shadow;
  EXPECT_EQ(shadow.find("\ndev:!"), std::string::npos) << "dev is locked: sshd without PAM refuses it";
}

}  // namespace
}  // namespace cloister::image

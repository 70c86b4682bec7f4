// Boots the test image under TCG with a fake agent on a metadata disk and checks that the boot hook
// mounted the metadata disk read-only and exec'd the agent with --meta, as user dev's world
// expects (tmux runs, dev is uid 1000, /home/dev exists).
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "base/subprocess.h"
#include "image/boot_hook.h"
#include "image/build_util.h"
#include "image/builder.h"
#include "image/testing.h"

namespace cloister::image {
namespace {

using testing::TempDir;
using testing::TestCacheDir;

constexpr char kFakeAgent[] = R"AGENT(#!/bin/sh
echo "FAKE-AGENT-START args=$*"
grep " /run/cloister/meta " /proc/mounts | sed 's/^/FAKE-AGENT-MOUNT /'
echo "FAKE-AGENT-ID $(id dev)"
echo "FAKE-AGENT-HOME $(ls -ld /home/dev | awk '{print $1, $3}')"
export LANG=C.UTF-8 TERM=xterm
echo "FAKE-AGENT-TMUX $(/usr/bin/tmux -V)"
/usr/bin/tmux -S /tmp/t new-session -d 'sleep 30' && echo "FAKE-AGENT-TMUX-SESSION $(/usr/bin/tmux -S /tmp/t ls | cut -d: -f1)"
echo "FAKE-AGENT-CURL $(/usr/bin/curl --version | head -n 1 | cut -d' ' -f1-2)"
echo "FAKE-AGENT-DONE"
poweroff -f
)AGENT";

TEST(TestImageBootTest, BootsUnderTcgAndRunsTheAgentFromTheMetadataDisk) {
  TempDir t;
  BuildOptions o;
  o.cache_dir = TestCacheDir();
  o.out_dir = t.path() + "/img";
  o.progress = [](const std::string& l) { std::cerr << l << "\n"; };
  auto entry = BuildTestImage(o);
  ASSERT_TRUE(entry.ok()) << entry.error().ToString();

  // Metadata disk: ext4 labelled CLOISTER-META holding the fake agent.
  std::string meta_dir = t.path() + "/meta";
  ASSERT_TRUE(MakeDirs(meta_dir).ok());
  ASSERT_TRUE(WriteFile(meta_dir + "/" + kAgentName, kFakeAgent, 0755).ok());
  auto mk = RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", kMetaLabel, "-d", meta_dir,
                               t.path() + "/meta.img", "4M"});
  ASSERT_TRUE(mk.ok()) << mk.error().ToString();
  auto home = RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", "cloister-home",
                                 t.path() + "/home.img", "16M"});
  ASSERT_TRUE(home.ok()) << home.error().ToString();

  RunOptions run;
  run.timeout = std::chrono::seconds(240);  // bound; the guest powers off as soon as it is done
  auto start = std::chrono::steady_clock::now();
  auto q = RunProcess(
      {"qemu-system-x86_64", "-accel", "tcg", "-M", "q35", "-m", "512", "-smp", "1",
       "-nographic", "-nodefaults", "-no-user-config", "-serial", "stdio", "-no-reboot",
       "-kernel", o.out_dir + "/vmlinuz", "-initrd", o.out_dir + "/initrd.img",
       "-append", entry->kernel_cmdline + " quiet panic=-1",
       "-drive", "file=" + o.out_dir + "/disk.raw,format=raw,if=virtio,snapshot=on",
       "-drive", "file=" + t.path() + "/home.img,format=raw,if=virtio",
       "-drive", "file=" + t.path() + "/meta.img,format=raw,if=virtio,readonly=on"},
      run);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(q.ok()) << q.error().ToString();
  std::cerr << "boot to agent and poweroff: " << secs << " s\n" << q->out << q->err;
  ASSERT_FALSE(q->timed_out) << q->out;
  const std::string& out = q->out;
  EXPECT_NE(out.find("cloister-boot-hook: starting /run/cloister/meta/cloister-agent"),
            std::string::npos);
  EXPECT_NE(out.find("FAKE-AGENT-START args=--meta /run/cloister/meta"), std::string::npos);
  EXPECT_NE(out.find("FAKE-AGENT-MOUNT /dev/vdc /run/cloister/meta ext4 ro,"), std::string::npos);
  EXPECT_NE(out.find("FAKE-AGENT-ID uid=1000(dev) gid=1000(dev)"), std::string::npos);
  EXPECT_NE(out.find("FAKE-AGENT-HOME drwxr-xr-x dev"), std::string::npos);
  EXPECT_NE(out.find("FAKE-AGENT-TMUX tmux 3."), std::string::npos);
  EXPECT_NE(out.find("FAKE-AGENT-TMUX-SESSION 0"), std::string::npos);
  EXPECT_NE(out.find("FAKE-AGENT-CURL curl 7."), std::string::npos);  // Debian's real client
  EXPECT_NE(out.find("FAKE-AGENT-DONE"), std::string::npos);
  // The boot scripts (rcS, the hook) run only what the image has (busybox has no mountpoint).
  EXPECT_EQ(out.find("not found"), std::string::npos) << "a boot script ran a missing command";
}

}  // namespace
}  // namespace cloister::image

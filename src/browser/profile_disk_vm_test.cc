// The encrypted profile disk in a real guest (label vm, TCG): the test image boots paused (-S),
// the profile is attached over QMP with its key sent on the QMP socket only (AttachProfile), the
// guest mounts it and writes a cookie-like marker and page text (and the same to an unencrypted
// control disk), syncs and powers off. On the host: the profile file holds no plaintext of either
// while the control disk does (the search works); QEMU's argv and environment and the run
// directory hold no key; a wrong key is refused; a second boot reads the marker back; after
// DestroyProfile the file and the key are gone.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "base/file_util.h"
#include "base/subprocess.h"
#include "browser/profile_disk.h"
#include "image/boot_hook.h"
#include "image/build_util.h"
#include "image/testing.h"
#include "vault/crypto.h"
#include "vault/vault.h"
#include "vm/qmp.h"

namespace cloister::browser {
namespace {

namespace fs = std::filesystem;
using image::testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t CountHits(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// The fake agent: finds the disks by virtio serial, then writes (phase "write") or reads back
// (phase "read") the marker files, and powers off.
constexpr char kAgent[] = R"AGENT(#!/bin/sh
M=/run/cloister/meta
PHASE=$(cat $M/phase)
echo "AGENT-START phase=$PHASE"
find_dev() { for d in /sys/block/vd*; do [ "$(cat $d/serial 2>/dev/null)" = "$1" ] && echo /dev/${d##*/}; done; }
P=$(find_dev cloister-profile); C=$(find_dev cloister-plain)
echo "AGENT-DEVS profile=$P plain=$C"
mkdir -p /var/lib/cloister-browser /mnt/plain
mount -t ext4 "$P" /var/lib/cloister-browser && echo AGENT-PROFILE-MOUNTED
mount -t ext4 "$C" /mnt/plain && echo AGENT-PLAIN-MOUNTED
if [ "$PHASE" = write ]; then
  for dir in /var/lib/cloister-browser /mnt/plain; do
    mkdir -p $dir/Default
    cp $M/cookie $dir/Default/Cookies
    i=0; while [ $i -lt 64 ]; do cat $M/page; i=$((i+1)); done > $dir/Default/page.txt
  done
  sync
  echo "AGENT-WROTE $(wc -c < /var/lib/cloister-browser/Default/page.txt)"
else
  echo "AGENT-READ-BACK $(cat /var/lib/cloister-browser/Default/Cookies)"
fi
umount /var/lib/cloister-browser /mnt/plain; sync
echo AGENT-DONE
poweroff -f
)AGENT";

class ProfileVmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    auto img = image::testing::SharedTestImage();
    ASSERT_TRUE(img.ok()) << img.error().ToString();
    img_ = *img;
    fs::create_directories(t_.path() + "/keys");
    fs::create_directories(t_.path() + "/ws");
    fs::create_directories(t_.path() + "/run");
    loc_ = ProfileLocation{t_.path() + "/keys", t_.path() + "/ws", "web"};
    ASSERT_TRUE(RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", "cloister-plain",
                                   t_.path() + "/plain.img", "64M"}).ok());
  }

  Status MakeMeta(const std::string& phase) {
    std::string dir = t_.path() + "/meta-" + phase;
    RETURN_IF_ERROR(image::MakeDirs(dir));
    RETURN_IF_ERROR(WriteFile(dir + "/" + image::kAgentName, kAgent, 0755));
    RETURN_IF_ERROR(WriteFile(dir + "/phase", phase + "\n"));
    RETURN_IF_ERROR(WriteFile(dir + "/cookie", cookie_ + "\n"));
    RETURN_IF_ERROR(WriteFile(dir + "/page", page_ + "\n"));
    std::string meta = t_.path() + "/run/meta.img";
    fs::remove(meta);
    auto mk = RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", image::kMetaLabel, "-d", dir,
                                 meta, "4M"});
    if (!mk.ok()) return mk.error();
    return OkStatus();
  }

  // Boots paused, runs `attach` on the QMP socket, then `cont` (or `quit` if attach failed);
  // returns the serial console output. `inspect` runs while QEMU is up, after the attach.
  Result<RunOutput> Boot(const std::function<Status(vm::QmpClient&)>& attach,
                         const std::function<void(pid_t)>& inspect) {
    const std::string run = t_.path() + "/run";
    const std::string qmp_sock = run + "/qmp.sock";
    const std::string pidfile = run + "/qemu.pid";
    fs::remove(qmp_sock);
    fs::remove(pidfile);
    std::vector<std::string> argv = {
        "qemu-system-x86_64", "-accel", "tcg", "-M", "q35", "-m", "512", "-smp", "1",
        "-nographic", "-nodefaults", "-no-user-config", "-serial", "stdio", "-no-reboot", "-S",
        "-pidfile", pidfile, "-qmp", "unix:" + qmp_sock + ",server=on,wait=off",
        "-kernel", img_.dir + "/vmlinuz", "-initrd", img_.dir + "/initrd.img",
        "-append", img_.entry.kernel_cmdline + " quiet panic=-1",
        // vda system (throwaway overlay), vdb the control disk, vdc metadata; the profile after.
        "-drive", "file=" + img_.dir + "/disk.raw,format=raw,if=none,id=sys,snapshot=on",
        "-device", "virtio-blk-pci,drive=sys",
        "-drive", "file=" + t_.path() + "/plain.img,format=raw,if=none,id=plain",
        "-device", "virtio-blk-pci,drive=plain,serial=cloister-plain",
        "-drive", "file=" + run + "/meta.img,format=raw,if=none,id=meta,readonly=on",
        "-device", "virtio-blk-pci,drive=meta",
        // q35's root bus takes no hotplug: the profile goes behind a root port.
        "-device", "pcie-root-port,id=rp-profile,chassis=1"};
    RunOutput out;
    Status qemu_status = OkStatus();
    std::thread qemu([&] {
      RunOptions o;
      o.timeout = std::chrono::seconds(900);  // a bound; the guest powers off when done
      auto r = RunProcess(argv, o);
      if (r.ok()) {
        out = *r;
      } else {
        qemu_status = r.error();
      }
    });
    auto qmp = vm::QmpClient::Connect(qmp_sock, std::chrono::seconds(60));
    Status attached = qmp.ok() ? attach(**qmp) : Status(qmp.error());
    if (attached.ok()) {
      pid_t pid = 0;
      std::ifstream(pidfile) >> pid;
      inspect(pid);
      attached = (*qmp)->Execute("cont").ok() ? OkStatus()
                                              : Status(Error(ErrorCode::kIo, "QMP cont failed"));
    }
    if (!attached.ok() && qmp.ok()) (void)(*qmp)->Execute("quit");
    qemu.join();
    if (!attached.ok()) return attached.error();
    if (!qemu_status.ok()) return qemu_status.error();
    std::cerr << out.out << out.err;
    return out;
  }

  // SECURITY check: no form of the key in QEMU's argv or environment or any run-dir file.
  void ExpectNoKeyOutsideQmp(pid_t pid, const ProfileDisk& d) {
    ASSERT_GT(pid, 0);
    std::string pass = d.Passphrase();
    std::vector<std::string> forms = {d.key, pass, vault::Base64Encode(pass)};
    std::string cmdline = ReadAll("/proc/" + std::to_string(pid) + "/cmdline");
    std::string environ = ReadAll("/proc/" + std::to_string(pid) + "/environ");
    ASSERT_NE(cmdline.find("qemu-system-x86_64"), std::string::npos);  // the right process
    for (const std::string& f : forms) {
      EXPECT_EQ(CountHits(cmdline, f), 0u) << "key in QEMU's argv";
      EXPECT_EQ(CountHits(environ, f), 0u) << "key in QEMU's environment";
      for (const auto& e : fs::recursive_directory_iterator(t_.path() + "/run")) {
        if (!e.is_regular_file()) continue;
        EXPECT_EQ(CountHits(ReadAll(e.path()), f), 0u) << "key in " << e.path();
      }
    }
    ++inspected_;
  }

  TempDir t_;
  image::testing::SharedImage img_;
  ProfileLocation loc_;
  int inspected_ = 0;
  std::string cookie_;
  std::string page_;
};

TEST_F(ProfileVmTest, GuestWritesStayEncryptedOnTheHostPersistAndDieWithDestroy) {
  auto rnd = vault::RandomBytes(8);
  ASSERT_TRUE(rnd.ok());
  std::string tag = vault::Base64Encode(*rnd, /*url=*/true, /*pad=*/false);
  cookie_ = "SID=cookie-marker-" + tag + "; Domain=example.test; Secure; HttpOnly";
  page_ = "Welcome back, page-text-" + tag + ": your saved session is open.";

  auto d = EnsureProfileDisk(loc_, 256ull << 20);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  AttachOptions ao;
  ao.bus = "rp-profile";

  // Boot 1: the guest writes.
  ASSERT_TRUE(MakeMeta("write").ok());
  auto b1 = Boot([&](vm::QmpClient& q) { return AttachProfile(q, *d, ao); },
                 [&](pid_t pid) { ExpectNoKeyOutsideQmp(pid, *d); });
  ASSERT_TRUE(b1.ok()) << b1.error().ToString();
  ASSERT_FALSE(b1->timed_out) << b1->out;
  const std::string& o1 = b1->out;
  EXPECT_NE(o1.find("AGENT-PROFILE-MOUNTED"), std::string::npos) << o1;
  EXPECT_NE(o1.find("AGENT-PLAIN-MOUNTED"), std::string::npos) << o1;
  ASSERT_NE(o1.find("AGENT-WROTE"), std::string::npos) << o1;
  ASSERT_NE(o1.find("AGENT-DONE"), std::string::npos) << o1;

  // The host's view: the profile file has neither marker; the control disk has both.
  std::string cookie_marker = "cookie-marker-" + tag;
  std::string page_marker = "page-text-" + tag;
  std::string profile_bytes = ReadAll(loc_.DiskPath());
  std::string plain_bytes = ReadAll(t_.path() + "/plain.img");
  ASSERT_GT(profile_bytes.size(), 1u << 20);
  EXPECT_EQ(CountHits(profile_bytes, cookie_marker), 0u) << "cookie in plaintext on the host";
  EXPECT_EQ(CountHits(profile_bytes, page_marker), 0u) << "page text in plaintext on the host";
  EXPECT_GT(CountHits(plain_bytes, cookie_marker), 0u) << "the search cannot find plaintext";
  EXPECT_GE(CountHits(plain_bytes, page_marker), 64u);

  // Boot 2: a wrong key is refused (and leaves nothing attached); the right one reads it back.
  ASSERT_TRUE(MakeMeta("read").ok());
  Status wrong_status = OkStatus();
  auto b2 = Boot(
      [&](vm::QmpClient& q) -> Status {
        ProfileDisk wrong;
        wrong.path = d->path;
        wrong.key = std::string(kProfileKeyBytes, '\x5a');
        wrong_status = AttachProfile(q, wrong, ao);
        if (wrong_status.ok()) return Error(ErrorCode::kInternal, "a wrong key opened the profile");
        return AttachProfile(q, *d, ao);  // same ids: the failed attempt left nothing behind
      },
      [&](pid_t pid) { ExpectNoKeyOutsideQmp(pid, *d); });
  ASSERT_FALSE(wrong_status.ok());
  EXPECT_EQ(wrong_status.error().code(), ErrorCode::kPermissionDenied)
      << wrong_status.error().ToString();
  ASSERT_TRUE(b2.ok()) << b2.error().ToString();
  ASSERT_FALSE(b2->timed_out) << b2->out;
  EXPECT_NE(b2->out.find("AGENT-READ-BACK " + cookie_), std::string::npos) << b2->out;
  EXPECT_EQ(inspected_, 2);

  // Destroy: file and key gone.
  ASSERT_TRUE(DestroyProfile(loc_).ok());
  EXPECT_FALSE(fs::exists(loc_.DiskPath()));
  auto v = vault::Vault::Open({loc_.keys_dir, loc_.SecretsPath(), loc_.workspace});
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_EQ(v->FindBlob(kProfileKeyBlob), nullptr);
}

}  // namespace
}  // namespace cloister::browser

// The cross-workspace residue test (issue 7), in real VMs under TCG with the real static agent and
// the real static cloister-audit on the metadata disk:
//   A: fills its home and system disk with canary .env files, SQLite-headed files and random data,
//      deletes them, powers off, and its files are deleted (as `rm` does).
//   B: fresh disks made the way the store makes them (qcow2 overlay of the base image; a fresh
//      sparse mkfs'd home), boots, runs the audit as root and a raw read of every block device for
//      the canaries: zero canary bytes and zero foreign bytes.
//   B': the deliberately broken variant (non-sparse copies of A's old disk files): the same checks
//      must find A's canaries and foreign bytes, proving the test can fail.
// QEMU is started here with the contract's devices (docs/design.md) rather than through the
// supervisor, so this test depends only on the image, channel and agent pieces.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "audit/host.h"
#include "audit/probe.h"
#include "audit/report.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "channel/exec_client.h"
#include "channel/mux.h"
#include "image/testing.h"

namespace cloister::audit {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Ran {
  Result<channel::ExecExit> exit{Error(ErrorCode::kInternal, "")};
  std::string out;
  std::string err;
};

// One VM: QEMU on the given system disk (qcow2) and home (raw), the metadata disk, the channel.
class Vm {
 public:
  Vm(const std::string& dir, const image::testing::SharedImage& image, const std::string& system,
     const std::string& home, const std::string& meta, bool home_discard)
      : dir_(dir) {
    sock_ = dir + "/channel.sock";
    serial_ = dir + "/serial.log";
    pidfile_ = dir + "/qemu.pid";
    std::vector<std::string> argv = {
        "qemu-system-x86_64", "-accel", "tcg", "-M", "q35", "-m", "512", "-smp", "1",
        "-nographic", "-nodefaults", "-no-user-config", "-serial", "file:" + serial_,
        "-no-reboot", "-pidfile", pidfile_, "-kernel", image.dir + "/vmlinuz",
        "-initrd", image.dir + "/initrd.img", "-append", image.entry.kernel_cmdline + " panic=-1",
        "-drive", "file=" + system + ",format=qcow2,if=virtio,discard=unmap",
        "-drive", "file=" + home + ",format=raw,if=virtio," +
                      std::string(home_discard ? "discard=unmap" : "discard=ignore"),
        "-drive", "file=" + meta + ",format=raw,if=virtio,readonly=on",
        "-device", "virtio-rng-pci",
        "-device", "virtio-serial-pci,id=vser0",
        "-chardev", "socket,id=channel,path=" + sock_ + ",server=on,wait=off",
        "-device", "virtserialport,bus=vser0.0,chardev=channel,name=org.cloister.channel.0"};
    RunOptions ro;
    ro.timeout = std::chrono::seconds(1200);
    runner_ = std::thread([this, argv, ro] { qemu_ = RunProcess(argv, ro); });
  }

  ~Vm() {
    if (mux_) mux_->Stop();
    if (runner_.joinable()) {
      std::ifstream f(pidfile_);
      pid_t pid = 0;
      if (f >> pid && pid > 0) kill(pid, SIGKILL);
      runner_.join();
    }
  }

  // Connects to the channel and waits for the agent's READY.
  Status WaitReady() {
    int fd = -1;
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (fd < 0 && std::chrono::steady_clock::now() < deadline) {
      int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::strncpy(a.sun_path, sock_.c_str(), sizeof a.sun_path - 1);
      if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        fd = s;
      } else {
        close(s);
        pollfd none{-1, 0, 0};
        poll(&none, 0, 50);  // QEMU is starting; its socket gives no event to wait on
      }
    }
    if (fd < 0) return Error(ErrorCode::kUnavailable, "QEMU never created " + sock_);
    channel::MuxOptions mo;
    mo.on_ready = [this](const std::string& info) {
      std::lock_guard<std::mutex> l(mu_);
      ready_ = true;
      cv_.notify_all();
    };
    auto mux = channel::Mux::Create(fd, mo);
    if (!mux.ok()) return mux.error();
    mux_ = std::move(mux).value();
    RETURN_IF_ERROR(mux_->Start());
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, 300s, [&] { return ready_; })) {
      return Error(ErrorCode::kUnavailable, "no READY from the agent: " + Serial());
    }
    return OkStatus();
  }

  Ran Exec(const std::vector<std::string>& argv, const std::string& user = "root") {
    Ran ran;
    auto fd = mux_->Open(channel::kExecService, {}, 60s);
    if (!fd.ok()) {
      ran.exit = fd.error();
      return ran;
    }
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) std::abort();
    auto drain = [](int rfd, std::string& into) {
      return std::thread([rfd, &into] {
        char buf[65536];
        ssize_t n;
        while ((n = read(rfd, buf, sizeof buf)) > 0) {
          if (into.size() < kMaxReportBytes) into.append(buf, static_cast<size_t>(n));
        }
      });
    };
    std::thread ro = drain(out[0], ran.out), re = drain(err[0], ran.err);
    channel::ExecRequest r;
    r.argv = argv;
    r.user = user;
    ran.exit = channel::RunExec(*fd, r, channel::ExecIo{-1, out[1], err[1]});
    close(out[1]);
    close(err[1]);
    ro.join();
    re.join();
    close(out[0]);
    close(err[0]);
    close(*fd);
    return ran;
  }

  // Powers the guest off and waits for QEMU to exit.
  void PowerOff() {
    (void)Exec({"sh", "-c", "sync; poweroff -f"});
    runner_.join();
    mux_->Stop();
    mux_.reset();
  }

  std::string Serial() const {
    std::ifstream f(serial_);
    std::stringstream s;
    s << f.rdbuf();
    std::string all = s.str();
    return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
  }

 private:
  std::string dir_, sock_, serial_, pidfile_;
  std::thread runner_;
  Result<RunOutput> qemu_{Error(ErrorCode::kInternal, "")};
  std::unique_ptr<channel::Mux> mux_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
};

class ResidueVmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto image = image::testing::SharedTestImage();
    ASSERT_TRUE(image.ok()) << image.error().ToString();
    image_ = *image;
    const char* bin_dir = getenv("CLOISTER_BINARY_DIR");
    ASSERT_NE(bin_dir, nullptr);
    agent_ = std::string(bin_dir) + "/src/guest/cloister-agent";
    audit_ = std::string(bin_dir) + "/src/audit/cloister-audit";
    ASSERT_TRUE(fs::exists(agent_)) << agent_;
    ASSERT_TRUE(fs::exists(audit_)) << audit_;
    // A canary unique to this run, so nothing else on any disk can match it by chance.
    auto run = NewRunId();
    ASSERT_TRUE(run.ok());
    canary_ = "CLOISTER-CANARY-" + HexEncode(std::string_view(reinterpret_cast<const char*>(run->data()), 8));
  }

  // The per-boot metadata disk: agent, audit binary (0755), config.
  std::string MakeMeta(const std::string& dir, const std::string& name) {
    std::string stage = dir + "/meta";
    fs::create_directories(stage);
    fs::copy_file(agent_, stage + "/cloister-agent");
    fs::copy_file(audit_, stage + "/cloister-audit");
    fs::permissions(stage + "/cloister-agent", fs::perms(0755));
    fs::permissions(stage + "/cloister-audit", fs::perms(0755));
    nlohmann::json cfg = {{"version", 1},           {"workspace", name},
                          {"hostname", name},       {"boot_id", "0123456789abcdef0123456789abcdef"},
                          {"user", "dev"},          {"home", "/home/dev"},
                          {"home_device", "/dev/vdb"}, {"channel_port", "org.cloister.channel.0"},
                          {"env", nlohmann::json::object()}, {"shares", nlohmann::json::array()}};
    std::ofstream(stage + "/config.json") << cfg.dump();
    std::string img = dir + "/meta.img";
    EXPECT_TRUE(RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", "CLOISTER-META", "-d", stage, img, "64M"}).ok());
    return img;
  }

  // Fresh workspace disks, made as the store makes them: a qcow2 overlay of the base image and a
  // new sparse home formatted by mkfs.ext4.
  void MakeFreshDisks(const std::string& dir) {
    fs::create_directories(dir);
    ASSERT_TRUE(RunProcessChecked({"qemu-img", "create", "-q", "-f", "qcow2", "-b",
                                   image_.dir + "/disk.raw", "-F", "raw", dir + "/disk.qcow2"})
                    .ok());
    ASSERT_TRUE(RunProcessChecked({"mkfs.ext4", "-q", "-F", "-E", "nodiscard", dir + "/home.img", "256M"}).ok());
  }

  // Boots `dir`'s disks, audits them in the guest, and greps every block device for the canary.
  struct Findings {
    AuditReport report;
    uint64_t canary_lines = 0;
  };
  void AuditWorkspace(const std::string& dir, Findings& f) {
    Vm vm(dir, image_, dir + "/disk.qcow2", dir + "/home.img", MakeMeta(dir, "b"), true);
    Status ready = vm.WaitReady();
    ASSERT_TRUE(ready.ok()) << ready.error().ToString();
    auto t0 = std::chrono::steady_clock::now();
    Ran audit = vm.Exec(GuestAuditArgv(0));
    std::cerr << "in-guest audit took "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
    ASSERT_TRUE(audit.exit.ok()) << audit.exit.error().ToString();
    auto base = OpenRawBaseImage(image_.dir + "/disk.raw");
    ASSERT_TRUE(base.ok());
    auto settled = SettleGuestAudit(GuestRun{audit.exit->ShellCode(), audit.out, audit.err}, base->get());
    ASSERT_TRUE(settled.ok()) << settled.error().ToString() << "\n" << audit.err;
    f.report = *settled;
    std::cerr << RenderReport(f.report, DiskHistory::kFresh);
    // A raw read of every block device: system, home and metadata disk (zero bytes become line breaks so lines stay short).
    std::string half = canary_.substr(0, 9), rest = canary_.substr(9);
    Ran grep = vm.Exec({"sh", "-c",
                        "M=\"$0$1\"; n=0; for d in /dev/vda /dev/vdb /dev/vdc; do "
                        "c=$(tr '\\000' '\\n' < $d | grep -c -F \"$M\"); n=$((n+c)); done; echo $n",
                        half, rest});
    ASSERT_TRUE(grep.exit.ok());
    ASSERT_EQ(grep.exit->value, 0) << grep.err;
    auto n = ParseSize(Trim(grep.out));
    ASSERT_TRUE(n.ok()) << grep.out;
    f.canary_lines = *n;
    vm.PowerOff();
  }

  image::testing::SharedImage image_;
  std::string agent_, audit_, canary_;
};

TEST_F(ResidueVmTest, NewWorkspaceSeesNothingOfADeletedOneAndABrokenHandOffIsCaught) {
  image::testing::TempDir t;
  // Workspace A: canaries on both disks, then deleted. Its home drive ignores discard, the worst
  // case: A's image file keeps every deleted byte.
  std::string a = t.path() + "/a";
  MakeFreshDisks(a);
  {
    Vm vm(a, image_, a + "/disk.qcow2", a + "/home.img", MakeMeta(a, "a"), false);
    Status ready = vm.WaitReady();
    ASSERT_TRUE(ready.ok()) << ready.error().ToString();
    std::string script =
        "set -e; M=\"$0\"; "
        "for d in /home/dev/.canary /root/.canary; do mkdir -p $d; "
        "  printf 'OPENAI_API_KEY=%s\\nAWS_SECRET_ACCESS_KEY=%s\\n' $M $M > $d/.env; "
        "  i=0; while [ $i -lt 6 ]; do "
        "    { printf 'SQLite format 3\\000'; yes \"INSERT INTO secrets VALUES('$M-$i');\" | head -c 10485760; } > $d/app$i.sqlite; "
        "    i=$((i+1)); done; "
        "  dd if=/dev/urandom of=$d/random bs=1M count=16 2>/dev/null; "
        "done; sync; "
        "du -sk /home/dev/.canary /root/.canary; "
        "rm -rf /home/dev/.canary /root/.canary; sync";
    auto t0 = std::chrono::steady_clock::now();
    Ran fill = vm.Exec({"sh", "-c", script, canary_});
    std::cerr << "A wrote and deleted its canaries in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
              << " s:\n" << fill.out;
    ASSERT_TRUE(fill.exit.ok()) << fill.exit.error().ToString();
    ASSERT_EQ(fill.exit->value, 0) << fill.err;
    vm.PowerOff();
  }
  // A's old files, kept aside only to build the broken variant, then A is removed.
  std::string old = t.path() + "/a-old";
  fs::create_directories(old);
  ASSERT_TRUE(RunProcessChecked({"cp", "--sparse=never", a + "/home.img", old + "/home.img"}).ok());
  ASSERT_TRUE(RunProcessChecked({"cp", "--sparse=never", a + "/disk.qcow2", old + "/disk.qcow2"}).ok());
  fs::remove_all(a);

  // Workspace B, made correctly: nothing of A, nothing foreign.
  std::string b = t.path() + "/b";
  MakeFreshDisks(b);
  Findings fb;
  AuditWorkspace(b, fb);
  ASSERT_EQ(fb.report.disks.size(), 2u);
  for (const DiskReport& d : fb.report.disks) {
    EXPECT_EQ(d.bytes.foreign, 0u) << d.device;
    EXPECT_GT(d.probed_regions, 1000u) << d.device;
    EXPECT_TRUE(d.frozen || d.mountpoint.empty()) << d.device;
    EXPECT_TRUE(d.Clean()) << d.device;
  }
  EXPECT_EQ(fb.canary_lines, 0u);
  EXPECT_TRUE(fb.report.Clean());

  // Workspace B', broken on purpose: its disks are non-sparse copies of A's old files (what a
  // hand-off that reuses the previous tenant's blocks amounts to). The same checks must fail.
  std::string bad = t.path() + "/broken";
  fs::create_directories(bad);
  fs::copy_file(old + "/home.img", bad + "/home.img");
  fs::copy_file(old + "/disk.qcow2", bad + "/disk.qcow2");
  Findings fbad;
  AuditWorkspace(bad, fbad);
  ASSERT_EQ(fbad.report.disks.size(), 2u);
  for (const DiskReport& d : fbad.report.disks) {
    EXPECT_GT(d.bytes.foreign, uint64_t{8} << 20) << d.device << ": A's deleted data must show as foreign";
  }
  EXPECT_GT(fbad.canary_lines, 1000u);
  EXPECT_FALSE(fbad.report.Clean());
}

}  // namespace
}  // namespace cloister::audit

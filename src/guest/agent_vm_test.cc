// The real static agent in the real test image under TCG, driven over a real virtio-serial port:
// per-boot setup, READY after the terminal probe, exec (exit codes, root, pty size), the tmux
// session and a forwarded guest listener. Independent of the VM module's supervisor: QEMU is
// started here with the contract's devices (docs/design.md "Contracts between host and guest").
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
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

#include "base/subprocess.h"
#include "channel/exec_client.h"
#include "channel/mux.h"
#include "image/testing.h"

namespace cloister::guest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Ran {
  Result<channel::ExecExit> exit{Error(ErrorCode::kInternal, "")};
  std::string out;
};

Ran Exec(channel::Mux& mux, channel::ExecRequest r, const std::string& input = "", bool with_input = false) {
  Ran ran;
  auto fd = mux.Open(channel::kExecService, {}, 60s);
  if (!fd.ok()) {
    ran.exit = fd.error();
    return ran;
  }
  int out[2], in[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
  if (with_input) {
    EXPECT_EQ(write(in[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
  }
  close(in[1]);
  std::string collected;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = read(out[0], buf, sizeof buf)) > 0) collected.append(buf, static_cast<size_t>(n));
  });
  ran.exit = channel::RunExec(*fd, r, channel::ExecIo{with_input ? in[0] : -1, out[1], out[1]});
  close(out[1]);
  reader.join();
  close(out[0]);
  close(in[0]);
  close(*fd);
  ran.out = collected;
  return ran;
}

TEST(AgentVmTest, AgentBootsServesExecAndForwardsInTheTestImage) {
  auto image = image::testing::SharedTestImage();
  ASSERT_TRUE(image.ok()) << image.error().ToString();
  const char* bin_dir = getenv("CLOISTER_BINARY_DIR");
  ASSERT_NE(bin_dir, nullptr);
  std::string agent = std::string(bin_dir) + "/src/guest/cloister-agent";
  ASSERT_TRUE(fs::exists(agent)) << agent;

  image::testing::TempDir t;
  fs::create_directories(t.path() + "/meta");
  fs::copy_file(agent, t.path() + "/meta/cloister-agent");
  nlohmann::json cfg = {{"version", 1},
                        {"workspace", "vmtest"},
                        {"hostname", "vmtest-host"},
                        {"boot_id", "0123456789abcdef0123456789abcdef"},
                        {"user", "dev"},
                        {"home", "/home/dev"},
                        {"home_device", "/dev/vdb"},
                        {"channel_port", "org.cloister.channel.0"},
                        {"env", {{"CLOISTER_WORKSPACE", "vmtest"}}},
                        {"shares", {{{"tag", "share0"}, {"path", "/home/dev/src"}, {"readonly", false}}}},
                        {"files", {{{"path", "/etc/cloister/hello"}, {"content", "hi\n"}}}}};
  std::ofstream(t.path() + "/meta/config.json") << cfg.dump();
  ASSERT_TRUE(RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", "CLOISTER-META", "-d",
                                 t.path() + "/meta", t.path() + "/meta.img", "32M"})
                  .ok());
  ASSERT_TRUE(RunProcessChecked({"mkfs.ext4", "-q", "-F", t.path() + "/home.img", "64M"}).ok());

  // A host folder shared over 9p (world-writable: QEMU runs as root here with security_model=none).
  std::string share = t.path() + "/share";
  fs::create_directories(share);
  fs::permissions(share, fs::perms::all);
  std::ofstream(share + "/from-host.txt") << "host data\n";
  std::string sock = t.path() + "/channel.sock";
  std::string serial = t.path() + "/serial.log";
  RunOptions ro;
  ro.timeout = std::chrono::seconds(400);  // bound; the test powers the guest off when done
  Result<RunOutput> qemu = Error(ErrorCode::kInternal, "");
  auto boot_start = std::chrono::steady_clock::now();
  std::thread runner([&] {
    qemu = RunProcess(
        {"qemu-system-x86_64", "-accel", "tcg", "-M", "q35", "-m", "512", "-smp", "1",
         "-nographic", "-nodefaults", "-no-user-config", "-serial", "file:" + serial,
         "-no-reboot", "-pidfile", t.path() + "/qemu.pid", "-kernel", image->dir + "/vmlinuz", "-initrd", image->dir + "/initrd.img",
         "-append", image->entry.kernel_cmdline + " panic=-1",
         "-drive", "file=" + image->dir + "/disk.raw,format=raw,if=virtio,snapshot=on",
         "-drive", "file=" + t.path() + "/home.img,format=raw,if=virtio,discard=unmap",
         "-drive", "file=" + t.path() + "/meta.img,format=raw,if=virtio,readonly=on",
         "-device", "virtio-rng-pci",
         "-fsdev", "local,id=fs0,path=" + share + ",security_model=none",
         "-device", "virtio-9p-pci,fsdev=fs0,mount_tag=share0",
         "-device", "virtio-serial-pci,id=vser0",
         "-chardev", "socket,id=channel,path=" + sock + ",server=on,wait=off",
         "-device", "virtserialport,bus=vser0.0,chardev=channel,name=org.cloister.channel.0"},
        ro);
  });
  // Whatever happens below, QEMU does not outlive the test.
  std::string pidfile = t.path() + "/qemu.pid";
  struct Reaper {
    std::thread& runner;
    std::string pidfile;
    ~Reaper() {
      if (!runner.joinable()) return;
      std::ifstream f(pidfile);
      pid_t pid = 0;
      if (f >> pid && pid > 0) kill(pid, SIGKILL);
      runner.join();
    }
  } reaper{runner, pidfile};
  auto dump_serial = [&] {
    std::ifstream f(serial);
    std::cerr << "---- serial log ----\n" << f.rdbuf() << "\n--------------------\n";
  };

  // Connect to QEMU's chardev socket once it exists.
  int fd = -1;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (fd < 0 && std::chrono::steady_clock::now() < deadline) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sock.c_str(), sizeof a.sun_path - 1);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      fd = s;
    } else {
      close(s);
      pollfd none{-1, 0, 0};
      poll(&none, 0, 50);  // QEMU is starting; its socket gives no event to wait on
    }
  }
  ASSERT_GE(fd, 0) << "QEMU never created " << sock;

  std::mutex mu;
  std::condition_variable cv;
  std::string ready;
  channel::MuxOptions mo;
  mo.on_ready = [&](const std::string& info) {
    std::lock_guard<std::mutex> l(mu);
    ready = info;
    cv.notify_all();
  };
  mo.log = [](std::string_view l) { std::cerr << "host channel: " << l << "\n"; };
  auto mux = channel::Mux::Create(fd, mo).value();
  mux->RegisterService("proxy", [](int sfd, const std::vector<std::string>&) {
    std::thread([sfd] {
      const char reply[] = "HTTP/1.1 418 from-host-proxy\r\n\r\n";
      char buf[1024];
      ssize_t n = read(sfd, buf, sizeof buf);
      if (n > 0) {
        ssize_t w = write(sfd, reply, sizeof reply - 1);
        (void)w;
      }
      close(sfd);
    }).detach();
  });
  ASSERT_TRUE(mux->Start().ok());
  {
    std::unique_lock<std::mutex> l(mu);
    bool got = cv.wait_for(l, 300s, [&] { return !ready.empty(); });
    if (!got) dump_serial();
    ASSERT_TRUE(got) << "no READY from the agent";
  }
  double to_ready = std::chrono::duration<double>(std::chrono::steady_clock::now() - boot_start).count();
  std::cerr << "QEMU start to agent READY: " << to_ready << " s\n";

  channel::ExecRequest r;
  r.argv = {"sh", "-c", "echo hello from $(id -un) in $PWD $CLOISTER_WORKSPACE"};
  auto hello = Exec(*mux, r);
  ASSERT_TRUE(hello.exit.ok()) << hello.exit.error().message();
  EXPECT_EQ(hello.out, "hello from dev in /home/dev vmtest\n");

  r.argv = {"sh", "-c", "exit 42"};
  auto e42 = Exec(*mux, r);
  ASSERT_TRUE(e42.exit.ok());
  EXPECT_EQ(e42.exit->ShellCode(), 42);

  // Per-boot setup: hostname, home on vdb with discard, the profile, the config's file.
  r.argv = {"sh", "-c",
            "hostname; grep ' /home/dev ' /proc/mounts | cut -d' ' -f1,3; "
            "grep -c discard /proc/mounts; cat /etc/profile.d/cloister.sh | tail -1; "
            "cat /etc/cloister/hello; stat -c %U /home/dev"};
  auto setup = Exec(*mux, r);
  ASSERT_TRUE(setup.exit.ok());
  EXPECT_EQ(setup.out,
            "vmtest-host\n/dev/vdb ext4\n1\nexport CLOISTER_WORKSPACE='vmtest'\nhi\ndev\n");

  // Throughput guest -> host through exec (a figure for the report, not a speed assertion).
  {
    r.argv = {"head", "-c", "33554432", "/dev/zero"};
    auto fd = mux->Open(channel::kExecService, {}, 60s);
    ASSERT_TRUE(fd.ok());
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    auto t0 = std::chrono::steady_clock::now();
    auto big = channel::RunExec(*fd, r, channel::ExecIo{-1, null, null});
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    close(null);
    close(*fd);
    ASSERT_TRUE(big.ok());
    EXPECT_EQ(big->value, 0);
    std::cerr << "exec stdout guest->host: 32 MiB in " << s << " s (" << 32 / s << " MiB/s)\n";
  }

  // The 9p share: host files visible, guest writes land in the host folder.
  r.argv = {"sh", "-c", "cat /home/dev/src/from-host.txt && echo guest data > /home/dev/src/from-guest.txt"};
  auto shared = Exec(*mux, r);
  ASSERT_TRUE(shared.exit.ok());
  EXPECT_EQ(shared.exit->value, 0) << shared.out;
  EXPECT_EQ(shared.out, "host data\n");
  {
    std::ifstream g(share + "/from-guest.txt");
    std::string line;
    std::getline(g, line);
    EXPECT_EQ(line, "guest data");
  }

  // Root on request; dev cannot write /etc.
  r.argv = {"sh", "-c", "echo x > /etc/cloister-root-test && id -u"};
  auto as_dev = Exec(*mux, r);
  ASSERT_TRUE(as_dev.exit.ok());
  EXPECT_NE(as_dev.exit->value, 0);
  r.user = "root";
  auto as_root = Exec(*mux, r);
  ASSERT_TRUE(as_root.exit.ok());
  EXPECT_EQ(as_root.exit->value, 0);
  EXPECT_EQ(as_root.out, "0\n");
  r.user = "dev";

  // A pty of the requested size.
  r.argv = {"stty", "size"};
  r.tty = true;
  r.rows = 33;
  r.cols = 111;
  auto pty = Exec(*mux, r);
  ASSERT_TRUE(pty.exit.ok());
  EXPECT_EQ(pty.out, "33 111\r\n");
  r.tty = false;

  // The tmux session that attach joins exists, as dev.
  r.argv = {"tmux", "has-session", "-t", "cloister"};
  auto tmux = Exec(*mux, r);
  ASSERT_TRUE(tmux.exit.ok());
  EXPECT_EQ(tmux.exit->value, 0) << tmux.out;

  // The guest-local proxy listener reaches the host service through the channel.
  r.argv = {"sh", "-c", "printf 'GET / HTTP/1.1\\r\\n\\r\\n' | nc 127.0.0.1 3128"};
  auto proxy = Exec(*mux, r);
  ASSERT_TRUE(proxy.exit.ok());
  EXPECT_NE(proxy.out.find("418 from-host-proxy"), std::string::npos) << proxy.out;

  // `cloister attach`: tmux in a pty joins the session; C-b d detaches with code 0 and the
  // session stays.
  {
    auto afd = mux->Open(channel::kExecService, {}, 60s);
    ASSERT_TRUE(afd.ok());
    int out[2], in[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
    std::mutex amu;
    std::condition_variable acv;
    std::string screen;
    std::thread reader([&] {
      char buf[4096];
      ssize_t n;
      while ((n = read(out[0], buf, sizeof buf)) > 0) {
        std::lock_guard<std::mutex> l(amu);
        screen.append(buf, static_cast<size_t>(n));
        acv.notify_all();
      }
    });
    Result<channel::ExecExit> aexit = Error(ErrorCode::kInternal, "");
    std::thread attach([&] {
      aexit = channel::RunExec(*afd, channel::AttachRequest(), channel::ExecIo{in[0], out[1], out[1]});
    });
    {
      std::unique_lock<std::mutex> l(amu);
      EXPECT_TRUE(acv.wait_for(l, 60s, [&] { return screen.find("[cloister]") != std::string::npos; }))
          << screen;  // tmux's status line names the session
    }
    ASSERT_EQ(write(in[1], "\x02" "d", 2), 2);  // C-b d
    attach.join();
    close(out[1]);
    reader.join();
    close(out[0]);
    close(in[0]);
    close(in[1]);
    close(*afd);
    ASSERT_TRUE(aexit.ok()) << aexit.error().message();
    EXPECT_EQ(aexit->value, 0);
    EXPECT_NE(screen.find("[detached"), std::string::npos);
    r.tty = false;
    r.argv = {"tmux", "has-session", "-t", "cloister"};
    auto still = Exec(*mux, r);
    ASSERT_TRUE(still.exit.ok());
    EXPECT_EQ(still.exit->value, 0);
  }

  // The host side goes away and comes back (supervisor restart, resume): a new connection gets a
  // new session over the same port, READY again, and exec works.
  mux->Stop();
  mux.reset();
  {
    std::lock_guard<std::mutex> l(mu);
    ready.clear();
  }
  int fd2 = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a2{};
  a2.sun_family = AF_UNIX;
  std::strncpy(a2.sun_path, sock.c_str(), sizeof a2.sun_path - 1);
  ASSERT_EQ(connect(fd2, reinterpret_cast<sockaddr*>(&a2), sizeof a2), 0);
  mux = channel::Mux::Create(fd2, mo).value();
  ASSERT_TRUE(mux->Start().ok());
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 60s, [&] { return !ready.empty(); })) << "no READY after reconnect";
  }
  r.argv = {"sh", "-c", "exit 7"};
  auto again = Exec(*mux, r);
  ASSERT_TRUE(again.exit.ok()) << again.exit.error().message();
  EXPECT_EQ(again.exit->value, 7);

  // Done: power off (QEMU runs with -no-reboot).
  r.user = "root";
  r.argv = {"sh", "-c", "sync; poweroff -f"};
  (void)Exec(*mux, r);
  runner.join();
  mux->Stop();
  ASSERT_TRUE(qemu.ok()) << qemu.error().message();
  EXPECT_FALSE(qemu->timed_out);
  if (HasFailure()) {
    dump_serial();
  } else {
    std::ifstream f(serial);
    std::string line;
    while (std::getline(f, line)) {
      if (line.find("cloister-agent:") != std::string::npos) std::cerr << line << "\n";
    }
  }
}

}  // namespace
}  // namespace cloister::guest

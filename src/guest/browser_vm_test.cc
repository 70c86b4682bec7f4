// The browser image with the real static agent under TCG, one boot (issue #18): the agent mounts
// the profile device, trusts the proxy CA in Chromium's NSS db, starts Debian's Chromium headless
// and sends READY once DevTools accepts; the host reaches DevTools only through the channel's
// `tcp ["9222"]` stream: GET /json/version answers, a CDP websocket navigates a page to a data: URL
// and reads its title back; DevTools is not reachable on any non-loopback guest address.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

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

#include "base/strings.h"
#include "base/subprocess.h"
#include "channel/exec_client.h"
#include "channel/mux.h"
#include "image/testing.h"
#include "protocol/contract.h"

namespace cloister::guest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace beast = boost::beast;
using Clock = std::chrono::steady_clock;

struct Ran {
  Result<channel::ExecExit> exit{Error(ErrorCode::kInternal, "")};
  std::string out;
};

Ran Exec(channel::Mux& mux, const std::vector<std::string>& argv, const std::string& user = "dev") {
  Ran ran;
  channel::ExecRequest r;
  r.argv = argv;
  r.user = user;
  auto fd = mux.Open(channel::kExecService, {}, 60s);
  if (!fd.ok()) {
    ran.exit = fd.error();
    return ran;
  }
  int out[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  std::string collected;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = read(out[0], buf, sizeof buf)) > 0) collected.append(buf, static_cast<size_t>(n));
  });
  ran.exit = channel::RunExec(*fd, r, channel::ExecIo{-1, out[1], out[1]});
  close(out[1]);
  reader.join();
  close(out[0]);
  close(*fd);
  ran.out = collected;
  return ran;
}

// One HTTP/1.1 GET over a channel stream to DevTools; the whole response (headers and body).
std::string HttpGet(int fd, const std::string& path) {
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" +
                    std::to_string(protocol::kBrowserCdpPort) + "\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return "";
  std::string resp;
  auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      resp.append(buf, static_cast<size_t>(n));
      // DevTools answers with Content-Length; stop once the body is complete.
      size_t end = resp.find("\r\n\r\n");
      size_t cl = resp.find("Content-Length: ");
      if (end != std::string::npos && cl != std::string::npos && cl < end) {
        size_t len = std::strtoul(resp.c_str() + cl + 16, nullptr, 10);
        if (resp.size() >= end + 4 + len) break;
      }
      continue;
    }
    if (n < 0 && errno == EAGAIN) continue;
    break;
  }
  return resp;
}

nlohmann::json Body(const std::string& resp) {
  size_t end = resp.find("\r\n\r\n");
  if (end == std::string::npos) return nullptr;
  return nlohmann::json::parse(resp.substr(end + 4), nullptr, false);
}

TEST(BrowserVmTest, ChromiumAnswersCdpOverTheChannelAndDevToolsIsLoopbackOnly) {
  auto image = image::testing::SharedBrowserTestImage();
  ASSERT_TRUE(image.ok()) << image.error().ToString();
  const char* bin_dir = getenv("CLOISTER_BINARY_DIR");
  ASSERT_NE(bin_dir, nullptr);
  std::string agent = std::string(bin_dir) + "/src/guest/cloister-agent";
  ASSERT_TRUE(fs::exists(agent)) << agent;

  image::testing::TempDir t;
  // A proxy CA (the agent must put it in Chromium's NSS db).
  ASSERT_TRUE(RunProcessChecked({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                 "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                                 "-subj", "/CN=cloister browser test CA", "-keyout",
                                 t.path() + "/ca.key", "-out", t.path() + "/ca.pem"})
                  .ok());
  std::ifstream ca_in(t.path() + "/ca.pem");
  std::string ca((std::istreambuf_iterator<char>(ca_in)), std::istreambuf_iterator<char>());

  fs::create_directories(t.path() + "/meta");
  fs::copy_file(agent, t.path() + "/meta/cloister-agent");
  nlohmann::json cfg = {
      {"version", 1},
      {"workspace", "browsertest"},
      {"hostname", "browsertest"},
      {"boot_id", "0123456789abcdef0123456789abcdef"},
      {"user", "dev"},
      {"home", "/home/dev"},
      {"home_device", ""},
      {"channel_port", "org.cloister.channel.0"},
      {"ca_certificate", ca},
      {"forwards", {{{"listen", "tcp:127.0.0.1:3128"}, {"service", "proxy"}}}},
      {"browser", {{"cdp_port", protocol::kBrowserCdpPort},
                   {"profile_device", protocol::kBrowserProfileDevice}}}};
  std::ofstream(t.path() + "/meta/config.json") << cfg.dump();
  ASSERT_TRUE(RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", "CLOISTER-META", "-d",
                                 t.path() + "/meta", t.path() + "/meta.img", "32M"})
                  .ok());
  // The profile disk as the host hands it over (decrypted by QEMU): an empty ext4.
  ASSERT_TRUE(RunProcessChecked({"mkfs.ext4", "-q", "-F", t.path() + "/profile.img", "128M"}).ok());

  std::string sock = t.path() + "/channel.sock";
  std::string serial = t.path() + "/serial.log";
  std::string pidfile = t.path() + "/qemu.pid";
  RunOptions ro;
  ro.timeout = std::chrono::seconds(900);  // bound; the test powers the guest off when done
  Result<RunOutput> qemu = Error(ErrorCode::kInternal, "");
  auto boot_start = Clock::now();
  std::thread runner([&] {
    qemu = RunProcess(
        {"qemu-system-x86_64", "-accel", "tcg", "-M", "q35", "-m", "1536", "-smp", "2",
         "-nographic", "-nodefaults", "-no-user-config", "-serial", "file:" + serial,
         "-no-reboot", "-pidfile", pidfile, "-kernel", image->dir + "/vmlinuz", "-initrd",
         image->dir + "/initrd.img", "-append", image->entry.kernel_cmdline + " panic=-1",
         "-drive", "file=" + image->dir + "/disk.raw,format=raw,if=virtio,snapshot=on",
         "-drive", "file=" + t.path() + "/profile.img,format=raw,if=virtio",
         "-drive", "file=" + t.path() + "/meta.img,format=raw,if=virtio,readonly=on",
         "-device", "virtio-rng-pci",
         "-device", "virtio-serial-pci,id=vser0",
         "-chardev", "socket,id=channel,path=" + sock + ",server=on,wait=off",
         "-device", "virtserialport,bus=vser0.0,chardev=channel,name=org.cloister.channel.0"},
        ro);
  });
  // Whatever happens below, QEMU does not outlive the test.
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

  int fd = -1;
  auto deadline = Clock::now() + 60s;
  while (fd < 0 && Clock::now() < deadline) {
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
  ASSERT_TRUE(mux->Start().ok());
  {
    std::unique_lock<std::mutex> l(mu);
    bool got = cv.wait_for(l, 600s, [&] { return !ready.empty(); });
    if (!got) dump_serial();
    ASSERT_TRUE(got) << "no READY from the browser VM's agent";
  }
  double to_ready = std::chrono::duration<double>(Clock::now() - boot_start).count();
  std::cerr << "QEMU start to READY (DevTools accepting): " << to_ready << " s (" << ready << ")\n";

  // DevTools over the host-opened tcp service.
  auto v = mux->Open(protocol::kTcpService, {std::to_string(protocol::kBrowserCdpPort)}, 60s);
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  std::string version = HttpGet(*v, "/json/version");
  close(*v);
  auto vj = Body(version);
  ASSERT_TRUE(vj.is_object()) << version;
  EXPECT_NE(vj.value("Browser", "").find("Chrome/156."), std::string::npos) << version;
  EXPECT_NE(vj.value("webSocketDebuggerUrl", "").find("ws://127.0.0.1:9222/devtools/browser/"),
            std::string::npos)
      << version;
  std::cerr << "DevTools /json/version: " << vj.value("Browser", "") << "\n";

  auto l = mux->Open(protocol::kTcpService, {std::to_string(protocol::kBrowserCdpPort)}, 60s);
  ASSERT_TRUE(l.ok()) << l.error().ToString();
  auto list = Body(HttpGet(*l, "/json/list"));
  close(*l);
  ASSERT_TRUE(list.is_array()) << list.dump();
  std::string page_path;
  for (const auto& target : list) {
    if (target.value("type", "") == "page") {
      std::string ws = target.value("webSocketDebuggerUrl", "");
      size_t at = ws.find("/devtools/page/");
      if (at != std::string::npos) page_path = ws.substr(at);
    }
  }
  ASSERT_FALSE(page_path.empty()) << list.dump();

  // CDP over a websocket on a third stream: navigate to a data: URL and read the title back.
  auto w = mux->Open(protocol::kTcpService, {std::to_string(protocol::kBrowserCdpPort)}, 60s);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  std::string title;
  try {
    boost::asio::io_context ioc;
    boost::asio::local::stream_protocol::socket s(ioc);
    s.assign(boost::asio::local::stream_protocol(), *w);
    beast::websocket::stream<boost::asio::local::stream_protocol::socket> ws(std::move(s));
    ws.handshake("127.0.0.1:9222", page_path);
    int id = 0;
    auto call = [&](const std::string& method, nlohmann::json params) {
      nlohmann::json req = {{"id", ++id}, {"method", method}, {"params", params}};
      ws.write(boost::asio::buffer(req.dump()));
      while (true) {  // skip events until our answer
        beast::flat_buffer buf;
        ws.read(buf);
        auto msg = nlohmann::json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
        if (msg.is_object() && msg.value("id", -1) == id) return msg;
      }
    };
    auto nav = call("Page.navigate",
                    {{"url", "data:text/html,<title>cloister-cdp-title</title><p>hello</p>"}});
    EXPECT_FALSE(nav.contains("error")) << nav.dump();
    auto until = Clock::now() + 60s;
    while (Clock::now() < until && title != "cloister-cdp-title") {
      auto r = call("Runtime.evaluate", {{"expression", "document.title"}, {"returnByValue", true}});
      title = r["result"]["result"].value("value", "");
      if (title != "cloister-cdp-title") std::this_thread::sleep_for(200ms);  // navigation runs
    }
    ws.close(beast::websocket::close_code::normal);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "CDP websocket: " << e.what();
  }
  EXPECT_EQ(title, "cloister-cdp-title");

  // DevTools answers on the guest's loopback, and on no other guest address: give the guest a
  // non-loopback address of its own, then try every address it has.
  auto addr = Exec(*mux, {"sh", "-c",
                          "ip link add cl0 type dummy && ip addr add 10.77.0.2/24 dev cl0 && "
                          "ip link set cl0 up && ip -o addr show"},
                   "root");
  ASSERT_TRUE(addr.exit.ok()) << addr.exit.error().message();
  EXPECT_EQ(addr.exit->value, 0) << addr.out;
  auto probe = Exec(*mux, {"sh", "-c",
                           "for a in $(ip -o -4 addr show | awk '{print $4}' | cut -d/ -f1); do "
                           // busybox-static's wget crashes (static NSS): a raw request with nc,
                           // whose stdin stays open (DevTools drops a half-closed request).
                           "if (printf 'GET /json/version HTTP/1.1\\r\\nHost: %s:9222\\r\\n"
                           "Connection: close\\r\\n\\r\\n' $a; sleep 5) | nc -w 10 $a 9222 "
                           "2>/dev/null | grep -q '\"Browser\"'; then "
                           "echo \"OPEN $a\"; else echo \"CLOSED $a\"; fi; done"});
  ASSERT_TRUE(probe.exit.ok()) << probe.exit.error().message();
  std::cerr << "DevTools reachability in the guest:\n" << probe.out;
  EXPECT_NE(probe.out.find("OPEN 127.0.0.1"), std::string::npos) << probe.out;  // the control
  EXPECT_NE(probe.out.find("CLOSED 10.77.0.2"), std::string::npos) << probe.out;
  for (const auto& line : Split(probe.out, '\n')) {
    if (StartsWith(line, "OPEN ")) {
      EXPECT_EQ(line, "OPEN 127.0.0.1");
    }
  }
  // IPv6: Chromium listens on no v6 socket at 9222 (only the v4 loopback one).
  auto v6 = Exec(*mux, {"sh", "-c", "netstat -ltn 2>/dev/null | grep ':9222 '"});
  ASSERT_TRUE(v6.exit.ok());
  EXPECT_NE(v6.out.find("127.0.0.1:9222"), std::string::npos) << v6.out;
  for (const auto& line : Split(v6.out, '\n')) {
    if (line.find(":9222") != std::string::npos) {
      EXPECT_NE(line.find("127.0.0.1:9222"), std::string::npos) << line;
    }
  }

  // The profile is on the profile device, the proxy CA in Chromium's NSS db, Chromium runs as dev.
  auto state = Exec(*mux, {"sh", "-c",
                           "grep ' /var/lib/cloister-browser ' /proc/mounts; "
                           "ls -d /var/lib/cloister-browser/chromium/Default; "
                           "certutil -L -d sql:/var/lib/cloister-browser/home/.pki/nssdb; "
                           "echo users=$(ps -o user,comm | awk '$2 == \"chromium\" {print $1}' | "
                           "sort -u | tr '\\n' ,); "
                           "echo userns=$(cat /proc/sys/kernel/unprivileged_userns_clone); "
                           // Chromium's namespace sandbox: some of its processes run in a user
                           // namespace of their own (none would with --no-sandbox).
                           "init=$(readlink /proc/1/ns/user); n=0; for p in $(pgrep chromium); do "
                           "[ \"$(readlink /proc/$p/ns/user)\" != \"$init\" ] && n=$((n+1)); done; "
                           "echo sandboxed=$n; true"},
                    "root");
  ASSERT_TRUE(state.exit.ok());
  std::cerr << "browser VM state:\n" << state.out;
  EXPECT_NE(state.out.find("/dev/vdb /var/lib/cloister-browser ext4 rw,nosuid,nodev,noexec"),
            std::string::npos)
      << state.out;
  EXPECT_NE(state.out.find("/var/lib/cloister-browser/chromium/Default"), std::string::npos);
  EXPECT_NE(state.out.find("cloister-proxy-ca"), std::string::npos) << state.out;
  EXPECT_NE(state.out.find("users=dev,\n"), std::string::npos) << state.out;  // never root
  EXPECT_EQ(state.out.find("sandboxed=0\n"), std::string::npos) << state.out;
  EXPECT_NE(state.out.find("sandboxed="), std::string::npos) << state.out;

  auto off = Exec(*mux, {"sh", "-c", "sync; poweroff -f"}, "root");
  (void)off;
  runner.join();
  mux->Stop();
  ASSERT_TRUE(qemu.ok()) << qemu.error().message();
  EXPECT_FALSE(qemu->timed_out);
  std::ifstream f(serial);
  std::string line;
  while (std::getline(f, line)) {
    if (HasFailure() || line.find("cloister-agent:") != std::string::npos) std::cerr << line << "\n";
  }
}

}  // namespace
}  // namespace cloister::guest

#include "supervisor/ports.h"

#include "base/testing_net.h"
#include "vm/meta_disk.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <utility>
#include <string>
#include <thread>
#include <vector>

namespace cloister::vm {
namespace {

// A TCP listener on 127.0.0.1 (port 0: any) that answers each connection with "hello PORT\n"
// followed by the bytes it reads (an echo), until EOF. Stands in for a guest server.
class EchoServer {
 public:
  explicit EchoServer(uint16_t port = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd_, 16) == 0;
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        std::thread([c, p = port_] {
          std::string hello = "hello " + std::to_string(p) + "\n";
          (void)!write(c, hello.data(), hello.size());
          char buf[4096];
          ssize_t n;
          while ((n = read(c, buf, sizeof buf)) > 0) (void)!write(c, buf, static_cast<size_t>(n));
          close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  bool ok() const { return ok_; }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  uint16_t port_ = 0;
  std::thread thread_;
};

// Copies a -> b and b -> a until either side ends (the Mux's role in the supervisor).
void Bridge(int a, int b) {
  std::thread([a, b] {
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    char buf[4096];
    while (poll(p, 2, -1) > 0) {
      bool done = false;
      for (int i = 0; i < 2; ++i) {
        if (!p[i].revents) continue;
        ssize_t n = read(p[i].fd, buf, sizeof buf);
        if (n <= 0 || write(p[1 - i].fd, buf, static_cast<size_t>(n)) != n) done = true;
      }
      if (done) break;
    }
    close(a);
    close(b);
  }).detach();
}

int ConnectTo(const std::string& ip, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string ReadLine(int fd) {
  std::string out;
  char c;
  while (read(fd, &c, 1) == 1) {
    out.push_back(c);
    if (c == '\n') break;
  }
  return out;
}

// A forwarder whose "guest" is this host's loopback: each stream connects to 127.0.0.1:GUEST_PORT.
struct LoopbackGuest {
  std::atomic<int> opened{0};
  std::vector<std::string> log;
  std::mutex mu;
  PortForwarder::Options Options() {
    PortForwarder::Options o;
    o.open = [this](uint16_t guest_port, int fd) {
      ++opened;
      int up = ConnectTo("127.0.0.1", guest_port);
      if (up < 0) {
        close(fd);
        return;
      }
      Bridge(fd, up);
    };
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu);
      log.push_back(line);
    };
    return o;
  }
};

TEST(PortSpecTest, ParsesDockerForms) {
  struct Case {
    const char* text;
    const char* ip;
    uint16_t host, guest;
  } cases[] = {
      {"8080:80", "127.0.0.1", 8080, 80},
      {"5173:5173", "127.0.0.1", 5173, 5173},
      {"127.0.0.1:8080:80", "127.0.0.1", 8080, 80},
      {"0.0.0.0:8080:80", "0.0.0.0", 8080, 80},
      {"192.168.1.5:9000:9000", "192.168.1.5", 9000, 9000},
      {"127.0.0.1::80", "127.0.0.1", 0, 80},
      {"0:80", "127.0.0.1", 0, 80},
      {"[::1]:8080:80", "::1", 8080, 80},
      {"[0:0:0:0:0:0:0:1]:8080:80", "::1", 8080, 80},
      {"[::]:1:65535", "::", 1, 65535},
  };
  for (const Case& c : cases) {
    auto s = ParsePortSpec(c.text);
    ASSERT_TRUE(s.ok()) << c.text << ": " << s.error().ToString();
    EXPECT_EQ(s->host_ip, c.ip) << c.text;
    EXPECT_EQ(s->host_port, c.host) << c.text;
    EXPECT_EQ(s->guest_port, c.guest) << c.text;
    auto again = ParsePortSpec(s->ToString());
    ASSERT_TRUE(again.ok()) << s->ToString();
    EXPECT_EQ(*again, *s) << s->ToString();
  }
}

TEST(PortSpecTest, RefusesBadSpecsWithAHint) {
  for (const char* text :
       {"", "80", "a:b", "8080:", ":80", "8080:0", "8080:65536", "65536:80", "-1:80", "+80:80",
        "08080:80", "localhost:8080:80", "1.2.3:8080:80", "[::1]8080:80", "[::1]:80",
        "[127.0.0.1]:8080:80", "::1:8080:80", "1:2:3:4", "8080:80 ", " 8080:80",
        "127.0.0.1:8080:80:90"}) {
    auto s = ParsePortSpec(text);
    ASSERT_FALSE(s.ok()) << "'" << text << "' parsed as " << s->ToString();
    EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().hint().find("HOST_PORT:GUEST_PORT"), std::string::npos);
  }
}

// SECURITY: without an explicit address a published port is loopback only (never a wildcard).
TEST(PortSpecTest, DefaultAddressIsLoopback) {
  for (const char* text : {"8080:80", "0:80", "1024:1"}) {
    auto s = ParsePortSpec(text);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(IsLoopbackAddress(s->host_ip)) << text << " -> " << s->host_ip;
    EXPECT_EQ(s->host_ip, kDefaultHostIp);
  }
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.2"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackAddress("::"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("nonsense"));
}

TEST(PortsConfigTest, RoundTripsAndFailsClosed) {
  WorkspaceConfig c;
  auto empty = PortsConfigFromConfig(c);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->publish.empty());
  EXPECT_FALSE(empty->auto_ports);

  PortsConfig p;
  p.publish = {*ParsePortSpec("8080:80"), *ParsePortSpec("[::1]:9000:9000")};
  p.auto_ports = true;
  ASSERT_TRUE(PutPortsConfig(c, p).ok());
  EXPECT_EQ(c.extra["ports"]["publish"][0], "127.0.0.1:8080:80");
  EXPECT_EQ(c.extra["ports"]["auto"], true);
  auto back = PortsConfigFromConfig(c);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->publish, p.publish);
  EXPECT_TRUE(back->auto_ports);

  // The same host port twice is refused on write.
  PortsConfig twice;
  twice.publish = {*ParsePortSpec("8080:80"), *ParsePortSpec("8080:81")};
  EXPECT_FALSE(PutPortsConfig(c, twice).ok());

  for (const char* bad : {R"("x")", R"({"auto":"yes"})", R"({"publish":"8080:80"})",
                          R"({"publish":["localhost:1:2"]})", R"({"publish":[80]})",
                          R"({"publish":["8080:80","8080:81"]})"}) {
    WorkspaceConfig w;
    w.extra = nlohmann::json::object();
    w.extra["ports"] = nlohmann::json::parse(bad);
    auto r = PortsConfigFromConfig(w);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt) << bad;
  }
}

// The guest watches its listeners only when the workspace opted in (the metadata config's flag).
TEST(PortsConfigTest, AutoPortsReachesTheMetadataConfig) {
  MetaConfig meta;
  EXPECT_EQ(MetaConfigJson(meta)["auto_ports"], false);
  meta.auto_ports = true;
  EXPECT_EQ(MetaConfigJson(meta)["auto_ports"], true);
}

TEST(PortsReportTest, ParsesBoundedReports) {
  auto r = ParsePortsReport("ports 5173 8080\n");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(*r, (std::vector<uint16_t>{5173, 8080}));
  auto none = ParsePortsReport("ports\n");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(ParsePortsReport("ports 1 65535").ok());

  // SECURITY: only port numbers: no address, host, sign, zero, duplicate or junk gets through.
  for (const char* bad : {"", "port 80\n", "ports  80\n", "ports 80 \n", "ports 0\n",
                          "ports 65536\n", "ports 080\n", "ports -1\n", "ports 80 80\n",
                          "ports 127.0.0.1:80\n", "ports 0.0.0.0 80\n", "ports example.com\n",
                          "ports 80\r\n", "ports 80\n\n", "xports 80\n", "ports\t80\n"}) {
    EXPECT_FALSE(ParsePortsReport(bad).ok()) << "'" << bad << "'";
  }
  std::string many = "ports";
  for (int i = 1; i <= static_cast<int>(kMaxReportPorts) + 1; ++i) many += " " + std::to_string(i);
  EXPECT_FALSE(ParsePortsReport(many).ok());  // too many ports
  std::string longline = "ports " + std::string(kMaxReportLine, '1');
  EXPECT_FALSE(ParsePortsReport(longline).ok());
}

TEST(PortForwarderTest, ForwardsConnectionsAndRemovesThem) {
  EchoServer guest;
  ASSERT_TRUE(guest.ok());
  LoopbackGuest g;
  PortForwarder f(g.Options());
  PortSpec spec;
  spec.host_port = 0;
  spec.guest_port = guest.port();
  auto bound = f.AddForward(spec);
  ASSERT_TRUE(bound.ok()) << bound.error().ToString();
  ASSERT_NE(bound->host_port, 0);
  EXPECT_EQ(bound->host_ip, "127.0.0.1");

  int c = ConnectTo("127.0.0.1", bound->host_port);
  ASSERT_GE(c, 0);
  EXPECT_EQ(ReadLine(c), "hello " + std::to_string(guest.port()) + "\n");
  ASSERT_EQ(write(c, "ping\n", 5), 5);
  EXPECT_EQ(ReadLine(c), "ping\n");
  close(c);

  auto ls = f.List();
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].spec, *bound);
  EXPECT_EQ(ls[0].origin, ForwardOrigin::kAdded);
  EXPECT_EQ(ls[0].connections, 1u);
  EXPECT_EQ(ForwardInfoJson(ls[0])["guest_port"], guest.port());

  ASSERT_TRUE(f.RemoveForward(bound->host_port).ok());
  EXPECT_TRUE(f.List().empty());
  EXPECT_LT(ConnectTo("127.0.0.1", bound->host_port), 0);  // gone: refused
  EXPECT_EQ(f.RemoveForward(bound->host_port).error().code(), ErrorCode::kNotFound);
}

TEST(PortForwarderTest, TakenHostPortIsAClearError) {
  EchoServer taken;
  ASSERT_TRUE(taken.ok());
  LoopbackGuest g;
  PortForwarder f(g.Options());
  PortSpec spec;
  spec.host_port = taken.port();
  spec.guest_port = 80;
  auto r = f.AddForward(spec, ForwardOrigin::kConfig);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(r.error().message().find("already in use"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().hint().find("another host port"), std::string::npos);
  EXPECT_TRUE(f.List().empty());

  PortSpec nowhere;
  nowhere.host_ip = "192.0.2.1";  // TEST-NET-1: not an address of this host
  nowhere.guest_port = 80;
  EXPECT_FALSE(f.AddForward(nowhere).ok());
}

// The kernel's ephemeral port range (what bind to port 0 picks from).
std::pair<int, int> EphemeralRange() {
  int lo = 32768, hi = 60999;
  if (FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768, hi = 60999;
    fclose(f);
  }
  return {lo, hi};
}

// SECURITY (issue 37 item 5): an automatic forward gets a host port the HOST picks, never the
// guest's number: a guest that reports 5432, 6379, 11434 or 3128 must not receive what host
// clients send to those ports. It listens on 127.0.0.1 only (a wildcard bind would also take
// connections to 127.0.0.2). A guest port that goes and comes back gets the host port it had.
TEST(PortForwarderTest, AutoForwardNeverTakesTheGuestsPortNumber) {
  EchoServer guest;
  ASSERT_TRUE(guest.ok());
  const uint16_t gp = guest.port();
  const auto [lo, hi] = EphemeralRange();
  LoopbackGuest g;
  PortForwarder f(g.Options());
  // Ports host services listen on, free here or not: the guest asks for each.
  const std::vector<uint16_t> wanted = {5432, 6379, 11434, 3128, 8080, 5173};
  std::vector<uint16_t> report = wanted;
  report.push_back(gp);
  f.ApplyGuestReport(report);
  auto ls = f.List();
  ASSERT_EQ(ls.size(), report.size());
  uint16_t gp_host = 0;
  for (const ForwardInfo& i : ls) {
    EXPECT_EQ(i.origin, ForwardOrigin::kAuto);
    EXPECT_EQ(i.spec.host_ip, "127.0.0.1");
    EXPECT_NE(i.spec.host_port, i.spec.guest_port)
        << "the host listens on the port number the guest chose: " << i.spec.ToString();
    EXPECT_GE(i.spec.host_port, lo) << i.spec.ToString() << " is not the kernel's pick";
    EXPECT_LE(i.spec.host_port, hi) << i.spec.ToString() << " is not the kernel's pick";
    if (i.spec.guest_port == gp) gp_host = i.spec.host_port;
  }
  ASSERT_NE(gp_host, 0);
  int c = ConnectTo("127.0.0.1", gp_host);
  ASSERT_GE(c, 0);
  EXPECT_EQ(ReadLine(c), "hello " + std::to_string(gp) + "\n");
  close(c);
  EXPECT_LT(ConnectTo("127.0.0.2", gp_host), 0) << "listening beyond 127.0.0.1";

  // Gone when the guest's socket closes (the next report leaves it out) ...
  f.ApplyGuestReport({});
  EXPECT_TRUE(f.List().empty());
  // ... and back on the same host port (the host's earlier pick) when it comes back.
  f.ApplyGuestReport({gp});
  ls = f.List();
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].spec.host_port, gp_host);
  f.ClearAuto();
  EXPECT_TRUE(f.List().empty());
}

// SECURITY: a guest port below 1024 never makes the host listen on a privileged port.
TEST(PortForwarderTest, AutoForwardNeverUsesAPrivilegedHostPort) {
  LoopbackGuest g;
  PortForwarder f(g.Options());
  f.ApplyGuestReport({22, 80, 443, 1023});
  auto ls = f.List();
  ASSERT_FALSE(ls.empty());
  for (const ForwardInfo& i : ls) {
    EXPECT_GE(i.spec.host_port, kFirstUnprivilegedPort) << i.spec.ToString();
    EXPECT_EQ(i.spec.host_ip, "127.0.0.1");
  }
}

// SECURITY: a report of many ports makes at most kMaxAutoPorts listeners.
TEST(PortForwarderTest, AutoForwardsAreBounded) {
  LoopbackGuest g;
  PortForwarder f(g.Options());
  std::vector<uint16_t> many;
  for (uint16_t p = 40000; p < 40000 + 200; ++p) many.push_back(p);
  f.ApplyGuestReport(many);
  EXPECT_EQ(f.List().size(), kMaxAutoPorts);
  f.ApplyGuestReport(many);  // the same report again changes nothing
  EXPECT_EQ(f.List().size(), kMaxAutoPorts);
}

TEST(PortForwarderTest, AutoSkipsAGuestPortAPublishedForwardReaches) {
  LoopbackGuest g;
  PortForwarder f(g.Options());
  PortSpec spec;
  spec.guest_port = 5173;
  ASSERT_TRUE(f.AddForward(spec, ForwardOrigin::kConfig).ok());
  f.ApplyGuestReport({5173});
  auto ls = f.List();
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].origin, ForwardOrigin::kConfig);
  f.ClearAuto();  // never touches a published one
  EXPECT_EQ(f.List().size(), 1u);
}

// SECURITY: a flood of reports is parsed but applied at most once per interval (coalesced), and
// a malformed or endless line ends the stream; the auto forwards go with the stream.
TEST(PortForwarderTest, ReportFloodCoalesces) {
  LoopbackGuest g;
  PortForwarder f(g.Options());
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  uint16_t last = 0;
  std::string all;
  for (int i = 0; i < 1000; ++i) {
    last = static_cast<uint16_t>(41000 + i % 50);
    all += "ports " + std::to_string(last) + "\n";
  }
  ASSERT_EQ(write(sv[1], all.data(), all.size()), static_cast<ssize_t>(all.size()));
  shutdown(sv[1], SHUT_WR);
  size_t applied = f.ServeReports(sv[0], std::chrono::hours(1));
  EXPECT_LE(applied, 1u);
  EXPECT_GE(applied, 1u);
  EXPECT_TRUE(f.List().empty());  // the stream ended: its auto forwards are gone
  close(sv[1]);
}

TEST(PortForwarderTest, ReportStreamAppliesAndEndsOnBadInput) {
  LoopbackGuest g;
  PortForwarder f(g.Options());
  uint16_t p = static_cast<uint16_t>(testnet::FreeLoopbackPort());
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::atomic<size_t> applied{0};
  std::thread t([&] { applied = f.ServeReports(sv[0], std::chrono::milliseconds(0)); });
  std::string line = "ports " + std::to_string(p) + "\n";
  ASSERT_EQ(write(sv[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
  // Wait (bounded) for the forward to appear.
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = f.List().size() == 1;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling, bounded
  }
  ASSERT_TRUE(up);
  EXPECT_EQ(f.List()[0].spec.guest_port, p);

  // A second report stream at the same time is refused (closed at once).
  int sv2[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2), 0);
  EXPECT_EQ(f.ServeReports(sv2[0], std::chrono::milliseconds(0)), 0u);
  char c;
  EXPECT_EQ(read(sv2[1], &c, 1), 0);
  close(sv2[1]);

  ASSERT_EQ(write(sv[1], "ports 127.0.0.1:22\n", 19), 19);
  t.join();
  EXPECT_EQ(applied.load(), 1u);
  EXPECT_TRUE(f.List().empty());
  close(sv[1]);

  // A line that never ends is cut at kMaxReportLine (the stream ends without waiting for more).
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::string endless = "ports " + std::string(kMaxReportLine, '1');
  ASSERT_EQ(write(sv[1], endless.data(), endless.size()), static_cast<ssize_t>(endless.size()));
  shutdown(sv[1], SHUT_WR);
  EXPECT_EQ(f.ServeReports(sv[0], std::chrono::milliseconds(0)), 0u);
  close(sv[1]);
  std::lock_guard<std::mutex> l(g.mu);
  bool cut = false;
  for (const std::string& line : g.log) cut |= line.find("too long") != std::string::npos;
  EXPECT_TRUE(cut) << "an endless report line was not cut at kMaxReportLine";
}

TEST(PortForwarderTest, StopAllClosesEverythingAndEndsReports) {
  LoopbackGuest g;
  PortForwarder f(g.Options());
  PortSpec spec;
  spec.guest_port = 1;
  auto a = f.AddForward(spec);
  ASSERT_TRUE(a.ok());
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::thread t([&] { f.ServeReports(sv[0], std::chrono::milliseconds(0)); });
  // Once its report applied, ServeReports holds the stream; StopAll must end it.
  uint16_t p = static_cast<uint16_t>(testnet::FreeLoopbackPort());
  std::string line = "ports " + std::to_string(p) + "\n";
  ASSERT_EQ(write(sv[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = f.List().size() == 2;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling, bounded
  }
  ASSERT_TRUE(up);
  f.StopAll();
  t.join();
  EXPECT_TRUE(f.List().empty());
  EXPECT_LT(ConnectTo("127.0.0.1", a->host_port), 0);
  close(sv[1]);
  // Still usable after StopAll (the next boot).
  EXPECT_TRUE(f.AddForward(spec).ok());
}

}  // namespace
}  // namespace cloister::vm

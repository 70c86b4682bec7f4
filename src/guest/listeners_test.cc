#include "guest/listeners.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "guest/config.h"
#include "protocol/contract.h"

namespace cloister::guest {
namespace {

// As the kernel writes them on x86-64 (each address word is its host-order value in %08X).
constexpr char kTcp[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20569 1 0000000000000000 100 0 0 10 0\n"
    "   1: 00000000:1435 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 20570 1 0000000000000000 100 0 0 10 0\n"
    "   2: 0F02000A:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20571 1 0000000000000000 100 0 0 10 0\n"
    "   3: 0100007F:0C38 0100007F:D2F4 01 00000000:00000000 00:00000000 00000000     0        0 20572 1 0000000000000000 20 4 30 10 -1\n"
    "   4: 0200007F:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20573 1 0000000000000000 100 0 0 10 0\n";

constexpr char kTcp6[] =
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0000000000000000 100 0 0 10 0\n"
    "   1: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 100 0 0 10 0\n"
    "   2: 0000000000000000FFFF00000100007F:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 3 1 0000000000000000 100 0 0 10 0\n"
    "   3: 000080FE00000000FF005450B6AD1DFE:1F93 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4 1 0000000000000000 100 0 0 10 0\n"
    "   4: 0000000000000000FFFF00000F02000A:1F94 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5 1 0000000000000000 100 0 0 10 0\n";

TEST(ProcNetTcpTest, KeepsLoopbackAndWildcardListeners) {
  auto v4 = ParseProcNetTcp(kTcp, false);
  ASSERT_TRUE(v4.ok()) << v4.error().ToString();
  // 3128 on 127.0.0.1, 5173 on 0.0.0.0, 9000 on 127.0.0.2; not 22 on 10.0.2.15 (unreachable by the
  // agent's loopback connect), not the established connection.
  EXPECT_EQ(*v4, (std::set<uint16_t>{3128, 5173, 9000}));
  auto v6 = ParseProcNetTcp(kTcp6, true);
  ASSERT_TRUE(v6.ok()) << v6.error().ToString();
  // ::, ::1, ::ffff:127.0.0.1; not fe80::..., not ::ffff:10.0.2.15.
  EXPECT_EQ(*v6, (std::set<uint16_t>{8080, 8081, 8082}));
  // The other family's text is not mistaken for this one.
  EXPECT_FALSE(ParseProcNetTcp(kTcp, true).ok());
  EXPECT_FALSE(ParseProcNetTcp(kTcp6, false).ok());
}

TEST(ProcNetTcpTest, MalformedInputIsAnErrorNeverACrash) {
  std::string header = "  sl  local_address rem_address   st\n";
  for (const char* bad : {"   0: 0100007F 00000000:0000 0A\n", "   0: 0100007G:0C38 00000000:0000 0A\n",
                          "   0: 0100007F:0C3 00000000:0000 0A\n", "   0: 0100007F:C38XY 0:0 0A\n",
                          "   0: 100007F:0C38 00000000:0000 0A\n", "   0 0100007F:0C38 0:0 0A\n",
                          "   0: 0100007F:0C38\n"}) {
    EXPECT_FALSE(ParseProcNetTcp(header + bad, false).ok()) << bad;
  }
  // Empty, header only, a line without its newline (cut): no ports, no error.
  EXPECT_TRUE(ParseProcNetTcp("", false).ok());
  EXPECT_TRUE(ParseProcNetTcp(header, false)->empty());
  EXPECT_TRUE(ParseProcNetTcp(header + "   0: 0100007F:0C38 00000000:0000 0A", false)->empty());
  // Port 0 (a socket mid-bind) is never reported.
  EXPECT_TRUE(ParseProcNetTcp(header + "   0: 0100007F:0000 00000000:0000 0A x\n", false)->empty());
}

TEST(ProcNetTcpTest, ReadsThisHostsListeners) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t port = ntohs(a.sin_port);
  auto ports = ReadListeningPorts("/proc/net", {});
  ASSERT_TRUE(ports.ok()) << ports.error().ToString();
  EXPECT_TRUE(ports->count(port)) << port;
  auto excluded = ReadListeningPorts("/proc/net", {port});
  ASSERT_TRUE(excluded.ok());
  EXPECT_FALSE(excluded->count(port));
  close(fd);
  auto after = ReadListeningPorts("/proc/net", {});
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->count(port));
}

TEST(ProcNetTcpTest, ReportFormatIsBounded) {
  EXPECT_EQ(FormatPortsReport({}), "ports\n");
  EXPECT_EQ(FormatPortsReport({8080, 22}), "ports 22 8080\n");
  std::set<uint16_t> many;
  for (int p = 1; p <= 1000; ++p) many.insert(static_cast<uint16_t>(p));
  std::string line = FormatPortsReport(many);
  size_t count = 0;
  for (char c : line) count += c == ' ';
  EXPECT_EQ(count, protocol::kMaxReportedPorts);
}

// A fake /proc/net the test rewrites, and a report stream on a socketpair.
TEST(ListenerWatcherTest, ReportsChangesAndReopensTheStream) {
  std::string dir = ::testing::TempDir() + "/listeners_test_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::string header = "  sl  local_address rem_address   st\n";
  auto write_tcp = [&](const std::string& body) {
    std::ofstream(dir + "/tcp.tmp") << header << body;
    std::filesystem::rename(dir + "/tcp.tmp", dir + "/tcp");
  };
  write_tcp("   0: 0100007F:1435 00000000:0000 0A x\n   1: 00000000:0C38 00000000:0000 0A x\n");

  std::mutex mu;
  std::vector<int> host_ends;
  ListenerWatcherOptions o;
  o.proc_net = dir;  // no tcp6 there: IPv4 only
  o.exclude = {3128};
  o.interval = std::chrono::milliseconds(20);
  o.retry = std::chrono::milliseconds(0);
  o.open_stream = [&]() -> int {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    std::lock_guard<std::mutex> l(mu);
    host_ends.push_back(sv[1]);
    return sv[0];
  };
  ListenerWatcher w(o);
  w.Start();
  auto read_line = [&](size_t stream) {
    int fd;
    for (int i = 0; i < 500; ++i) {  // bounded wait for the stream to exist
      {
        std::lock_guard<std::mutex> l(mu);
        if (host_ends.size() > stream) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    {
      std::lock_guard<std::mutex> l(mu);
      if (host_ends.size() <= stream) return std::string("(no stream)");
      fd = host_ends[stream];
    }
    std::string line;
    char c;
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, 10000) > 0 && read(fd, &c, 1) == 1) {
      line.push_back(c);
      if (c == '\n') break;
    }
    return line;
  };
  EXPECT_EQ(read_line(0), "ports 5173\n");  // 3128 is the agent's own: excluded
  write_tcp("   0: 0100007F:1435 00000000:0000 0A x\n   1: 00000000:1F90 00000000:0000 0A x\n");
  EXPECT_EQ(read_line(0), "ports 5173 8080\n");
  write_tcp("");
  EXPECT_EQ(read_line(0), "ports\n");
  // The host side ends the stream: the watcher opens a new one and sends the full set again.
  write_tcp("   0: 0100007F:1435 00000000:0000 0A x\n");
  {
    std::lock_guard<std::mutex> l(mu);
    close(host_ends[0]);
  }
  EXPECT_EQ(read_line(1), "ports 5173\n");
  w.Stop();
  EXPECT_GE(w.reports_sent(), 4u);
  std::lock_guard<std::mutex> l(mu);
  for (size_t i = 1; i < host_ends.size(); ++i) close(host_ends[i]);
  std::filesystem::remove_all(dir);
}

// The metadata config's switch: off unless the host says so; a non-boolean is refused.
TEST(ProcNetTcpTest, AutoPortsIsOptInInTheAgentConfig) {
  auto off = ParseAgentConfig(R"({"workspace":"ws"})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->auto_ports);
  auto on = ParseAgentConfig(R"({"workspace":"ws","auto_ports":true})");
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->auto_ports);
  EXPECT_FALSE(ParseAgentConfig(R"({"auto_ports":"yes"})").ok());
}

}  // namespace
}  // namespace cloister::guest

// The proxy's resolver (resolver.h) against a DNS server of the test's own on loopback: lookups
// run side by side (a slow name holds no other), lookups of one name share one query, and an
// answer is kept for its TTL (not at all for TTL 0).
#include "proxy/resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace cloister::proxy {
namespace {

using namespace std::chrono_literals;

// A UDP DNS server on 127.0.0.1: answers A queries from `zone` (name -> {address, ttl}) after
// the name's delay, NXDOMAIN otherwise, AAAA with no records. Counts the queries per name.
class FakeDns {
 public:
  struct Answer {
    std::string address;
    uint32_t ttl = 60;
    std::chrono::milliseconds delay{0};
  };
  explicit FakeDns(std::map<std::string, Answer> zone) : zone_(std::move(zone)) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len), 0);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeDns() {
    stop_ = true;
    thread_.join();
    for (auto& t : answering_) t.join();
    close(fd_);
  }
  std::string Server() const { return "127.0.0.1:" + std::to_string(port_); }
  int Queries(const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    return counts_[name];
  }

 private:
  void Loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char q[512];
      sockaddr_in from{};
      socklen_t flen = sizeof from;
      ssize_t n = recvfrom(fd_, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n < 17) continue;
      // The question: labels from offset 12, then QTYPE.
      std::string name;
      size_t i = 12;
      while (i < static_cast<size_t>(n) && q[i] != 0) {
        size_t l = static_cast<unsigned char>(q[i]);
        if (!name.empty()) name += '.';
        name.append(q + i + 1, std::min(l, static_cast<size_t>(n) - i - 1));
        i += l + 1;
      }
      size_t qend = i + 5;  // the root label, QTYPE, QCLASS
      if (qend > static_cast<size_t>(n)) continue;
      uint16_t qtype = static_cast<uint16_t>((static_cast<unsigned char>(q[i + 1]) << 8) |
                                             static_cast<unsigned char>(q[i + 2]));
      std::string query(q, qend);
      auto it = zone_.find(name);
      std::chrono::milliseconds delay = it == zone_.end() ? 0ms : it->second.delay;
      if (qtype == 1) {
        std::lock_guard<std::mutex> l(mu_);
        ++counts_[name];
      }
      answering_.emplace_back([this, query, from, it, qtype, delay] {
        std::this_thread::sleep_for(delay);
        std::string r = query;
        r[2] = static_cast<char>(0x81);  // QR, RD
        bool found = it != zone_.end();
        r[3] = static_cast<char>(found ? 0x80 : 0x83);  // RA; NXDOMAIN when unknown
        bool answer = found && qtype == 1;
        r[6] = 0;
        r[7] = answer ? 1 : 0;
        r[8] = r[9] = r[10] = r[11] = 0;
        if (answer) {
          uint32_t ttl = it->second.ttl;
          in_addr a{};
          inet_pton(AF_INET, it->second.address.c_str(), &a);
          r += std::string("\xc0\x0c\x00\x01\x00\x01", 6);
          r += static_cast<char>(ttl >> 24);
          r += static_cast<char>(ttl >> 16);
          r += static_cast<char>(ttl >> 8);
          r += static_cast<char>(ttl);
          r += std::string("\x00\x04", 2);
          r.append(reinterpret_cast<const char*>(&a), 4);
        }
        sendto(fd_, r.data(), r.size(), 0, reinterpret_cast<const sockaddr*>(&from), sizeof from);
      });
    }
  }

  std::map<std::string, Answer> zone_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> answering_;  // only the loop thread adds; joined after it
  std::mutex mu_;
  std::map<std::string, int> counts_;
};

// Runs `lookups` at once on one event loop; each result with its completion order.
struct Done {
  Result<std::vector<asio::ip::address>> result = Error(ErrorCode::kInternal, "not run");
  int order = -1;
};
std::vector<Done> ResolveAll(Resolver& r, asio::io_context& io,
                             const std::vector<std::string>& names) {
  std::vector<Done> done(names.size());
  int next = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    asio::co_spawn(io, [&, i]() -> awaitable<void> {
      done[i].result = co_await r.Resolve(names[i]);
      done[i].order = next++;
    }, asio::detached);
  }
  io.run_for(20s);
  io.restart();
  return done;
}

TEST(ResolverTest, ASlowNameHoldsNoOtherAndOneNameIsOneQuery) {
  FakeDns dns({{"slow.test", {"192.0.2.1", 60, 1500ms}}, {"fast.test", {"192.0.2.2", 60, 0ms}}});
  asio::io_context io;
  auto r = Resolver::Create(io, dns.Server());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  auto done = ResolveAll(**r, io, {"slow.test", "slow.test", "fast.test", "nothing.test"});
  ASSERT_TRUE(done[0].result.ok()) << done[0].result.error().ToString();
  ASSERT_TRUE(done[2].result.ok()) << done[2].result.error().ToString();
  EXPECT_EQ((*done[0].result)[0].to_string(), "192.0.2.1");
  EXPECT_EQ((*done[2].result)[0].to_string(), "192.0.2.2");
  EXPECT_FALSE(done[3].result.ok());
  // The fast name and the unknown one came back before the slow one, asked for first.
  EXPECT_LT(done[2].order, done[0].order);
  EXPECT_LT(done[3].order, done[0].order);
  // Two lookups of slow.test while one was in flight: one query.
  EXPECT_EQ(dns.Queries("slow.test"), 1);
}

TEST(ResolverTest, AnAnswerIsKeptForItsTtlAndNotAtAllForTtlZero) {
  FakeDns dns({{"kept.test", {"192.0.2.3", 300, 0ms}}, {"once.test", {"192.0.2.4", 0, 0ms}}});
  asio::io_context io;
  auto r = Resolver::Create(io, dns.Server());
  ASSERT_TRUE(r.ok());
  for (int i = 0; i < 3; ++i) {
    auto done = ResolveAll(**r, io, {"kept.test", "once.test"});
    ASSERT_TRUE(done[0].result.ok() && done[1].result.ok());
  }
  EXPECT_EQ(dns.Queries("kept.test"), 1);
  EXPECT_EQ(dns.Queries("once.test"), 3);
  // An IP literal is no query at all.
  auto lit = ResolveAll(**r, io, {"198.51.100.7"});
  ASSERT_TRUE(lit[0].result.ok());
  EXPECT_EQ((*lit[0].result)[0].to_string(), "198.51.100.7");
}

}  // namespace
}  // namespace cloister::proxy

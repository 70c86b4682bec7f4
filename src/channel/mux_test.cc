#include "channel/mux.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "channel/frame.h"

namespace cloister::channel {
namespace {

using namespace std::chrono_literals;

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until EOF or until the deadline; the deadline only bounds a broken test.
std::string ReadToEof(int fd, std::chrono::milliseconds limit = 20s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::string out;
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string ReadExactly(int fd, size_t len, std::chrono::milliseconds limit = 20s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::string out;
  char buf[65536];
  while (out.size() < len && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(fd, buf, std::min(sizeof buf, len - out.size()));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Serves an echo on `fd` on its own thread (services must not block the loop).
void EchoService(int fd, const std::vector<std::string>&) {
  std::thread([fd] {
    char buf[65536];
    while (true) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      if (!WriteAll(fd, std::string_view(buf, static_cast<size_t>(n)))) break;
    }
    close(fd);
  }).detach();
}

// A host mux and a guest mux talking over one socketpair, as over the virtio-serial port.
class MuxPair {
 public:
  explicit MuxPair(size_t guest_max_streams = 64, size_t guest_max_waiting = 1024) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    MuxOptions h;
    h.role = MuxRole::kHost;
    h.on_ready = [this](const std::string& info) {
      std::lock_guard<std::mutex> l(mu);
      ready_info = info;
      cv.notify_all();
    };
    h.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> l(mu);
      host_log += std::string(line) + "\n";
    };
    MuxOptions g;
    g.role = MuxRole::kGuest;
    g.max_streams = guest_max_streams;
    g.max_waiting_opens = guest_max_waiting;
    host = Mux::Create(sv[0], h).value();
    guest = Mux::Create(sv[1], g).value();
  }
  void Start() {
    ASSERT_TRUE(host->Start().ok());
    ASSERT_TRUE(guest->Start().ok());
  }

  std::mutex mu;
  std::condition_variable cv;
  std::string ready_info;
  std::string host_log;
  std::unique_ptr<Mux> host;
  std::unique_ptr<Mux> guest;
};

TEST(MuxTest, HostOpensGuestServiceAndEchoesWithHalfClose) {
  MuxPair p;
  p.guest->RegisterService("echo", EchoService);
  p.Start();
  auto fd = p.host->Open("echo", {});
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  std::string payload = RandomBytes(1 << 20, 1);
  std::thread writer([&] {
    EXPECT_TRUE(WriteAll(*fd, payload));
    shutdown(*fd, SHUT_WR);  // EOF crosses the channel; the echo then closes its side
  });
  std::string got = ReadToEof(*fd);
  writer.join();
  EXPECT_EQ(got.size(), payload.size());
  EXPECT_TRUE(got == payload);
  close(*fd);
}

TEST(MuxTest, OpenArgsReachTheService) {
  MuxPair p;
  std::mutex mu;
  std::vector<std::string> seen;
  p.guest->RegisterService("args", [&](int fd, const std::vector<std::string>& args) {
    {
      std::lock_guard<std::mutex> l(mu);
      seen = args;
    }
    close(fd);
  });
  p.Start();
  auto fd = p.host->Open("args", {"one", "two words"});
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(ReadToEof(*fd), "");  // the service closed: EOF arrives
  close(*fd);
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two words"}));
}

TEST(MuxTest, UnregisteredServiceIsRefusedAndChannelStaysUp) {
  MuxPair p;
  p.guest->RegisterService("echo", EchoService);
  p.host->RegisterService("proxy", EchoService);
  p.Start();
  auto bad = p.guest->Open("ssh-agent", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(bad.error().message().find("no such service: ssh-agent"), std::string::npos);
  {
    std::lock_guard<std::mutex> l(p.mu);
    EXPECT_NE(p.host_log.find("unregistered service 'ssh-agent'"), std::string::npos);
  }
  // Guest -> host service works, and host -> guest too, on the same channel.
  auto fd = p.guest->Open("proxy", {});
  ASSERT_TRUE(fd.ok());
  ASSERT_TRUE(WriteAll(*fd, "ping"));
  EXPECT_EQ(ReadExactly(*fd, 4), "ping");
  close(*fd);
  auto fd2 = p.host->Open("echo", {});
  ASSERT_TRUE(fd2.ok());
  close(*fd2);
}

TEST(MuxTest, ManyConcurrentStreamsBothDirectionsKeepTheirBytes) {
  MuxPair p;
  p.guest->RegisterService("echo", EchoService);
  p.host->RegisterService("echo", EchoService);
  p.Start();
  constexpr int kStreams = 40;
  constexpr size_t kBytes = 256 * 1024;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      Mux* side = (i % 2 == 0) ? p.host.get() : p.guest.get();
      auto fd = side->Open("echo", {});
      if (!fd.ok()) return;
      std::string data = RandomBytes(kBytes, 100 + i);
      std::thread w([&] {
        WriteAll(*fd, data);
        shutdown(*fd, SHUT_WR);
      });
      std::string got = ReadToEof(*fd);
      w.join();
      close(*fd);
      if (got == data) ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), kStreams);
  // Every stream is forgotten on both sides once both CLOSEs crossed.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((p.host->Stats().open_streams || p.guest->Stats().open_streams) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(p.host->Stats().open_streams, 0u);
  EXPECT_EQ(p.guest->Stats().open_streams, 0u);
}

TEST(MuxTest, SlowReaderNeitherBlocksOtherStreamsNorGrowsMemory) {
  MuxPair p;
  std::mutex mu;
  std::condition_variable cv;
  int sink_fd = -1;
  p.guest->RegisterService("sink", [&](int fd, const std::vector<std::string>&) {
    std::lock_guard<std::mutex> l(mu);
    sink_fd = fd;  // nobody reads it (yet)
    cv.notify_all();
  });
  p.guest->RegisterService("echo", EchoService);
  p.Start();
  auto slow = p.host->Open("sink", {});
  ASSERT_TRUE(slow.ok());
  // Fill the slow stream until the host-side socket refuses more: the mux stopped reading it.
  fcntl(*slow, F_SETFL, fcntl(*slow, F_GETFL) | O_NONBLOCK);
  std::string chunk(64 * 1024, 's');
  size_t written = 0;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  int idle_polls = 0;
  while (std::chrono::steady_clock::now() < deadline && idle_polls < 5) {
    ssize_t n = send(*slow, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n > 0) {
      written += static_cast<size_t>(n);
      idle_polls = 0;
      continue;
    }
    pollfd pf{*slow, POLLOUT, 0};
    if (poll(&pf, 1, 200) == 0) ++idle_polls;  // stays unwritable: backpressure reached us
  }
  ASSERT_GT(written, size_t{kInitialWindow});
  ASSERT_LT(written, size_t{64} << 20) << "no backpressure";
  // The guest buffers at most one window for the stalled stream.
  EXPECT_LE(p.guest->Stats().inbound_buffered, size_t{kInitialWindow});
  EXPECT_LE(p.host->Stats().outbound_buffered, size_t{1} << 20);

  // Another stream still flows both ways while the slow one is stalled.
  auto fast = p.host->Open("echo", {});
  ASSERT_TRUE(fast.ok());
  std::string data = RandomBytes(2 << 20, 7);
  std::thread w([&] {
    WriteAll(*fast, data);
    shutdown(*fast, SHUT_WR);
  });
  EXPECT_TRUE(ReadToEof(*fast) == data);
  w.join();
  close(*fast);

  // Now the slow reader drains everything, intact and in order.
  int fd;
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return sink_fd >= 0; }));
    fd = sink_fd;
  }
  shutdown(*slow, SHUT_WR);
  std::string got = ReadToEof(fd);
  EXPECT_EQ(got.size(), written);
  EXPECT_EQ(got.find_first_not_of('s'), std::string::npos);
  close(fd);
  close(*slow);
}

TEST(MuxTest, StreamCapRefusesExtraOpens) {
  MuxPair p(/*guest_max_streams=*/3);
  std::vector<int> held;
  std::mutex mu;
  p.guest->RegisterService("hold", [&](int fd, const std::vector<std::string>&) {
    std::lock_guard<std::mutex> l(mu);
    held.push_back(fd);
  });
  p.Start();
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) {
    auto fd = p.host->Open("hold", {});
    ASSERT_TRUE(fd.ok()) << i;
    fds.push_back(*fd);
  }
  auto extra = p.host->Open("hold", {});
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.error().message().find("too many"), std::string::npos);
  // Closing one stream on both ends frees a slot.
  close(fds[0]);
  {
    std::lock_guard<std::mutex> l(mu);
    close(held[0]);
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (p.guest->Stats().open_streams >= 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  auto again = p.host->Open("hold", {});
  EXPECT_TRUE(again.ok());
  if (again.ok()) close(*again);
  for (size_t i = 1; i < fds.size(); ++i) close(fds[i]);
  std::lock_guard<std::mutex> l(mu);
  for (size_t i = 1; i < held.size(); ++i) close(held[i]);
}

// The guest's own opens past its cap are not refused (a client whose connection is closed
// unanswered may wait forever): they wait, in order, for a stream to end, up to a bound.
TEST(MuxTest, OwnOpensPastTheCapWaitForAStreamToEnd) {
  std::vector<int> held;  // before the muxes: their threads use it until they stop
  std::mutex mu;
  std::condition_variable cv;
  MuxPair p(/*guest_max_streams=*/3, /*guest_max_waiting=*/2);
  p.host->RegisterService("hold", [&](int fd, const std::vector<std::string>&) {
    std::lock_guard<std::mutex> l(mu);
    held.push_back(fd);
    cv.notify_all();
  });
  p.Start();
  struct Client {
    int fd = -1;
    std::shared_ptr<std::promise<Status>> done = std::make_shared<std::promise<Status>>();
    std::future<Status> result = done->get_future();
  };
  std::vector<Client> clients(6);
  for (Client& c : clients) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    c.fd = sv[1];
    auto done = c.done;
    p.guest->OpenAsync("hold", {}, sv[0], [done](Status st) { done->set_value(std::move(st)); });
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(clients[i].result.wait_for(10s), std::future_status::ready) << i;
    EXPECT_TRUE(clients[i].result.get().ok()) << i;
  }
  // Two wait; the sixth is past the waiting bound.
  ASSERT_EQ(clients[5].result.wait_for(10s), std::future_status::ready);
  Status sixth = clients[5].result.get();
  ASSERT_FALSE(sixth.ok());
  EXPECT_NE(sixth.error().message().find("waiting"), std::string::npos) << sixth.error().message();
  EXPECT_EQ(clients[3].result.wait_for(200ms), std::future_status::timeout);
  EXPECT_EQ(p.guest->Stats().waiting_opens, 2u);
  // One stream ends on both sides: the first waiting open takes its place, and carries bytes.
  close(clients[0].fd);
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return held.size() == 3; }));
    close(held[0]);
  }
  ASSERT_EQ(clients[3].result.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(clients[3].result.get().ok());
  EXPECT_EQ(clients[4].result.wait_for(200ms), std::future_status::timeout);
  ASSERT_TRUE(WriteAll(clients[3].fd, "after the wait"));
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return held.size() == 4; }));
  }
  EXPECT_EQ(ReadExactly(held[3], 14), "after the wait");
  p.guest->Stop();
  p.host->Stop();
  for (size_t i = 1; i < clients.size(); ++i) close(clients[i].fd);
  std::lock_guard<std::mutex> l(mu);
  for (size_t i = 1; i < held.size(); ++i) close(held[i]);
}

TEST(MuxTest, ReadyReachesTheHost) {
  MuxPair p;
  p.Start();
  EXPECT_FALSE(p.host->Stats().ready_received);
  p.guest->SendReady("agent ok\x1b[2J");
  std::unique_lock<std::mutex> l(p.mu);
  ASSERT_TRUE(p.cv.wait_for(l, 10s, [&] { return !p.ready_info.empty(); }));
  EXPECT_EQ(p.ready_info, "agent ok?[2J");
  l.unlock();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!p.host->Stats().ready_received && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(p.host->Stats().ready_received);
}

TEST(MuxTest, PeerDisconnectEndsTheLoopAndFailsOpens) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  auto host = Mux::Create(sv[0], MuxOptions{}).value();
  ASSERT_TRUE(host->Start().ok());
  close(sv[1]);
  Error why = host->Wait();
  EXPECT_EQ(why.code(), ErrorCode::kUnavailable);
  auto fd = host->Open("exec", {}, 5s);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().code(), ErrorCode::kUnavailable);
}

// Copies bytes both ways between two fds until stopped.
class Relay {
 public:
  Relay(int a, int b) : a_(a), b_(b), thread_([this] { Run(); }) {}
  ~Relay() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    char buf[65536];
    while (!stop_) {
      pollfd p[2] = {{a_, POLLIN, 0}, {b_, POLLIN, 0}};
      if (poll(p, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & POLLIN)) continue;
        ssize_t n = read(p[i].fd, buf, sizeof buf);
        if (n > 0) WriteAll(i == 0 ? b_ : a_, std::string_view(buf, static_cast<size_t>(n)));
      }
    }
  }
  int a_, b_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(MuxTest, GuestResetsItsSessionWhenANewHostConnects) {
  // The guest's port stays open while the host side is replaced (suspend/resume): the new host
  // must get a working session, and READY again, even after torn bytes of the old one.
  int g[2], h1[2], h2[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, h1), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, h2), 0);
  MuxOptions go;
  go.role = MuxRole::kGuest;
  auto guest = Mux::Create(g[0], go).value();
  guest->RegisterService("echo", EchoService);
  ASSERT_TRUE(guest->Start().ok());
  guest->SendReady("terminal ok");

  std::mutex mu;
  std::condition_variable cv;
  int readies = 0;
  MuxOptions ho;
  ho.on_ready = [&](const std::string& info) {
    std::lock_guard<std::mutex> l(mu);
    if (info == "terminal ok") ++readies;
    cv.notify_all();
  };
  auto host1 = Mux::Create(h1[0], ho).value();
  ASSERT_TRUE(host1->Start().ok());
  auto relay1 = std::make_unique<Relay>(g[1], h1[1]);
  auto old_stream = host1->Open("echo", {});
  ASSERT_TRUE(old_stream.ok());
  ASSERT_TRUE(WriteAll(*old_stream, "old"));
  EXPECT_EQ(ReadExactly(*old_stream, 3), "old");
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return readies == 1; }));
  }
  relay1.reset();  // the old host vanishes without a word
  host1.reset();
  close(h1[1]);
  // A torn frame of the old session reaches the guest first.
  ASSERT_TRUE(WriteAll(g[1], std::string("\x00\x00\x00\x40\x00\x00\x00\x01\x05" "abc", 12)));

  auto host2 = Mux::Create(h2[0], ho).value();
  ASSERT_TRUE(host2->Start().ok());
  Relay relay2(g[1], h2[1]);
  auto fd = host2->Open("echo", {}, 20s);
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  ASSERT_TRUE(WriteAll(*fd, "new"));
  EXPECT_EQ(ReadExactly(*fd, 3), "new");
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return readies == 2; }));
  }
  // The old session's stream was reset on the guest: its echo saw EOF and closed.
  close(*fd);
  close(*old_stream);
  relay2.Stop();
  host2.reset();
  guest.reset();
  close(g[1]);
  close(h2[1]);
}

TEST(MuxTest, StopIsCleanAndTellsThePeer) {
  MuxPair p;
  p.guest->RegisterService("echo", EchoService);
  p.Start();
  auto fd = p.host->Open("echo", {});
  ASSERT_TRUE(fd.ok());
  p.host->Stop();
  EXPECT_EQ(p.host->Wait().code(), ErrorCode::kCancelled);
  EXPECT_EQ(ReadToEof(*fd), "");  // the stream's local socket sees EOF
  // GOAWAY resets the guest's session; the socket's EOF then ends its loop.
  Error g = p.guest->Wait();
  EXPECT_EQ(g.code(), ErrorCode::kUnavailable);
  EXPECT_FALSE(p.guest->Stats().session_established);
  close(*fd);
}

// A hand-driven hostile guest: raw bytes into a host mux.
class HostileGuest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    raw_ = sv[1];
    MuxOptions o;
    o.role = MuxRole::kHost;
    host_ = Mux::Create(sv[0], o).value();
    host_->RegisterService("proxy", [this](int fd, const std::vector<std::string>&) {
      std::lock_guard<std::mutex> l(mu_);
      service_fds_.push_back(fd);
    });
    ASSERT_TRUE(host_->Start().ok());
  }
  void TearDown() override {
    host_.reset();
    close(raw_);
    for (int fd : service_fds_) close(fd);
  }
  void Send(FrameType t, uint32_t stream, std::string_view payload) {
    std::string out;
    EncodeFrame(t, stream, payload, out);
    ASSERT_TRUE(WriteAll(raw_, out));
  }
  void SendRaw(std::string_view bytes) { ASSERT_TRUE(WriteAll(raw_, bytes)); }
  // Answers the host's HELLO with its session id, as a guest does.
  void Hello() {
    std::string h = ReadExactly(raw_, kHelloFrameSize);
    ASSERT_EQ(h.size(), kHelloFrameSize);
    auto session = ParseHello(std::string_view(h).substr(kHeaderSize));
    ASSERT_TRUE(session.ok());
    Send(FrameType::kHello, 0, EncodeHello(*session));
  }
  void OpenProxy(uint32_t id) { Send(FrameType::kOpen, id, *EncodeOpen({"proxy", {}})); }

  // Waits for the host to close the channel; returns its reason, and checks that it told us
  // with GOAWAY before closing.
  Error ExpectClosed() {
    EXPECT_TRUE(host_->WaitFor(10s));
    Error why = host_->Wait();
    std::string bytes = ReadToEof(raw_, 10s);
    FrameDecoder d;
    d.Feed(bytes);
    bool goaway = false;
    while (true) {
      auto f = d.Next();
      if (!f.ok() || !f->has_value()) break;
      if ((*f)->type == FrameType::kGoAway) goaway = true;
    }
    EXPECT_TRUE(goaway) << "host did not send GOAWAY";
    return why;
  }

  int raw_ = -1;
  std::unique_ptr<Mux> host_;
  std::mutex mu_;
  std::vector<int> service_fds_;
};

TEST_F(HostileGuest, StaleBytesAndForeignSessionsBeforeHelloAreSkipped) {
  OpenProxy(2);                                   // before any HELLO: stale, skipped
  Send(FrameType::kHello, 0, EncodeHello(12345));  // an answer to another connection: skipped
  SendRaw("\x00\x00\x01");                       // a torn frame
  Hello();
  OpenProxy(2);
  // Stats() is a snapshot the mux loop refreshes once per iteration, so it can lag the service
  // handler's call by one iteration: wait for both.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!service_fds_.empty() && host_->Stats().session_established) break;
    }
    std::this_thread::yield();
  }
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_EQ(service_fds_.size(), 1u);
  EXPECT_TRUE(host_->Stats().session_established);
}

TEST_F(HostileGuest, SecondHelloClosesChannel) {
  Hello();
  Send(FrameType::kHello, 0, EncodeHello(1));
  EXPECT_NE(ExpectClosed().message().find("second HELLO"), std::string::npos);
}

TEST_F(HostileGuest, WrongVersionClosesChannelWithHint) {
  std::string h = EncodeHello(1);
  h[7] = 9;
  Send(FrameType::kHello, 0, h);
  Error e = ExpectClosed();
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(e.message().find("version 9"), std::string::npos);
}

TEST_F(HostileGuest, OversizedFrameClosesChannel) {
  Hello();
  SendRaw(std::string("\x7f\xff\xff\xff\x00\x00\x00\x02\x05", 9));
  Error e = ExpectClosed();
  EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
  EXPECT_NE(e.message().find("exceeds the limit"), std::string::npos);
}

TEST_F(HostileGuest, DataForUnknownStreamClosesChannel) {
  Hello();
  Send(FrameType::kData, 6, "x");
  Error e = ExpectClosed();
  EXPECT_NE(e.message().find("unknown stream 6"), std::string::npos);
}

TEST_F(HostileGuest, OpenWithHostParityClosesChannel) {
  Hello();
  OpenProxy(3);
  EXPECT_NE(ExpectClosed().message().find("parity"), std::string::npos);
}

TEST_F(HostileGuest, ReusedStreamIdClosesChannel) {
  Hello();
  OpenProxy(4);
  OpenProxy(4);
  EXPECT_NE(ExpectClosed().message().find("reused"), std::string::npos);
}

TEST_F(HostileGuest, DataBeyondWindowClosesChannel) {
  Hello();
  OpenProxy(2);
  // Nobody reads the service fd: the host grants credit only for what fits in the local socket
  // buffer, and a guest that ignores its credit overruns the window within a few MiB.
  std::string frame;
  EncodeFrame(FrameType::kData, 2, std::string(kMaxPayload, 'x'), frame);
  for (int i = 0; i < 256; ++i) {
    if (send(raw_, frame.data(), frame.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size())) {
      break;  // the host closed on us
    }
  }
  Error e = ExpectClosed();
  EXPECT_NE(e.message().find("beyond the flow-control window"), std::string::npos);
}

TEST_F(HostileGuest, WindowOverflowClosesChannel) {
  Hello();
  OpenProxy(2);
  Send(FrameType::kWindow, 2, EncodeWindow(kMaxWindow));
  EXPECT_NE(ExpectClosed().message().find("WINDOW overflow"), std::string::npos);
}

TEST_F(HostileGuest, GarbageNeverCrashesAndAlwaysCloses) {
  Hello();
  SendRaw(RandomBytes(4096, 99));
  Error e = ExpectClosed();
  EXPECT_TRUE(e.code() == ErrorCode::kCorrupt || e.code() == ErrorCode::kFailedPrecondition)
      << e.message();
}

}  // namespace
}  // namespace cloister::channel

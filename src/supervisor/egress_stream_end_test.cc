// What the proxy's trace says of a request whose guest stream ended under it, as the supervisor
// wires the channel to the proxy (Egress::EndReason over channel::StreamEnd): a stream the guest
// reset is stream_reset, the channel's end is channel_closed (a plain client close:
// proxy/abort_test.cc).
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>

#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/proxy.h"
#include "proxy/trace.h"
#include "supervisor/egress.h"
#include "supervisor/testing_mux.h"

namespace cloister::vm {
namespace {

using namespace std::chrono_literals;

class StreamEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = std::move(proxy::testing::FakeUpstream::Start(
                              nullptr,
                              [this](const proxy::testing::SeenRequest&,
                                     proxy::testing::ResponseWriter& w) {
                                w.StartChunked(200, {});
                                w.Chunk(std::string(4096, 'a'));
                                more_.Wait(20s);
                                std::string block(64 << 10, 'b');
                                for (int i = 0; i < 64 && w.Chunk(block); ++i) {
                                }
                                w.End();
                              })
                              .value());
    char tmpl[] = "/tmp/cloister-stream-end-XXXXXX";
    dir_ = mkdtemp(tmpl);
    trace_ = dir_ + "/trace.jsonl";
    proxy::ProxyConfig pc;
    pc.workspace = "ws";
    pc.ca = *proxy::CertAuthority::CreateInMemory("test proxy CA");
    pc.resolve = {{"up.test:80", upstream_->Address()}};
    pc.resolve_only = true;
    pc.trace = *proxy::TraceSink::Open(trace_);
    proxy_ = std::move(proxy::Proxy::Start(std::move(pc)).value());
    std::tie(host_, guest_) = testing::MuxPair();
    ASSERT_TRUE(host_ && guest_);
    proxy::Proxy* px = proxy_.get();
    host_->RegisterStreamService(
        "proxy", [px](int fd, const std::vector<std::string>&,
                      std::shared_ptr<const channel::StreamEnd> end) {
          px->Serve(fd, "", Egress::EndReason(std::move(end)));
        });
    ASSERT_TRUE(host_->Start().ok());
    ASSERT_TRUE(guest_->Start().ok());
  }
  void TearDown() override {
    more_.Open();
    if (guest_) guest_->Stop();
    if (host_) host_->Stop();
    proxy_.reset();
    upstream_.reset();
    std::filesystem::remove_all(dir_);
  }
  // A guest client's request through a guest stream of the "proxy" service; returns its end.
  int Request(const std::string& path) {
    auto fd = guest_->Open("proxy", {});
    EXPECT_TRUE(fd.ok());
    std::string req = "GET http://up.test" + path + " HTTP/1.1\r\nHost: up.test\r\n\r\n";
    EXPECT_EQ(send(*fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    EXPECT_TRUE(upstream_->WaitForRequests(1, 10s));
    return *fd;
  }
  std::vector<proxy::TraceRecord> Records(size_t n) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      auto recs = proxy::ReadTrace(trace_);
      if ((recs.ok() && recs->size() >= n) || std::chrono::steady_clock::now() > deadline) {
        return recs.ok() ? *recs : std::vector<proxy::TraceRecord>{};
      }
      std::this_thread::sleep_for(5ms);
    }
  }

  proxy::testing::Gate more_;
  std::unique_ptr<proxy::testing::FakeUpstream> upstream_;
  std::string dir_, trace_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::unique_ptr<channel::Mux> host_, guest_;
};

TEST_F(StreamEndTest, AGuestStreamResetUnderARequestIsRecordedAsStreamReset) {
  int fd = Request("/reset");
  // The head and the first piece reach the client's end unread; closing it then is a reset of
  // the guest's side of the stream (the guest Mux's read fails: CLOSE without EOF).
  std::this_thread::sleep_for(200ms);
  close(fd);
  std::this_thread::sleep_for(200ms);
  more_.Open();
  auto recs = Records(1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].path, "/reset");
  EXPECT_EQ(recs[0].abort, proxy::kAbortStreamReset);
  EXPECT_EQ(recs[0].status, 200);
}

TEST_F(StreamEndTest, AChannelClosedUnderARequestIsRecordedAsChannelClosed) {
  int fd = Request("/held");
  guest_->Stop();  // the guest side goes (GOAWAY): the host closes every stream
  ASSERT_TRUE(host_->WaitFor(10s));
  more_.Open();
  auto recs = Records(1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].path, "/held");
  EXPECT_EQ(recs[0].abort, proxy::kAbortChannelClosed);
  close(fd);
}

}  // namespace
}  // namespace cloister::vm

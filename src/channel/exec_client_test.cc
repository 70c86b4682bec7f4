// RunExec against a peer that never answers (a frozen guest): a forwarded SIGTERM, or an abort,
// ends the session instead of waiting forever.
#include "channel/exec_client.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "channel/exec_proto.h"

namespace cloister::channel {
namespace {

class SilentPeer : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv_), 0); }
  void TearDown() override {
    close(sv_[0]);
    close(sv_[1]);
  }
  // Everything the client sent, decoded as guest-bound messages.
  std::vector<ExecMsg> Sent() {
    std::vector<ExecMsg> types;
    ExecDecoder dec(/*from_guest=*/false);
    char buf[4096];
    while (true) {
      ssize_t r = recv(sv_[1], buf, sizeof buf, MSG_DONTWAIT);
      if (r <= 0) break;
      dec.Feed(std::string_view(buf, static_cast<size_t>(r)));
    }
    while (true) {
      auto m = dec.Next();
      if (!m.ok() || !m->has_value()) break;
      types.push_back((*m)->type);
    }
    return types;
  }
  int sv_[2] = {-1, -1};
};

ExecRequest Sleep() {
  ExecRequest r;
  r.argv = {"sleep", "1000"};
  return r;
}

TEST_F(SilentPeer, ForwardedSigtermEndsTheSessionAfterTheGrace) {
  ExecControl control;
  control.set_signal_grace(std::chrono::milliseconds(0));
  control.Signal(SIGTERM);
  auto res = RunExec(sv_[0], Sleep(), ExecIo{-1, -1, -1}, &control);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kCancelled);
  EXPECT_NE(res.error().message().find("signal 15"), std::string::npos);
  EXPECT_EQ(control.ended_by_signal(), SIGTERM);
  // The signal still went to the guest first.
  std::vector<ExecMsg> sent = Sent();
  EXPECT_NE(std::find(sent.begin(), sent.end(), ExecMsg::kSignal), sent.end());
}

TEST_F(SilentPeer, AbortEndsTheSessionAtOnce) {
  ExecControl control;
  control.Abort(SIGINT);
  auto res = RunExec(sv_[0], Sleep(), ExecIo{-1, -1, -1}, &control);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kCancelled);
  EXPECT_NE(res.error().message().find("signal 2"), std::string::npos);
}

// SIGINT is only forwarded (an interactive command may handle it): the session goes on until
// the peer answers; here the peer closes, which ends it as before.
TEST_F(SilentPeer, ForwardedSigintAloneDoesNotCloseTheSession) {
  ExecControl control;
  control.set_signal_grace(std::chrono::milliseconds(0));
  control.Signal(SIGINT);
  shutdown(sv_[1], SHUT_WR);
  auto res = RunExec(sv_[0], Sleep(), ExecIo{-1, -1, -1}, &control);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code(), ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace cloister::channel

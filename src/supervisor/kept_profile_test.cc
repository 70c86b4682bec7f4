// The kept profile's flush against a browser VM that does not answer (supervisor/kept_profile.h).
#include "supervisor/kept_profile.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "channel/mux.h"
#include "channel/exec_proto.h"
#include "supervisor/testing_mux.h"

namespace cloister::vm {
namespace {

// SECURITY: a guest that stalls the flush past its bound must not make the flush's thread call
// the caller's log afterwards (the caller, a BrowserVm being torn down, can be gone by then).
TEST(KeptProfileTest, ASlowGuestGetsNoLogLineOutOfTheFlushAfterItReturned) {
  auto [host, guest] = testing::MuxPair();
  ASSERT_TRUE(host && guest);
  // The guest takes the exec stream and says nothing until released.
  std::mutex held_mu;
  std::vector<int> held;
  guest->RegisterService(channel::kExecService, [&](int fd, const std::vector<std::string>&) {
    std::lock_guard<std::mutex> l(held_mu);
    held.push_back(fd);
  });
  ASSERT_TRUE(guest->Start().ok());
  ASSERT_TRUE(host->Start().ok());
  std::shared_ptr<channel::Mux> mux(std::move(host));

  struct Lines {
    std::mutex mu;
    std::vector<std::string> lines;
  };
  auto seen = std::make_shared<Lines>();
  FlushKeptProfile(
      mux,
      [seen](const std::string& line) {
        std::lock_guard<std::mutex> l(seen->mu);
        seen->lines.push_back(line);
      },
      std::chrono::seconds(1));
  size_t at_return;
  {
    std::lock_guard<std::mutex> l(seen->mu);
    at_return = seen->lines.size();
    ASSERT_EQ(at_return, 1u);
    EXPECT_NE(seen->lines[0].find("no answer in 1 s"), std::string::npos) << seen->lines[0];
  }
  // Release the guest: the flush's thread goes on (its exec fails, the DevTools streams are
  // refused, the fallback exec fails) and ends; none of that may reach the log now.
  {
    std::lock_guard<std::mutex> l(held_mu);
    for (int fd : held) close(fd);
    held.clear();
  }
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> l(held_mu);
    for (int fd : held) close(fd);  // the fallback's exec: released at once
    held.clear();
  }
  mux->Stop();
  guest->Stop();
  std::lock_guard<std::mutex> l(seen->mu);
  EXPECT_EQ(seen->lines.size(), at_return)
      << "the flush logged after returning: " << seen->lines.back();
}

}  // namespace
}  // namespace cloister::vm

// A small synchronous QMP client (QEMU Machine Protocol) over QEMU's unix socket.
//
// SECURITY: QEMU runs guest code; a compromised QEMU could send anything on this socket. Every reply
// is read with a bounded line length (kMaxQmpLine) and parsed without exceptions; malformed input is
// a kCorrupt error, never a crash. ParseQmpLine is the fuzzed entry point.
//
// Thread safety: one QmpClient may be shared; Execute serialises callers with a mutex.
#pragma once

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::vm {

inline constexpr size_t kMaxQmpLine = 1 << 20;
inline constexpr size_t kMaxQmpEvents = 256;

// One parsed QMP message.
struct QmpMessage {
  enum class Kind { kGreeting, kReturn, kError, kEvent } kind;
  nlohmann::json body;  // "return" value, "error" object, or the whole event
  std::string id;       // echoed "id" (string ids only), empty if none
  std::string event;    // event name for kEvent
};

// Parses one line from QEMU. Non-objects, unknown shapes and oversize lines are kCorrupt.
Result<QmpMessage> ParseQmpLine(const std::string& line);

class QmpClient {
 public:
  ~QmpClient();
  QmpClient(const QmpClient&) = delete;
  QmpClient& operator=(const QmpClient&) = delete;

  // Connects to the socket, retrying until `timeout` while it does not exist yet or refuses,
  // reads the greeting and negotiates capabilities.
  static Result<std::unique_ptr<QmpClient>> Connect(const std::string& socket_path,
                                                    std::chrono::milliseconds timeout);

  // Runs a command and returns its "return" value; a QMP "error" becomes kFailedPrecondition with
  // QEMU's description. If pass_fd >= 0 it is sent with the command as SCM_RIGHTS (for getfd).
  Result<nlohmann::json> Execute(const std::string& command,
                                 const nlohmann::json& arguments = nlohmann::json::object(),
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                 int pass_fd = -1);

  // Waits until an event named `name` arrives (or was already received and not yet taken).
  Result<nlohmann::json> WaitEvent(const std::string& name, std::chrono::milliseconds timeout);

  // Events received so far and not taken by WaitEvent (oldest dropped beyond kMaxQmpEvents).
  std::deque<QmpMessage> TakeEvents();

 private:
  explicit QmpClient(int fd) : fd_(fd) {}
  Result<QmpMessage> ReadMessage(std::chrono::steady_clock::time_point deadline);
  void StashEvent(QmpMessage msg);

  int fd_;
  std::mutex mu_;
  std::string buffer_;
  std::deque<QmpMessage> events_;
  uint64_t next_id_ = 1;
};

}  // namespace cloister::vm

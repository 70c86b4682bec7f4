// The CLI <-> supervisor control protocol: one JSON object per line over the workspace's
// run/supervisor.sock (mode 0600 in a 0700 directory, so only the workspace's owner connects).
//
// Requests: {"op":"status"} | {"op":"stop","force":B,"timeout_ms":N} | {"op":"suspend"} |
//           {"op":"reboot"} | {"op":"open-stream","service":S,"action":"exec|attach","args":[...]} |
//           {"op":"checkpoint"} (a live, crash-consistent checkpoint; the reply has its "id")
// Replies:  {"ok":true,...} or {"ok":false,"error":"...","hint":"..."}; the reply to open-stream
//           carries a connected stream fd (SCM_RIGHTS) bridged to the guest's service S (one of
//           the host-opened services of protocol/contract.h: exec, tcp, sshd; others refused).
// Lines are bounded (kMaxControlLine); malformed input is an error, never a crash.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::vm {

inline constexpr size_t kMaxControlLine = 64 * 1024;
inline constexpr char kCheckpointOp[] = "checkpoint";

// A connected unix stream socket with a line buffer.
class LineConn {
 public:
  explicit LineConn(int fd) : fd_(fd) {}
  ~LineConn();
  LineConn(const LineConn&) = delete;
  LineConn& operator=(const LineConn&) = delete;

  int fd() const { return fd_; }
  // Sends `doc` as one line, with `pass_fd` attached if >= 0.
  Status Send(const nlohmann::json& doc, int pass_fd = -1);
  // Reads one line (an object) before `deadline`. An fd received with it lands in *received_fd
  // (closed if received_fd is null). EOF before a full line is kUnavailable.
  Result<nlohmann::json> Read(std::chrono::steady_clock::time_point deadline,
                              int* received_fd = nullptr);

 private:
  int fd_;
  std::string buf_;
};

Result<int> ConnectUnix(const std::string& path);
// Binds and listens (0600), replacing a stale socket file. The caller must own the path (the
// supervisor holds the pid-file lock, so a live peer's socket is never replaced).
Result<int> ListenUnix(const std::string& path);

// Connects, sends `request`, returns the reply. {"ok":false} becomes an Error carrying the
// supervisor's message and hint.
Result<nlohmann::json> ControlRequest(const std::string& socket_path, const nlohmann::json& request,
                                      std::chrono::milliseconds timeout, int* received_fd = nullptr);

// doc[key] if it is a string, else "" (never throws).
std::string JsonString(const nlohmann::json& doc, const std::string& key);

// {"ok":false,"error":...,"hint":...,"code":...} for an Error, and back.
nlohmann::json ErrorReply(const Error& error);
Error ErrorFromReply(const nlohmann::json& reply);

}  // namespace cloister::vm

// The exec sub-protocol, spoken over one `exec` stream of the channel (host opens, guest serves).
//
// Messages: u8 type | u32 payload length (big-endian) | payload.
//   host -> guest: REQUEST(JSON, once, first), STDIN(data), STDIN_EOF, RESIZE(u16 rows, u16 cols),
//                  SIGNAL(u32 signo)
//   guest -> host: STDOUT(data), STDERR(data), EXIT(u8 kind, u32 value), ERROR(text)
// EXIT ends a session: kind 0 = exited with value, kind 1 = killed by signal value. ERROR means
// the command could not be started (unknown user, bad request); the stream then closes.
//
// SECURITY: on the host, STDOUT/STDERR/EXIT/ERROR come from the guest and are hostile:
// ExecDecoder is a bounded parser (length checked against a per-type limit before buffering),
// never crashes, and reports malformed input as an Error. Fuzzed by fuzz/exec_proto_fuzz.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "protocol/contract.h"

namespace cloister::channel {

using protocol::kExecService;  // the host-guest contract (protocol/contract.h)
inline constexpr size_t kExecMaxData = 64 * 1024;      // STDIN/STDOUT/STDERR payload
inline constexpr size_t kExecMaxRequest = 256 * 1024;  // REQUEST JSON
inline constexpr size_t kExecMaxText = 1024;           // ERROR text
inline constexpr size_t kExecMaxArgs = 4096;
inline constexpr size_t kExecMaxEnv = 4096;

enum class ExecMsg : uint8_t {
  kRequest = 1,
  kStdin = 2,
  kStdinEof = 3,
  kResize = 4,
  kSignal = 5,
  kStdout = 6,
  kStderr = 7,
  kExit = 8,
  kError = 9,
};

struct ExecRequest {
  std::vector<std::string> argv;              // empty: the user's login shell
  std::map<std::string, std::string> env;     // added on top of the guest's per-boot environment
  std::string cwd;                            // empty: the user's home
  std::string user = protocol::kGuestUser;                   // "dev" by default; "root" on request
  bool tty = false;                           // allocate a pty (stdout and stderr merge)
  uint16_t rows = 24;
  uint16_t cols = 80;
  std::string term = "xterm-256color";        // TERM inside a pty
};

struct ExecExit {
  bool signaled = false;
  int value = 0;  // exit code, or signal number
  // Shell convention: the code, or 128 + signal.
  int ShellCode() const { return signaled ? 128 + value : value; }
};

struct ExecMessage {
  ExecMsg type;
  std::string payload;
};

void EncodeExecMessage(ExecMsg type, std::string_view payload, std::string& out);
std::string EncodeExecRequest(const ExecRequest& request);
// Guest side (the request comes from the trusted host, still parsed with bounds).
Result<ExecRequest> ParseExecRequest(std::string_view payload);
std::string EncodeResize(uint16_t rows, uint16_t cols);
Result<std::pair<uint16_t, uint16_t>> ParseResize(std::string_view payload);
std::string EncodeSignal(int signo);
Result<int> ParseSignal(std::string_view payload);  // 1..64
std::string EncodeExit(const ExecExit& exit);
// SECURITY: exactly 5 bytes; kind 0 with value 0..255 or kind 1 with signal 1..64.
Result<ExecExit> ParseExit(std::string_view payload);

// Incremental decoder for either direction. `from_guest` selects which message types are legal.
class ExecDecoder {
 public:
  explicit ExecDecoder(bool from_guest) : from_guest_(from_guest) {}
  void Feed(std::string_view data);
  // Next complete message, std::nullopt when more bytes are needed, or an Error (sticky).
  Result<std::optional<ExecMessage>> Next();

 private:
  bool from_guest_;
  std::string buffer_;
  size_t offset_ = 0;
  std::optional<Error> failed_;
};

}  // namespace cloister::channel

// Wire format of the host-guest channel (one virtio-serial port, many streams).
//
// Every frame is a 9-byte header followed by a bounded payload:
//   u32 payload length (big-endian, <= kMaxPayload)
//   u32 stream id      (big-endian; 0 = the channel itself)
//   u8  frame type     (FrameType)
// Stream ids are chosen by the side that opens the stream: the host uses odd ids, the guest even
// ids, each strictly increasing, never reused within one channel session.
//
// SECURITY: on the host every byte of this format comes from the guest and is hostile.
// FrameDecoder and the Parse* functions below are bounded parsers: they never read past the
// input, never allocate more than kMaxPayload per frame, and answer malformed input with an
// Error (kCorrupt) instead of crashing. Fuzzed by fuzz/channel_frame_fuzz.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::channel {

inline constexpr uint32_t kProtocolMagic = 0x434c5354;  // "CLST"
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 9;
inline constexpr size_t kMaxPayload = 32 * 1024;
// Credit each side starts with for every stream, in bytes of DATA payload.
inline constexpr uint32_t kInitialWindow = 256 * 1024;
// Largest credit a peer may ever hold for one stream (WINDOW overflow is a violation).
inline constexpr uint32_t kMaxWindow = 16 * 1024 * 1024;
inline constexpr size_t kMaxServiceName = 64;
inline constexpr size_t kMaxOpenArgs = 32;
inline constexpr size_t kMaxOpenArgLen = 4096;
inline constexpr size_t kMaxReasonLen = 512;

enum class FrameType : uint8_t {
  kHello = 1,      // stream 0; payload: u32 magic, u32 version, u64 session id
  kOpen = 2,       // payload: OpenRequest (service name + bounded args)
  kOpenOk = 3,     // empty
  kOpenFail = 4,   // payload: reason text
  kData = 5,       // payload: 1..kMaxPayload bytes, counted against the receiver's window
  kWindow = 6,     // payload: u32 credit increment (> 0)
  kEof = 7,        // empty: sender will send no more DATA on this stream (half-close)
  kClose = 8,      // empty: sender forgets the stream once it has both sent and received CLOSE
  kReady = 9,      // stream 0, guest -> host: a real terminal works; payload: info text
  kGoAway = 10,    // stream 0: the sender is closing the channel; payload: reason text
};

const char* FrameTypeName(FrameType type);

struct Frame {
  FrameType type = FrameType::kData;
  uint32_t stream = 0;
  std::string payload;
};

struct OpenRequest {
  std::string service;             // [a-z0-9._-]{1,64}
  std::vector<std::string> args;   // at most kMaxOpenArgs, each at most kMaxOpenArgLen bytes
};

// Appends the encoded frame to `out`. The caller guarantees payload.size() <= kMaxPayload.
void EncodeFrame(FrameType type, uint32_t stream, std::string_view payload, std::string& out);

// Each host connection picks a random session id; the guest answers with the same id. A HELLO
// with a new id tells the guest the host side restarted (resume, supervisor restart).
inline constexpr size_t kHelloPayloadSize = 16;
inline constexpr size_t kHelloFrameSize = kHeaderSize + kHelloPayloadSize;
std::string EncodeHello(uint64_t session);
// SECURITY: validates magic and version of a peer's HELLO payload; returns its session id.
Result<uint64_t> ParseHello(std::string_view payload);

// Finds the first complete HELLO frame in `bytes` (used to resynchronise a byte pipe that may
// start with stale bytes of an earlier session). Returns its offset, or std::nullopt; `keep` is
// set to how many trailing bytes may still begin a HELLO and must be kept for the next search.
std::optional<size_t> FindHelloFrame(std::string_view bytes, size_t* keep);

Result<std::string> EncodeOpen(const OpenRequest& request);  // fails if limits are exceeded
// SECURITY: bounded parse of a peer's OPEN payload; rejects trailing bytes and bad names.
Result<OpenRequest> ParseOpen(std::string_view payload);

std::string EncodeWindow(uint32_t increment);
// SECURITY: exactly 4 bytes, increment in 1..kMaxWindow.
Result<uint32_t> ParseWindow(std::string_view payload);

// Reason/info texts are truncated to kMaxReasonLen and stripped of control characters when
// parsed, so they are safe to log on one line.
std::string SanitizeText(std::string_view text);

bool IsValidServiceName(std::string_view name);

// Incremental decoder: feed bytes as they arrive, then pull complete frames.
// After an error the decoder stays failed (the channel must be closed).
class FrameDecoder {
 public:
  // Appends bytes to the internal buffer (at most one partial frame plus `data` is held).
  void Feed(std::string_view data);
  // Returns the next complete frame, std::nullopt if more bytes are needed, or an Error for a
  // malformed header or a payload whose size is illegal for its type.
  Result<std::optional<Frame>> Next();
  size_t buffered() const { return buffer_.size() - offset_; }
  // Returns and drops the unconsumed bytes, and clears a failure (used to resynchronise).
  std::string TakeBuffered();

 private:
  std::string buffer_;
  size_t offset_ = 0;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace cloister::channel

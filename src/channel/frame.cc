#include "channel/frame.h"

#include <algorithm>
#include <cstring>

#include "channel/big_endian.h"

namespace cloister::channel {
namespace {

// Bounded reader over a payload. Every Get checks the remaining length first.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool GetU16(uint16_t& v) {
    if (data_.size() - pos_ < 2) return false;
    auto* p = reinterpret_cast<const unsigned char*>(data_.data() + pos_);
    v = static_cast<uint16_t>((p[0] << 8) | p[1]);
    pos_ += 2;
    return true;
  }
  bool GetBytes(size_t n, std::string& out) {
    if (data_.size() - pos_ < n) return false;
    out.assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

Error Corrupt(const std::string& what) { return Error(ErrorCode::kCorrupt, what); }

bool KnownType(uint8_t t) { return t >= 1 && t <= 10; }

}  // namespace

const char* FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kHello: return "HELLO";
    case FrameType::kOpen: return "OPEN";
    case FrameType::kOpenOk: return "OPEN_OK";
    case FrameType::kOpenFail: return "OPEN_FAIL";
    case FrameType::kData: return "DATA";
    case FrameType::kWindow: return "WINDOW";
    case FrameType::kEof: return "EOF";
    case FrameType::kClose: return "CLOSE";
    case FrameType::kReady: return "READY";
    case FrameType::kGoAway: return "GOAWAY";
  }
  return "UNKNOWN";
}

void EncodeFrame(FrameType type, uint32_t stream, std::string_view payload, std::string& out) {
  PutU32(static_cast<uint32_t>(payload.size()), out);
  PutU32(stream, out);
  out.push_back(static_cast<char>(type));
  out.append(payload);
}

std::string EncodeHello(uint64_t session) {
  std::string p;
  PutU32(kProtocolMagic, p);
  PutU32(kProtocolVersion, p);
  PutU32(static_cast<uint32_t>(session >> 32), p);
  PutU32(static_cast<uint32_t>(session), p);
  return p;
}

Result<uint64_t> ParseHello(std::string_view payload) {
  if (payload.size() != kHelloPayloadSize) return Corrupt("HELLO payload must be 16 bytes");
  auto* p = reinterpret_cast<const unsigned char*>(payload.data());
  if (GetU32(p) != kProtocolMagic) return Corrupt("HELLO has a bad magic number");
  uint32_t version = GetU32(p + 4);
  if (version != kProtocolVersion) {
    return Error(ErrorCode::kFailedPrecondition,
                 "peer speaks channel protocol version " + std::to_string(version) + ", we speak " +
                     std::to_string(kProtocolVersion),
                 "the guest agent comes from the metadata disk: restart the workspace");
  }
  return (uint64_t{GetU32(p + 8)} << 32) | GetU32(p + 12);
}

std::optional<size_t> FindHelloFrame(std::string_view bytes, size_t* keep) {
  // The fixed prefix of every HELLO frame: header (length 16, stream 0, type 1) + magic.
  std::string prefix;
  PutU32(kHelloPayloadSize, prefix);
  PutU32(0, prefix);
  prefix.push_back(static_cast<char>(FrameType::kHello));
  PutU32(kProtocolMagic, prefix);
  size_t pos = bytes.find(prefix);
  if (pos != std::string_view::npos && bytes.size() - pos >= kHelloFrameSize) {
    *keep = 0;
    return pos;
  }
  if (pos != std::string_view::npos) {
    *keep = bytes.size() - pos;  // an incomplete HELLO: keep it whole
  } else {
    *keep = std::min(bytes.size(), prefix.size() - 1);
  }
  return std::nullopt;
}

bool IsValidServiceName(std::string_view name) {
  if (name.empty() || name.size() > kMaxServiceName) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<std::string> EncodeOpen(const OpenRequest& request) {
  if (!IsValidServiceName(request.service)) {
    return Error(ErrorCode::kInvalidArgument, "invalid service name '" + request.service + "'");
  }
  if (request.args.size() > kMaxOpenArgs) {
    return Error(ErrorCode::kInvalidArgument, "too many OPEN arguments");
  }
  std::string p;
  PutU16(static_cast<uint16_t>(request.service.size()), p);
  p += request.service;
  PutU16(static_cast<uint16_t>(request.args.size()), p);
  for (const auto& a : request.args) {
    if (a.size() > kMaxOpenArgLen) return Error(ErrorCode::kInvalidArgument, "OPEN argument too long");
    PutU16(static_cast<uint16_t>(a.size()), p);
    p += a;
  }
  if (p.size() > kMaxPayload) return Error(ErrorCode::kInvalidArgument, "OPEN request too large");
  return p;
}

Result<OpenRequest> ParseOpen(std::string_view payload) {
  // SECURITY: peer-controlled lengths; every one is checked against the remaining bytes and
  // against the protocol limits before anything is copied.
  Reader r(payload);
  OpenRequest req;
  uint16_t len = 0;
  if (!r.GetU16(len) || len == 0 || len > kMaxServiceName || !r.GetBytes(len, req.service)) {
    return Corrupt("OPEN has a malformed service name");
  }
  if (!IsValidServiceName(req.service)) return Corrupt("OPEN names an invalid service");
  uint16_t argc = 0;
  if (!r.GetU16(argc) || argc > kMaxOpenArgs) return Corrupt("OPEN has a malformed argument count");
  req.args.reserve(argc);
  for (uint16_t i = 0; i < argc; ++i) {
    std::string arg;
    if (!r.GetU16(len) || len > kMaxOpenArgLen || !r.GetBytes(len, arg)) {
      return Corrupt("OPEN has a malformed argument");
    }
    req.args.push_back(std::move(arg));
  }
  if (!r.done()) return Corrupt("OPEN has trailing bytes");
  return req;
}

std::string EncodeWindow(uint32_t increment) {
  std::string p;
  PutU32(increment, p);
  return p;
}

Result<uint32_t> ParseWindow(std::string_view payload) {
  if (payload.size() != 4) return Corrupt("WINDOW payload must be 4 bytes");
  uint32_t inc = GetU32(reinterpret_cast<const unsigned char*>(payload.data()));
  if (inc == 0 || inc > kMaxWindow) return Corrupt("WINDOW increment out of range");
  return inc;
}

std::string SanitizeText(std::string_view text) {
  std::string out;
  size_t n = std::min(text.size(), kMaxReasonLen);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  return out;
}

void FrameDecoder::Feed(std::string_view data) {
  if (failed_) return;
  // Compact consumed bytes so the buffer holds at most one partial frame plus new input.
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(data);
}

std::string FrameDecoder::TakeBuffered() {
  std::string rest = buffer_.substr(offset_);
  buffer_.clear();
  offset_ = 0;
  failed_ = false;
  failure_.clear();
  return rest;
}

Result<std::optional<Frame>> FrameDecoder::Next() {
  // SECURITY: the header is validated (length bound, known type, stream id rules, per-type
  // payload size) before the payload is buffered or copied.
  if (failed_) return Corrupt(failure_);
  auto fail = [&](const std::string& why) -> Result<std::optional<Frame>> {
    failed_ = true;
    failure_ = why;
    return Corrupt(why);
  };
  size_t avail = buffer_.size() - offset_;
  if (avail < kHeaderSize) return std::optional<Frame>();
  auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
  uint32_t length = GetU32(p);
  uint32_t stream = GetU32(p + 4);
  uint8_t raw_type = p[8];
  if (length > kMaxPayload) {
    return fail("frame payload of " + std::to_string(length) + " bytes exceeds the limit of " +
                std::to_string(kMaxPayload));
  }
  if (!KnownType(raw_type)) return fail("unknown frame type " + std::to_string(raw_type));
  auto type = static_cast<FrameType>(raw_type);
  bool channel_level =
      type == FrameType::kHello || type == FrameType::kReady || type == FrameType::kGoAway;
  if (channel_level != (stream == 0)) {
    return fail(std::string(FrameTypeName(type)) + " frame on the wrong stream id " +
                std::to_string(stream));
  }
  switch (type) {
    case FrameType::kHello:
      if (length != kHelloPayloadSize) return fail("HELLO payload must be 16 bytes");
      break;
    case FrameType::kOpenOk:
    case FrameType::kEof:
    case FrameType::kClose:
      if (length != 0) return fail(std::string(FrameTypeName(type)) + " must have no payload");
      break;
    case FrameType::kWindow:
      if (length != 4) return fail("WINDOW payload must be 4 bytes");
      break;
    case FrameType::kData:
      if (length == 0) return fail("empty DATA frame");
      break;
    case FrameType::kOpenFail:
    case FrameType::kReady:
    case FrameType::kGoAway:
      if (length > kMaxReasonLen) return fail(std::string(FrameTypeName(type)) + " text too long");
      break;
    case FrameType::kOpen:
      break;
  }
  if (avail < kHeaderSize + length) return std::optional<Frame>();
  Frame f;
  f.type = type;
  f.stream = stream;
  f.payload.assign(buffer_.data() + offset_ + kHeaderSize, length);
  offset_ += kHeaderSize + length;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  return std::optional<Frame>(std::move(f));
}

}  // namespace cloister::channel

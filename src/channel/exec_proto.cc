#include "channel/exec_proto.h"

#include <nlohmann/json.hpp>

#include "channel/big_endian.h"

namespace cloister::channel {
namespace {

Error ExecCorrupt(const std::string& what) { return Error(ErrorCode::kCorrupt, "exec: " + what); }

bool ValidEnvName(const std::string& name) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name) {
    if (c == '=' || c == '\0') return false;
  }
  return true;
}

}  // namespace

void EncodeExecMessage(ExecMsg type, std::string_view payload, std::string& out) {
  out.push_back(static_cast<char>(type));
  PutU32(static_cast<uint32_t>(payload.size()), out);
  out.append(payload);
}

std::string EncodeExecRequest(const ExecRequest& r) {
  nlohmann::json j;
  j["argv"] = r.argv;
  j["env"] = r.env;
  j["cwd"] = r.cwd;
  j["user"] = r.user;
  j["tty"] = r.tty;
  j["rows"] = r.rows;
  j["cols"] = r.cols;
  j["term"] = r.term;
  return j.dump();
}

Result<ExecRequest> ParseExecRequest(std::string_view payload) {
  auto j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return ExecCorrupt("request is not a JSON object");
  ExecRequest r;
  auto str = [&](const char* key, std::string& out) -> Status {
    if (!j.contains(key)) return OkStatus();
    if (!j[key].is_string()) return ExecCorrupt(std::string(key) + " must be a string");
    out = j[key].get<std::string>();
    if (out.find('\0') != std::string::npos) return ExecCorrupt(std::string(key) + " has a NUL byte");
    return OkStatus();
  };
  RETURN_IF_ERROR(str("cwd", r.cwd));
  RETURN_IF_ERROR(str("user", r.user));
  RETURN_IF_ERROR(str("term", r.term));
  if (r.user.empty()) return ExecCorrupt("user is empty");
  if (j.contains("argv")) {
    const auto& a = j["argv"];
    if (!a.is_array() || a.size() > kExecMaxArgs) return ExecCorrupt("argv must be a bounded array");
    for (const auto& e : a) {
      if (!e.is_string()) return ExecCorrupt("argv entries must be strings");
      std::string s = e.get<std::string>();
      if (s.find('\0') != std::string::npos) return ExecCorrupt("argv entry has a NUL byte");
      r.argv.push_back(std::move(s));
    }
  }
  if (j.contains("env")) {
    const auto& e = j["env"];
    if (!e.is_object() || e.size() > kExecMaxEnv) return ExecCorrupt("env must be a bounded object");
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (!it.value().is_string() || !ValidEnvName(it.key())) return ExecCorrupt("bad env entry");
      std::string v = it.value().get<std::string>();
      if (v.find('\0') != std::string::npos) return ExecCorrupt("env value has a NUL byte");
      r.env[it.key()] = std::move(v);
    }
  }
  if (j.contains("tty")) {
    if (!j["tty"].is_boolean()) return ExecCorrupt("tty must be a boolean");
    r.tty = j["tty"].get<bool>();
  }
  for (auto [key, out] : {std::pair<const char*, uint16_t*>{"rows", &r.rows}, {"cols", &r.cols}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number_unsigned() || j[key].get<uint64_t>() > 0xffff) {
      return ExecCorrupt(std::string(key) + " must be 0..65535");
    }
    *out = static_cast<uint16_t>(j[key].get<uint64_t>());
  }
  return r;
}

std::string EncodeResize(uint16_t rows, uint16_t cols) {
  std::string p;
  p.push_back(static_cast<char>(rows >> 8));
  p.push_back(static_cast<char>(rows));
  p.push_back(static_cast<char>(cols >> 8));
  p.push_back(static_cast<char>(cols));
  return p;
}

Result<std::pair<uint16_t, uint16_t>> ParseResize(std::string_view p) {
  if (p.size() != 4) return ExecCorrupt("RESIZE payload must be 4 bytes");
  auto* b = reinterpret_cast<const unsigned char*>(p.data());
  return std::pair<uint16_t, uint16_t>(static_cast<uint16_t>((b[0] << 8) | b[1]),
                                       static_cast<uint16_t>((b[2] << 8) | b[3]));
}

std::string EncodeSignal(int signo) {
  std::string p;
  PutU32(static_cast<uint32_t>(signo), p);
  return p;
}

Result<int> ParseSignal(std::string_view p) {
  if (p.size() != 4) return ExecCorrupt("SIGNAL payload must be 4 bytes");
  uint32_t v = GetU32(reinterpret_cast<const unsigned char*>(p.data()));
  if (v < 1 || v > 64) return ExecCorrupt("SIGNAL number out of range");
  return static_cast<int>(v);
}

std::string EncodeExit(const ExecExit& e) {
  std::string p;
  p.push_back(e.signaled ? 1 : 0);
  PutU32(static_cast<uint32_t>(e.value), p);
  return p;
}

Result<ExecExit> ParseExit(std::string_view p) {
  // SECURITY: guest-controlled; the value is range-checked so it is a valid process exit code.
  if (p.size() != 5) return ExecCorrupt("EXIT payload must be 5 bytes");
  auto* b = reinterpret_cast<const unsigned char*>(p.data());
  uint32_t v = GetU32(b + 1);
  ExecExit e;
  if (b[0] == 0) {
    if (v > 255) return ExecCorrupt("EXIT code out of range");
  } else if (b[0] == 1) {
    if (v < 1 || v > 64) return ExecCorrupt("EXIT signal out of range");
    e.signaled = true;
  } else {
    return ExecCorrupt("EXIT has an unknown kind");
  }
  e.value = static_cast<int>(v);
  return e;
}

void ExecDecoder::Feed(std::string_view data) {
  if (failed_) return;
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(data);
}

Result<std::optional<ExecMessage>> ExecDecoder::Next() {
  // SECURITY: type and length are validated before the payload is buffered or copied.
  if (failed_) return *failed_;
  auto fail = [&](const std::string& why) -> Result<std::optional<ExecMessage>> {
    failed_ = ExecCorrupt(why);
    return *failed_;
  };
  size_t avail = buffer_.size() - offset_;
  if (avail < 5) return std::optional<ExecMessage>();
  auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
  uint8_t raw = p[0];
  uint32_t len = GetU32(p + 1);
  if (raw < 1 || raw > 9) return fail("unknown message type " + std::to_string(raw));
  auto type = static_cast<ExecMsg>(raw);
  bool guest_type = type == ExecMsg::kStdout || type == ExecMsg::kStderr ||
                    type == ExecMsg::kExit || type == ExecMsg::kError;
  if (guest_type != from_guest_) return fail("message type " + std::to_string(raw) + " in the wrong direction");
  size_t limit = 0;
  switch (type) {
    case ExecMsg::kRequest: limit = kExecMaxRequest; break;
    case ExecMsg::kStdin:
    case ExecMsg::kStdout:
    case ExecMsg::kStderr: limit = kExecMaxData; break;
    case ExecMsg::kStdinEof: limit = 0; break;
    case ExecMsg::kResize: limit = 4; break;
    case ExecMsg::kSignal: limit = 4; break;
    case ExecMsg::kExit: limit = 5; break;
    case ExecMsg::kError: limit = kExecMaxText; break;
  }
  if (len > limit) {
    return fail("message type " + std::to_string(raw) + " of " + std::to_string(len) +
                " bytes exceeds its limit of " + std::to_string(limit));
  }
  if (avail < 5 + len) return std::optional<ExecMessage>();
  ExecMessage m{type, std::string(buffer_.data() + offset_ + 5, len)};
  offset_ += 5 + len;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  return std::optional<ExecMessage>(std::move(m));
}

}  // namespace cloister::channel

#include "sshagent/wire.h"

namespace cloister::sshagent {

Result<uint8_t> SshReader::Byte() {
  if (remaining() < 1) return Error(ErrorCode::kCorrupt, "truncated message (byte)");
  return static_cast<uint8_t>(data_[pos_++]);
}

Result<uint32_t> SshReader::Uint32() {
  if (remaining() < 4) return Error(ErrorCode::kCorrupt, "truncated message (uint32)");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(data_[pos_ + i]);
  pos_ += 4;
  return v;
}

Result<bool> SshReader::Bool() {
  ASSIGN_OR_RETURN(uint8_t b, Byte());
  return b != 0;
}

Result<std::string_view> SshReader::String(size_t max) {
  ASSIGN_OR_RETURN(uint32_t len, Uint32());
  if (len > max) {
    return Error(ErrorCode::kCorrupt,
                 "string of " + std::to_string(len) + " bytes exceeds limit " + std::to_string(max));
  }
  return Raw(len);
}

Result<std::string_view> SshReader::Raw(size_t n) {
  if (remaining() < n) return Error(ErrorCode::kCorrupt, "truncated message (string)");
  std::string_view v = data_.substr(pos_, n);
  pos_ += n;
  return v;
}

Status SshReader::ExpectEnd(std::string_view what) const {
  if (!empty()) {
    return Error(ErrorCode::kCorrupt,
                 std::string(what) + ": " + std::to_string(remaining()) + " trailing bytes");
  }
  return OkStatus();
}

SshWriter& SshWriter::Byte(uint8_t b) {
  out_.push_back(static_cast<char>(b));
  return *this;
}

SshWriter& SshWriter::Uint32(uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out_.push_back(static_cast<char>((v >> shift) & 0xff));
  return *this;
}

SshWriter& SshWriter::String(std::string_view s) {
  Uint32(static_cast<uint32_t>(s.size()));
  out_.append(s);
  return *this;
}

SshWriter& SshWriter::Raw(std::string_view s) {
  out_.append(s);
  return *this;
}

}  // namespace cloister::sshagent

// OpenSSH wire encoding (RFC 4251 section 5): uint32, byte, string. Bounded reader for hostile input.
//
// SECURITY: SshReader is used on bytes that come from the guest. Every read checks the remaining
// length first and fails with kCorrupt; nothing reads past the view it was given, and no length
// field is trusted before it has been compared with what is actually there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::sshagent {

// Reads from a view it does not own (the caller keeps the bytes alive).
class SshReader {
 public:
  explicit SshReader(std::string_view data) : data_(data) {}

  Result<uint8_t> Byte();
  Result<uint32_t> Uint32();
  Result<bool> Bool();
  // A uint32 length then that many bytes. `max` bounds the length before anything is read.
  Result<std::string_view> String(size_t max = 1 << 20);
  // Exactly n raw bytes.
  Result<std::string_view> Raw(size_t n);

  size_t remaining() const { return data_.size() - pos_; }
  bool empty() const { return remaining() == 0; }
  // Error if bytes are left over (messages must be consumed exactly).
  Status ExpectEnd(std::string_view what) const;

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

class SshWriter {
 public:
  SshWriter& Byte(uint8_t b);
  SshWriter& Uint32(uint32_t v);
  SshWriter& String(std::string_view s);
  SshWriter& Raw(std::string_view s);

  const std::string& data() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace cloister::sshagent

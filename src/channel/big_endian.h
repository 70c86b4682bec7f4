// Big-endian integers in the channel's wire formats (frame.cc, exec_proto.cc): internal to the
// channel library.
#pragma once

#include <cstdint>
#include <string>

namespace cloister::channel {

inline void PutU32(uint32_t v, std::string& out) {
  char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
               static_cast<char>(v)};
  out.append(b, 4);
}

inline void PutU16(uint16_t v, std::string& out) {
  char b[2] = {static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b, 2);
}

// `p` must hold at least 4 bytes (callers check the length first).
inline uint32_t GetU32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace cloister::channel

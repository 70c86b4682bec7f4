#include "audit/crc.h"

#include <array>

namespace cloister::audit {
namespace {

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xA001u : c >> 1;
    t[i] = static_cast<uint16_t>(c);
  }
  return t;
}

constexpr auto kCrc32cTable = MakeCrc32cTable();
constexpr auto kCrc16Table = MakeCrc16Table();

}  // namespace

uint32_t Crc32cUpdate(uint32_t crc, const uint8_t* data, size_t len) {
  for (size_t i = 0; i < len; ++i) crc = kCrc32cTable[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

uint16_t Crc16Update(uint16_t crc, const uint8_t* data, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    crc = static_cast<uint16_t>((crc >> 8) ^ kCrc16Table[(crc ^ data[i]) & 0xff]);
  }
  return crc;
}

}  // namespace cloister::audit

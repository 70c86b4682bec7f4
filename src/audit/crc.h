// The two checksums ext4 uses on its metadata, exactly as the kernel computes them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cloister::audit {

// Linux crc32c(seed, data, len): the reflected Castagnoli CRC register update with no pre- or
// post-inversion (ext4 passes ~0 as the first seed).
uint32_t Crc32cUpdate(uint32_t crc, const uint8_t* data, size_t len);

// Linux crc16(seed, data, len): the reflected 0x8005 CRC used by ext4's uninit_bg (gdt_csum).
uint16_t Crc16Update(uint16_t crc, const uint8_t* data, size_t len);

}  // namespace cloister::audit

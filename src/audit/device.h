// Random access to the disk the audit inspects: a guest block device, an image file in tests, or
// bytes in memory (fuzzing). The audit owns the Device for the duration of one disk's audit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"

namespace cloister::audit {

class Device {
 public:
  virtual ~Device() = default;
  // Size in bytes; reads and writes past it fail.
  virtual uint64_t size() const = 0;
  // Reads exactly `len` bytes at `offset` or fails (short reads are errors).
  virtual Status ReadAt(uint64_t offset, uint8_t* buf, size_t len) = 0;
  // Writes exactly `len` bytes at `offset`. Offset and length must be multiples of 4096.
  virtual Status WriteAt(uint64_t offset, const uint8_t* buf, size_t len) = 0;
  // Makes earlier writes durable on the device (fdatasync).
  virtual Status Sync() = 0;
  // Gives the range back to the layer below (block device: BLKDISCARD; image file: a punched
  // hole), so a thin or copy-on-write layer can free what a write made it allocate. Offset and
  // length must be multiples of 4096. Success means only that the request was accepted: a layer
  // may ignore it (QEMU's discard=ignore), so callers that rely on it read the range back.
  // The audit calls it only on ranges the filesystem's bitmaps mark entirely free.
  virtual Status Discard(uint64_t offset, uint64_t len) = 0;
};

struct OpenOptions {
  bool writable = false;
  // For block devices: open with O_EXCL so a concurrent mount is impossible. Fails with kBusy
  // when the device is mounted (the caller then freezes the mounted filesystem instead).
  bool exclusive = false;
};

// Opens a block device (with O_DIRECT, so reads see the device, not a page cache) or a regular
// image file.
Result<std::unique_ptr<Device>> OpenDevice(const std::string& path, const OpenOptions& options);

// A device backed by `bytes` (writes change the copy). For tests and fuzzing.
std::unique_ptr<Device> MemoryDevice(std::string bytes);

// True if `path` is a block device.
bool IsBlockDevice(const std::string& path);

}  // namespace cloister::audit

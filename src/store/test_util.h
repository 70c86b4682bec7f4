// Helpers shared by the store's tests: temp dirs, small base images, guest-view reads of disks
// through qemu-io / qemu-img (what a VM would see), and a whole-store consistency checker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace cloister::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// A raw base image of `size` bytes: sparse, with 64 KiB of byte `fill` at every MiB boundary
// in the first 8 MiB, so clones can be compared with it.
void MakeBaseImage(const std::string& path, uint64_t size, char fill = 'B');

// Writes `len` bytes of `pattern` at `offset` the way a guest would (qemu-io on the image).
void GuestWrite(const std::string& path, layout::DiskFormat format, uint64_t offset, uint64_t len,
                int pattern);
// Writes the bytes of `data` at `offset` (qemu-io write -s).
void GuestWriteBytes(const std::string& path, layout::DiskFormat format, uint64_t offset,
                     const std::string& data);
// True if the guest reads `pattern` in all of [offset, offset+len).
bool GuestReads(const std::string& path, layout::DiskFormat format, uint64_t offset, uint64_t len,
                int pattern);
// `qemu-img compare`: true if both read identically as a guest sees them.
bool SameGuestView(const std::string& a, layout::DiskFormat fa, const std::string& b,
                   layout::DiskFormat fb);
// The backing file name recorded in a qcow2 image ("" for none / raw).
std::string BackingOf(const std::string& path);

// Every workspace consistent: config parses; every layer exists with the backing the config says;
// checkpoints name existing layers; the MAC is reserved to the workspace's id. With `no_garbage`,
// also: no unreferenced disk file or checkpoint dir, empty staging/ and trash/, and the MAC
// registry holds exactly the workspaces' ids. Returns a description of the first problem, or "".
std::string CheckStore(const std::string& root, bool no_garbage);

// A fake clock tests move by hand.
struct FakeClock {
  int64_t now = 1796000000;  // 2026-11-29
  std::function<int64_t()> fn() { return [this] { return now; }; }
};

int64_t CountRegularFiles(const std::string& dir);

}  // namespace cloister::testing

// PVH direct boot: the uncompressed kernel (vmlinux) that QEMU enters at its PVH entry point,
// skipping SeaBIOS's real-mode loader and the bzImage's own decompressor. Under TCG that cut about
// 7 s of the "firmware" phase (docs/design.md "Boot phases"); under KVM it is a few hundred ms.
//
// The vmlinux is derived from the image's own bzImage (its setup header names the compressed
// payload; Debian's kernels compress it with xz, decoded by liblzma) and cached by the bzImage's
// SHA-256 under `<store>/cache/pvh/`. A kernel without a PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY)
// is booted as a bzImage, as before.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::vm {

inline constexpr size_t kMaxBzImageBytes = 64u << 20;   // input bound
inline constexpr size_t kMaxVmlinuxBytes = 256u << 20;  // output bound

// The vmlinux ELF inside `bzimage`. Errors: kInvalidArgument (not a bzImage, boot protocol older
// than 2.08, payload out of bounds), kUnavailable (a compression other than xz, or an ELF without
// a PVH entry note), kCorrupt (the payload does not decode or exceeds kMaxVmlinuxBytes).
Result<std::string> ExtractPvhKernel(std::string_view bzimage);

// True if `elf` is a 64-bit x86 ELF carrying a Xen PHYS32_ENTRY note (what QEMU's PVH loader needs).
bool HasPvhEntry(std::string_view elf);

// The cached vmlinux for the bzImage at `bzimage_path`, derived on first use into
// `cache_dir`/<sha256>.vmlinux (written atomically, 0644). kUnavailable when the kernel cannot be
// booted through PVH (the caller boots the bzImage).
Result<std::string> EnsurePvhKernel(const std::string& bzimage_path, const std::string& cache_dir);

}  // namespace cloister::vm

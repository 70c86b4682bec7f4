#include "vm/pvh_kernel.h"

#include <fcntl.h>
#include <lzma.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>

#include "base/file_util.h"

namespace cloister::vm {

namespace {

uint32_t Le32(std::string_view b, size_t off) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[off + i]);
  return v;
}
uint64_t Le64(std::string_view b, size_t off) {
  return static_cast<uint64_t>(Le32(b, off)) | (static_cast<uint64_t>(Le32(b, off + 4)) << 32);
}
uint16_t Le16(std::string_view b, size_t off) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[off]) | (static_cast<uint8_t>(b[off + 1]) << 8));
}

constexpr uint32_t kXenElfNotePhys32Entry = 18;

Result<std::string> DecodeXz(std::string_view in) {
  lzma_stream s = LZMA_STREAM_INIT;
  // One stream only: the bzImage appends the uncompressed size after it, which is not xz.
  if (lzma_stream_decoder(&s, UINT64_MAX, 0) != LZMA_OK) {
    return Error(ErrorCode::kInternal, "liblzma: cannot start a decoder");
  }
  std::string out;
  out.resize(64u << 20);
  s.next_in = reinterpret_cast<const uint8_t*>(in.data());
  s.avail_in = in.size();
  size_t produced = 0;
  lzma_ret r = LZMA_OK;
  while (true) {
    if (produced == out.size()) {
      if (out.size() >= kMaxVmlinuxBytes) {
        lzma_end(&s);
        return Error(ErrorCode::kCorrupt, "the kernel decompresses to more than " +
                                               std::to_string(kMaxVmlinuxBytes >> 20) + " MiB");
      }
      out.resize(std::min(out.size() * 2, kMaxVmlinuxBytes));
    }
    s.next_out = reinterpret_cast<uint8_t*>(out.data()) + produced;
    s.avail_out = out.size() - produced;
    r = lzma_code(&s, LZMA_FINISH);
    produced = out.size() - s.avail_out;
    if (r == LZMA_STREAM_END) break;
    if (r != LZMA_OK) {
      lzma_end(&s);
      return Error(ErrorCode::kCorrupt, "the kernel's xz payload does not decode (liblzma " +
                                             std::to_string(static_cast<int>(r)) + ")");
    }
    if (s.avail_in == 0 && s.avail_out != 0) {
      lzma_end(&s);
      return Error(ErrorCode::kCorrupt, "the kernel's xz payload is truncated");
    }
  }
  lzma_end(&s);
  out.resize(produced);
  return out;
}

}  // namespace

namespace {

// Reads `n` bytes at `off` of an ELF of `size` bytes into *out; false if it cannot.
using ElfReader = std::function<bool(uint64_t off, size_t n, std::string* out)>;

// The ELF walk behind HasPvhEntry and HasPvhEntryFile: the header, the program headers, and only
// the PT_NOTE segments (at most 1 MiB each), so a file is checked without reading all of it.
bool PvhNoteIn(uint64_t size, const ElfReader& read) {
  // SECURITY: bounded walk of the ELF64 program headers and their notes; every offset is checked
  // against the size before it is read.
  std::string h;
  if (size < 64 || !read(0, 64, &h) || h.substr(0, 4) != "\x7f" "ELF" || h[4] != 2 /* ELFCLASS64 */ ||
      h[5] != 1 /* little endian */ || Le16(h, 18) != 62 /* EM_X86_64 */) {
    return false;
  }
  uint64_t phoff = Le64(h, 32);
  uint16_t phentsize = Le16(h, 54), phnum = Le16(h, 56);
  if (phentsize < 56 || phoff > size || phnum > (size - phoff) / phentsize) return false;
  std::string phdrs;
  if (!read(phoff, static_cast<size_t>(phnum) * phentsize, &phdrs)) return false;
  for (uint16_t i = 0; i < phnum; ++i) {
    size_t ph = static_cast<size_t>(i) * phentsize;
    if (Le32(phdrs, ph) != 4 /* PT_NOTE */) continue;
    uint64_t off = Le64(phdrs, ph + 8), len = Le64(phdrs, ph + 32);
    if (off > size || len > size - off || len > (1u << 20)) continue;
    std::string notes;
    if (!read(off, static_cast<size_t>(len), &notes)) continue;
    size_t p = 0;
    while (notes.size() - p >= 12) {
      uint32_t namesz = Le32(notes, p), descsz = Le32(notes, p + 4), type = Le32(notes, p + 8);
      size_t name_pad = (static_cast<size_t>(namesz) + 3) & ~size_t{3};
      size_t desc_pad = (static_cast<size_t>(descsz) + 3) & ~size_t{3};
      if (name_pad > notes.size() - p - 12 || desc_pad > notes.size() - p - 12 - name_pad) break;
      std::string_view name = std::string_view(notes).substr(p + 12, namesz);
      if (type == kXenElfNotePhys32Entry && (name == std::string_view("Xen\0", 4) || name == "Xen")) {
        return true;
      }
      p += 12 + name_pad + desc_pad;
    }
  }
  return false;
}

// HasPvhEntry for a file, reading only what the walk needs (pread).
bool HasPvhEntryFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            PvhNoteIn(static_cast<uint64_t>(st.st_size), [fd](uint64_t off, size_t n, std::string* out) {
              out->assign(n, '\0');
              size_t got = 0;
              while (got < n) {
                ssize_t r = pread(fd, out->data() + got, n - got, static_cast<off_t>(off + got));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) return false;
                got += static_cast<size_t>(r);
              }
              return true;
            });
  close(fd);
  return ok;
}

}  // namespace

bool HasPvhEntry(std::string_view elf) {
  return PvhNoteIn(elf.size(), [elf](uint64_t off, size_t n, std::string* out) {
    if (off > elf.size() || n > elf.size() - off) return false;
    out->assign(elf.substr(off, n));
    return true;
  });
}

Result<std::string> ExtractPvhKernel(std::string_view b) {
  // SECURITY: the bzImage is an image artifact, parsed with bounds all the same (fuzzed:
  // fuzz/pvh_kernel_fuzz.cc).
  if (b.size() > kMaxBzImageBytes) return Error(ErrorCode::kInvalidArgument, "kernel file too large");
  if (b.size() < 0x250 || b.substr(0x202, 4) != "HdrS") {
    return Error(ErrorCode::kInvalidArgument, "not a bzImage (no HdrS setup header)");
  }
  if (Le16(b, 0x206) < 0x208) {
    return Error(ErrorCode::kInvalidArgument, "bzImage boot protocol older than 2.08 (no payload fields)");
  }
  size_t setup_sects = static_cast<uint8_t>(b[0x1f1]);
  if (setup_sects == 0) setup_sects = 4;
  size_t pm_start = (setup_sects + 1) * 512;
  uint64_t payload_off = static_cast<uint64_t>(pm_start) + Le32(b, 0x248);
  uint64_t payload_len = Le32(b, 0x24c);
  if (payload_off > b.size() || payload_len > b.size() - payload_off || payload_len < 16) {
    return Error(ErrorCode::kInvalidArgument, "bzImage payload lies outside the file");
  }
  std::string_view payload = b.substr(payload_off, payload_len);
  if (payload.substr(0, 6) != std::string_view("\xfd" "7zXZ\0", 6)) {
    return Error(ErrorCode::kUnavailable, "the kernel payload is not xz-compressed");
  }
  ASSIGN_OR_RETURN(std::string elf, DecodeXz(payload));
  if (!HasPvhEntry(elf)) return Error(ErrorCode::kUnavailable, "the kernel has no PVH entry note");
  return elf;
}

Result<std::string> EnsurePvhKernel(const std::string& bzimage_path, const std::string& cache_dir) {
  ASSIGN_OR_RETURN(std::string bz, ReadFileBounded(bzimage_path, kMaxBzImageBytes));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_Digest(bz.data(), bz.size(), md, &md_len, EVP_sha256(), nullptr) != 1) {
    return Error(ErrorCode::kInternal, "sha256 of " + bzimage_path + " failed");
  }
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < md_len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  std::string path = cache_dir + "/" + hex + ".vmlinux";
  // A cached file that is not a PVH ELF (truncated by hand, another file) is derived again; the
  // check reads its headers and notes only, not the whole kernel.
  if (HasPvhEntryFile(path)) return path;
  ASSIGN_OR_RETURN(std::string elf, ExtractPvhKernel(bz));
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) return Error(ErrorCode::kIo, "create " + cache_dir + ": " + ec.message());
  RETURN_IF_ERROR(WriteFileAtomic(path, elf, 0644));
  return path;
}

}  // namespace cloister::vm

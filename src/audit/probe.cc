#include "audit/probe.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "audit/ext4.h"

namespace cloister::audit {
namespace {

constexpr char kProbeMagic[] = "CLOISTER-AUDIT-PROBE-1\n";  // 23 bytes + NUL, padded to 32
constexpr size_t kRunIdOffset = 32;
constexpr size_t kOffsetField = 48;
constexpr size_t kFillOffset = 56;

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

size_t CountZeros(const uint8_t* p, size_t n) {
  size_t z = 0;
  for (size_t i = 0; i < n; ++i) z += p[i] == 0;
  return z;
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

class RawBaseImage : public BaseImage {
 public:
  explicit RawBaseImage(std::unique_ptr<Device> dev) : dev_(std::move(dev)) {}
  Result<std::array<uint8_t, 32>> BlockSha256(uint64_t offset) override {
    uint8_t block[kProbeSize] = {};
    uint64_t size = dev_->size();
    if (offset < size) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kProbeSize, size - offset));
      RETURN_IF_ERROR(dev_->ReadAt(offset, block, n));
    }
    return Sha256(block, kProbeSize);
  }

 private:
  std::unique_ptr<Device> dev_;
};

void CountZeroForeign(ByteCounts& c, const uint8_t* block) {
  size_t z = CountZeros(block, kProbeSize);
  c.zero += z;
  c.foreign += kProbeSize - z;
}

}  // namespace

std::array<uint8_t, 32> Sha256(const uint8_t* data, size_t len) {
  std::array<uint8_t, 32> out{};
  SHA256(data, len, out.data());
  return out;
}

Result<RunId> NewRunId() {
  RunId id{};
  size_t got = 0;
  while (got < id.size()) {
    ssize_t n = getrandom(id.data() + got, id.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("getrandom", errno);
    got += static_cast<size_t>(n);
  }
  return id;
}

std::string ProbeBlock(const RunId& run, uint64_t offset) {
  std::string block(kProbeSize, '\0');
  auto* p = reinterpret_cast<uint8_t*>(block.data());
  std::memcpy(p, kProbeMagic, sizeof(kProbeMagic) - 1);
  std::memcpy(p + kRunIdOffset, run.data(), run.size());
  PutLe64(p + kOffsetField, offset);
  uint64_t state = offset;
  for (size_t i = 0; i < run.size(); ++i) state = state * 131 + run[i] + (state >> 57);
  for (size_t i = kFillOffset; i + 8 <= kProbeSize; i += 8) PutLe64(p + i, SplitMix(state));
  return block;
}

std::optional<RunId> MatchProbe(const uint8_t* block, uint64_t offset) {
  if (std::memcmp(block, kProbeMagic, sizeof(kProbeMagic) - 1) != 0) return std::nullopt;
  RunId run;
  std::memcpy(run.data(), block + kRunIdOffset, run.size());
  std::string want = ProbeBlock(run, offset);
  if (std::memcmp(block, want.data(), kProbeSize) != 0) return std::nullopt;
  return run;
}

const char* DiskKindName(DiskKind kind) { return kind == DiskKind::kBase ? "base" : "home"; }

Result<DiskKind> ParseDiskKind(const std::string& name) {
  if (name == "base") return DiskKind::kBase;
  if (name == "home") return DiskKind::kHome;
  return Error(ErrorCode::kInvalidArgument, "unknown disk kind '" + name + "'",
               "use base (system disk cloned from a base image) or home");
}

Result<std::unique_ptr<BaseImage>> OpenRawBaseImage(const std::string& path) {
  ASSIGN_OR_RETURN(auto dev, OpenDevice(path, OpenOptions{}));
  return std::unique_ptr<BaseImage>(new RawBaseImage(std::move(dev)));
}

Result<DiskReport> AuditDevice(Device& device, const AuditOptions& options) {
  DiskReport report;
  report.kind = options.kind;
  report.device_bytes = device.size();
  ASSIGN_OR_RETURN(Ext4Map map, ReadExt4Map(device));
  report.block_size = map.block_size();
  report.fs_blocks = map.blocks_count();
  report.free_blocks = map.free_blocks();

  const uint64_t fs_bytes = std::min(device.size(), map.blocks_count() * map.block_size());
  const uint64_t region_count = fs_bytes / kRegionSize;
  for (uint64_t r = 0; r < region_count; ++r) {
    if (map.RangeFree(r * kRegionSize, kRegionSize)) ++report.free_regions;
  }
  const uint64_t want =
      options.max_regions == 0 ? report.free_regions : std::min(options.max_regions, report.free_regions);

  std::vector<uint8_t> region(kRegionSize);
  uint8_t saved[kProbeSize];
  uint64_t free_index = 0;  // index among free regions
  uint64_t next_pick = 0;   // k-th pick is free region floor(k * free / want)
  for (uint64_t r = 0; r < region_count && report.probed_regions < want; ++r) {
    const uint64_t off = r * kRegionSize;
    if (!map.RangeFree(off, kRegionSize)) continue;
    uint64_t target = want == report.free_regions ? next_pick : next_pick * report.free_regions / want;
    if (free_index++ != target) continue;
    ++next_pick;

    // The invariant the whole audit rests on: we only ever write blocks the bitmap says are free.
    if (!map.RangeFree(off, kProbeSize)) {
      return Error(ErrorCode::kInternal, "refusing to write in-use block at " + std::to_string(off));
    }
    RETURN_IF_ERROR(device.ReadAt(off, saved, kProbeSize));
    const std::string probe = ProbeBlock(options.run_id, off);
    RETURN_IF_ERROR(device.WriteAt(off, reinterpret_cast<const uint8_t*>(probe.data()), kProbeSize));
    ++report.probe_writes;
    RETURN_IF_ERROR(device.ReadAt(off, region.data(), kRegionSize));
    // Put back what the free block held before (the filesystem owns none of it).
    if (!map.RangeFree(off, kProbeSize)) {
      return Error(ErrorCode::kInternal, "refusing to write in-use block at " + std::to_string(off));
    }
    RETURN_IF_ERROR(device.WriteAt(off, saved, kProbeSize));
    ++report.probe_writes;
    ++report.probed_regions;

    ByteCounts& c = report.bytes;
    const uint64_t foreign_before = c.foreign;
    // Block 0: this run's probe.
    {
      const uint8_t* got = region.data();
      const auto* exp = reinterpret_cast<const uint8_t*>(probe.data());
      if (std::memcmp(got, exp, kProbeSize) == 0) {
        c.probe += kProbeSize;
      } else {
        ++report.probe_mismatch_blocks;
        for (size_t i = 0; i < kProbeSize; ++i) {
          if (got[i] == exp[i]) ++c.probe;
          else if (got[i] == 0) ++c.zero;
          else ++c.foreign;
        }
      }
    }
    for (uint64_t b = 1; b < kBlocksPerRegion; ++b) {
      const uint8_t* blk = region.data() + b * kProbeSize;
      const uint64_t boff = off + b * kProbeSize;
      if (AllZero(blk, kProbeSize)) {
        c.zero += kProbeSize;
        continue;
      }
      auto earlier = MatchProbe(blk, boff);
      if (earlier && *earlier != options.run_id) {
        c.earlier_probe += kProbeSize;
        continue;
      }
      if (options.kind == DiskKind::kHome) {
        CountZeroForeign(c, blk);
        continue;
      }
      auto digest = Sha256(blk, kProbeSize);
      if (options.base != nullptr) {
        ASSIGN_OR_RETURN(auto base_digest, options.base->BlockSha256(boff));
        if (base_digest == digest) c.base_image += kProbeSize;
        else CountZeroForeign(c, blk);
      } else if (report.unresolved.size() < options.max_unresolved) {
        report.unresolved.push_back(
            UnresolvedBlock{boff, digest, static_cast<uint32_t>(CountZeros(blk, kProbeSize))});
        c.unresolved += kProbeSize;
      } else {
        report.unresolved_overflow = true;
        CountZeroForeign(c, blk);
      }
    }
    if (c.foreign != foreign_before && report.foreign_regions.size() < options.max_listed_regions) {
      report.foreign_regions.push_back(off);
    }
  }
  RETURN_IF_ERROR(device.Sync());
  ASSIGN_OR_RETURN(Ext4Map after, ReadExt4Map(device));
  report.allocation_unchanged = after.SameAllocation(map);
  return report;
}

Status ResolveWithBase(DiskReport& report, BaseImage& base) {
  for (const UnresolvedBlock& u : report.unresolved) {
    ASSIGN_OR_RETURN(auto digest, base.BlockSha256(u.offset));
    report.bytes.unresolved -= std::min<uint64_t>(report.bytes.unresolved, kProbeSize);
    if (digest == u.sha256) {
      report.bytes.base_image += kProbeSize;
    } else {
      uint32_t z = std::min<uint32_t>(u.zero_bytes, kProbeSize);
      report.bytes.zero += z;
      report.bytes.foreign += kProbeSize - z;
      uint64_t region = u.offset - u.offset % kRegionSize;
      if (std::find(report.foreign_regions.begin(), report.foreign_regions.end(), region) ==
              report.foreign_regions.end() &&
          report.foreign_regions.size() < 32) {
        report.foreign_regions.push_back(region);
      }
    }
  }
  report.unresolved.clear();
  return OkStatus();
}

}  // namespace cloister::audit

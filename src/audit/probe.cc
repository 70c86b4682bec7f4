#include "audit/probe.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
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

namespace {

// Picks which free regions to probe; see probe.h. `pick[r]` is true for a probed region index.
struct SamplePlan {
  std::vector<bool> pick;
  uint64_t windows = 0;
  uint64_t sampled_windows = 0;
  uint64_t sampled_window_free = 0;
  uint64_t count = 0;
};

SamplePlan PlanSample(const std::vector<bool>& free, const AuditOptions& options) {
  constexpr uint64_t kPerWindow = kSampleWindowBytes / kRegionSize;
  const uint64_t regions = free.size();
  SamplePlan plan;
  // Free regions per window.
  std::vector<uint64_t> window_free((regions + kPerWindow - 1) / kPerWindow, 0);
  for (uint64_t r = 0; r < regions; ++r) window_free[r / kPerWindow] += free[r];
  std::vector<uint64_t> candidates;
  for (uint64_t w = 0; w < window_free.size(); ++w) {
    if (window_free[w] > 0) candidates.push_back(w);
  }
  plan.windows = candidates.size();
  if (options.exhaustive) {
    plan.pick = free;
    plan.sampled_windows = plan.windows;
    for (uint64_t w : candidates) plan.sampled_window_free += window_free[w];
    plan.count = plan.sampled_window_free;
    return plan;
  }
  uint64_t state = 0;
  for (uint8_t b : options.run_id) state = state * 257 + b;
  auto below = [&state](uint64_t n) { return n == 0 ? 0 : SplitMix(state) % n; };
  // Windows: all of them, or one at random from each of `sample_windows` equal runs of the
  // candidates (so the sampled windows spread over the whole device).
  std::vector<uint64_t> chosen;
  const uint64_t want_windows = std::max<uint64_t>(1, options.sample_windows);
  if (candidates.size() <= want_windows) {
    chosen = candidates;
  } else {
    for (uint64_t k = 0; k < want_windows; ++k) {
      uint64_t lo = k * candidates.size() / want_windows;
      uint64_t hi = (k + 1) * candidates.size() / want_windows;
      chosen.push_back(candidates[lo + below(hi - lo)]);
    }
  }
  plan.sampled_windows = chosen.size();
  plan.pick.assign(regions, false);
  std::vector<uint64_t> pool;  // free region indices inside the chosen windows, in device order
  for (uint64_t w : chosen) {
    for (uint64_t r = w * kPerWindow; r < std::min(regions, (w + 1) * kPerWindow); ++r) {
      if (free[r]) pool.push_back(r);
    }
    plan.sampled_window_free += window_free[w];
  }
  const uint64_t n = std::min<uint64_t>(std::max<uint64_t>(1, options.sample_regions), pool.size());
  // One region at random from each of n equal runs of the pool (stratified: spread and random).
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t lo = k * pool.size() / n, hi = (k + 1) * pool.size() / n;
    uint64_t at = lo + below(hi - lo);
    plan.pick[pool[at]] = true;
  }
  plan.count = n;
  return plan;
}

std::string Percent(double f) {
  char buf[32];
  if (f >= 0.01) std::snprintf(buf, sizeof buf, "%.1f%%", f * 100);
  else if (f >= 0.0001) std::snprintf(buf, sizeof buf, "%.2f%%", f * 100);
  else std::snprintf(buf, sizeof buf, "%.4f%%", f * 100);
  return buf;
}

std::string Size(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(uint64_t{1} << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / double(1 << 20));
  return buf;
}

}  // namespace

uint64_t PeakAllocationBound(uint64_t device_bytes, const AuditOptions& options) {
  uint64_t windows = (device_bytes + kSampleWindowBytes - 1) / kSampleWindowBytes;
  if (!options.exhaustive) windows = std::min(windows, std::max<uint64_t>(1, options.sample_windows));
  // Regions not given back, the one in flight, an L2 table per window and one refcount block.
  uint64_t not_back = options.max_not_given_back_bytes / kRegionSize * kRegionSize;
  return not_back + kRegionSize + (windows + 1) * kWindowMetadataBytes;
}

SampleStatement DescribeSample(const DiskReport& d) {
  SampleStatement s;
  const uint64_t free_bytes = d.free_regions * kRegionSize;
  const bool complete = d.stopped.empty();
  if (d.probed_regions == 0) {
    s.fraction_95 = 1;
    s.can = "nothing: no free region was probed";
    s.cannot = "anything about the free space";
    return s;
  }
  if (complete && d.probed_regions == d.free_regions) {  // every free region, asked or not
    s.fraction_95 = 0;
    s.can = "foreign bytes in any free 64 KiB region of this disk at the time of the audit (every "
            "one of the " + std::to_string(d.free_regions) + " was probed)";
    s.cannot = "residue in blocks the filesystem has in use, or in free blocks of regions that are "
               "partly in use";
    return s;
  }
  s.fraction_95 = 1 - std::pow(0.05, 1.0 / static_cast<double>(d.probed_regions));
  s.can = "if " + Percent(s.fraction_95) + " or more of the free regions (" +
          Size(static_cast<uint64_t>(s.fraction_95 * free_bytes)) + " of " + Size(free_bytes) +
          ") held foreign data spread over the disk, " + std::to_string(d.probed_regions) +
          " random probes would have found it with 95% probability";
  s.cannot = "a few foreign regions among the " + std::to_string(d.free_regions - d.probed_regions) +
             " free regions not probed" +
             (d.sampled_windows < d.windows
                  ? ", or foreign data only in the free space outside the " +
                        std::to_string(d.sampled_windows) + " sampled 512 MiB windows (of " +
                        std::to_string(d.windows) + ")"
                  : std::string()) +
             (complete ? "" : std::string(" (the audit stopped early: ") + d.stopped + ")") +
             "; `--exhaustive` probes every free region";
  return s;
}

Result<DiskReport> AuditDevice(Device& device, const AuditOptions& options) {
  DiskReport report;
  report.kind = options.kind;
  report.device_bytes = device.size();
  report.exhaustive = options.exhaustive;
  ASSIGN_OR_RETURN(Ext4Map map, ReadExt4Map(device));
  report.block_size = map.block_size();
  report.fs_blocks = map.blocks_count();
  report.free_blocks = map.free_blocks();

  const uint64_t fs_bytes = std::min(device.size(), map.blocks_count() * map.block_size());
  const uint64_t region_count = fs_bytes / kRegionSize;
  std::vector<bool> free(region_count, false);
  for (uint64_t r = 0; r < region_count; ++r) {
    free[r] = map.RangeFree(r * kRegionSize, kRegionSize);
    report.free_regions += free[r];
  }
  report.requested_regions = options.exhaustive ? report.free_regions : options.sample_regions;
  const SamplePlan plan = PlanSample(free, options);
  report.windows = plan.windows;
  report.sampled_windows = plan.sampled_windows;
  report.sampled_window_free_regions = plan.sampled_window_free;
  const uint64_t not_given_back_max = options.max_not_given_back_bytes / kRegionSize;
  const uint64_t progress_step = std::max<uint64_t>(1, plan.count / 100);
  if (options.progress) options.progress(0, plan.count);

  std::vector<uint8_t> region(kRegionSize);
  uint8_t saved[kProbeSize];
  uint8_t again[kProbeSize];
  for (uint64_t r = 0; r < region_count; ++r) {
    if (!plan.pick[r]) continue;
    if (report.not_given_back_regions >= not_given_back_max) {
      report.stopped = kStoppedNotGivenBack;
      break;
    }
    if (options.deadline && std::chrono::steady_clock::now() >= *options.deadline) {
      report.stopped = kStoppedTimeLimit;
      break;
    }
    const uint64_t off = r * kRegionSize;
    // The invariant the whole audit rests on: we only ever write or discard blocks the bitmap
    // says are free.
    if (!map.RangeFree(off, kRegionSize)) {
      return Error(ErrorCode::kInternal, "refusing to write in-use block at " + std::to_string(off));
    }
    RETURN_IF_ERROR(device.ReadAt(off, saved, kProbeSize));
    const std::string probe = ProbeBlock(options.run_id, off);
    const auto* probe_bytes = reinterpret_cast<const uint8_t*>(probe.data());
    RETURN_IF_ERROR(device.WriteAt(off, probe_bytes, kProbeSize));
    ++report.probe_writes;
    RETURN_IF_ERROR(device.ReadAt(off, region.data(), kRegionSize));
    // Give the region back at once: the layer below frees what the probe made it allocate. The
    // probe block reading back unchanged means the discard was ignored: put back what the free
    // block held before (the filesystem owns none of it) and count it.
    Status discarded = device.Discard(off, kRegionSize);
    bool given_back = false;
    if (discarded.ok()) {
      RETURN_IF_ERROR(device.ReadAt(off, again, kProbeSize));
      given_back = std::memcmp(again, probe_bytes, kProbeSize) != 0;
    }
    if (given_back) {
      ++report.given_back_regions;
    } else {
      RETURN_IF_ERROR(device.WriteAt(off, saved, kProbeSize));
      ++report.probe_writes;
      ++report.not_given_back_regions;
    }
    ++report.probed_regions;

    ByteCounts& c = report.bytes;
    const uint64_t foreign_before = c.foreign;
    // Block 0: this run's probe.
    {
      const uint8_t* got = region.data();
      if (std::memcmp(got, probe_bytes, kProbeSize) == 0) {
        c.probe += kProbeSize;
      } else {
        ++report.probe_mismatch_blocks;
        for (size_t i = 0; i < kProbeSize; ++i) {
          if (got[i] == probe_bytes[i]) ++c.probe;
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
    if (options.progress && report.probed_regions % progress_step == 0) {
      options.progress(report.probed_regions, plan.count);
    }
  }
  if (options.progress && report.probed_regions % progress_step != 0) {
    options.progress(report.probed_regions, plan.count);
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

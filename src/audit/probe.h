// The residue probe: the incident's technique, applied safely to one ext4 disk.
//
// For each probed 64 KiB-aligned region of the device that the filesystem's block bitmaps report
// entirely free, the probe writes one 4 KiB block carrying a recognisable per-run pattern at the
// region's start (so a thin or copy-on-write layer below must allocate the region), reads the
// whole region back from the raw device, classifies every byte, and gives the region back with a
// discard (so the layer below frees what the write made it allocate). It reads the probe block
// again to see that the discard took; if it did not, it writes back the 4 KiB it saved and
// counts the region as not given back. Before each write or discard it checks, from the bitmap,
// that every filesystem block under it is free, and after the last one it re-reads the bitmaps
// and checks nothing moved. The caller makes the filesystem quiescent first (unmounted, or
// frozen: see audit/audit.h).
//
// Which regions: by default a random sample (seeded by the run id) of `sample_regions` free
// regions, stratified over the free regions of at most `sample_windows` windows of 512 MiB, the
// windows themselves picked one per equal stretch of the device. A qcow2 layer's metadata (one
// 64 KiB L2 table per 512 MiB) is the one cost a discard does not give back, so the windows bound
// it. `exhaustive` probes every free region instead. Either way the audit stops early, and says
// so, once the regions it could not give back reach `max_not_given_back_bytes`, or at `deadline`
// (before the caller's freeze watchdog would thaw the filesystem under it).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audit/device.h"
#include "base/result.h"

namespace cloister::audit {

inline constexpr uint64_t kRegionSize = 64 * 1024;
inline constexpr uint64_t kProbeSize = 4096;
inline constexpr uint64_t kBlocksPerRegion = kRegionSize / kProbeSize;
// A sample window: the device span one qcow2 L2 table maps with 64 KiB clusters.
inline constexpr uint64_t kSampleWindowBytes = uint64_t{512} << 20;
// The host allocation a window can cost that no discard gives back (its qcow2 L2 table).
inline constexpr uint64_t kWindowMetadataBytes = 64 * 1024;
// Defaults of the sampled audit (per disk).
inline constexpr uint64_t kDefaultSampleRegions = 1024;
inline constexpr uint64_t kDefaultSampleWindows = 16;
inline constexpr uint64_t kDefaultMaxNotGivenBackBytes = uint64_t{2} << 20;

using RunId = std::array<uint8_t, 16>;

// A fresh random run id (getrandom).
Result<RunId> NewRunId();

// The 4 KiB probe block of run `run` at device byte `offset`: a magic line, the run id, the offset,
// then a pseudo-random fill derived from both (so no two runs or offsets share a block).
std::string ProbeBlock(const RunId& run, uint64_t offset);

// If `block` (4 KiB) is exactly the probe block of some run at `offset`, returns that run's id.
std::optional<RunId> MatchProbe(const uint8_t* block, uint64_t offset);

// What a disk is expected to hold in its free space.
enum class DiskKind {
  kHome,  // a home image: no base image, only probe and zero are legal
  kBase,  // a system disk cloned from a base image: base-image bytes are legal too
};
const char* DiskKindName(DiskKind kind);
Result<DiskKind> ParseDiskKind(const std::string& name);

// Compares a 4 KiB block with the base image's block at the same offset. The host (and the tests)
// read the base image itself; the guest has none and defers the question (AuditOptions::base null).
class BaseImage {
 public:
  virtual ~BaseImage() = default;
  // SHA-256 of the base image's 4 KiB block at `offset` (a block past its end hashes as zeros).
  virtual Result<std::array<uint8_t, 32>> BlockSha256(uint64_t offset) = 0;
};
// A raw base image file.
Result<std::unique_ptr<BaseImage>> OpenRawBaseImage(const std::string& path);

std::array<uint8_t, 32> Sha256(const uint8_t* data, size_t len);

// Bytes of the probed regions, by class. Their sum is probed_regions * 64 KiB.
struct ByteCounts {
  uint64_t probe = 0;          // this run's probe pattern, read back where it was written
  uint64_t zero = 0;           // zero bytes (in blocks not identical to the base image)
  uint64_t base_image = 0;     // blocks identical to the base image at the same offset
  uint64_t earlier_probe = 0;  // an earlier, interrupted run's probe block left in place
  uint64_t foreign = 0;        // non-zero bytes that are none of the above
  uint64_t unresolved = 0;     // blocks awaiting the host's base-image comparison (guest only)
  uint64_t Total() const { return probe + zero + base_image + earlier_probe + foreign + unresolved; }
};

// A non-zero 4 KiB block of a kBase disk that the guest could not classify without the base
// image: the host compares `sha256` with the base image's block at `offset`.
struct UnresolvedBlock {
  uint64_t offset = 0;
  std::array<uint8_t, 32> sha256{};
  uint32_t zero_bytes = 0;  // counted as zero if the block turns out not to be base image
};

struct DiskReport {
  std::string device;
  DiskKind kind = DiskKind::kHome;
  std::string mountpoint;  // empty if the filesystem was not mounted
  bool frozen = false;     // true if the audit froze the mounted filesystem while probing
  uint64_t device_bytes = 0;
  uint32_t block_size = 0;
  uint64_t fs_blocks = 0;
  uint64_t free_blocks = 0;
  uint64_t free_regions = 0;    // 64 KiB-aligned regions entirely free per the bitmaps
  uint64_t probed_regions = 0;  // all of them (exhaustive), or the sample
  uint64_t probe_writes = 0;    // 4 KiB writes (probe, and restore if not given back), checked free first
  // The sample (see the file comment).
  bool exhaustive = false;
  uint64_t requested_regions = 0;  // sample size asked for (exhaustive: free_regions)
  uint64_t windows = 0;            // 512 MiB windows of the device that hold a free region
  uint64_t sampled_windows = 0;    // of those, the ones the sample was drawn from
  uint64_t sampled_window_free_regions = 0;  // free regions inside the sampled windows
  // Give-back: regions discarded and read back without the probe, and the others (restored).
  uint64_t given_back_regions = 0;
  uint64_t not_given_back_regions = 0;
  std::string stopped;  // "" ran to the end; kStoppedNotGivenBack; kStoppedTimeLimit
  uint64_t in_use_blocks_written = 0;  // always 0: a write to an in-use block aborts the audit
  bool allocation_unchanged = false;   // bitmaps re-read after probing are identical
  uint64_t probe_mismatch_blocks = 0;  // probe blocks that did not read back as written
  ByteCounts bytes;
  std::vector<uint64_t> foreign_regions;  // the first few region offsets holding foreign bytes
  std::vector<UnresolvedBlock> unresolved;
  bool unresolved_overflow = false;  // more blocks than max_unresolved: the rest counted foreign

  // Clean: nothing foreign, every probe read back, nothing moved, nothing left unresolved.
  bool Clean() const { return bytes.unresolved == 0 && CleanPendingBase(); }
  // Clean apart from blocks still awaiting the host's base-image comparison (the guest's verdict).
  bool CleanPendingBase() const {
    return bytes.foreign == 0 && probe_mismatch_blocks == 0 && allocation_unchanged &&
           in_use_blocks_written == 0;
  }
};

inline constexpr char kStoppedNotGivenBack[] = "not-given-back";
inline constexpr char kStoppedTimeLimit[] = "time-limit";

// What a sample can and cannot rule out, from a report's figures (the host recomputes it; it is
// never taken from the guest's text).
struct SampleStatement {
  // With no foreign byte in the probed regions: the smallest share of the disk's free regions
  // that, holding foreign data spread over the disk, this many probes would have found with 95%
  // probability (1 - 0.05^(1/probed)). 0 if exhaustive and complete; 1 if nothing was probed.
  double fraction_95 = 1;
  std::string can;     // one sentence
  std::string cannot;  // one sentence
};
SampleStatement DescribeSample(const DiskReport& report);

struct AuditOptions {
  RunId run_id{};
  DiskKind kind = DiskKind::kHome;
  BaseImage* base = nullptr;        // kBase only; null defers to the host (unresolved blocks)
  bool exhaustive = false;          // probe every free region (else the sample below)
  uint64_t sample_regions = kDefaultSampleRegions;  // >= 1 unless exhaustive
  uint64_t sample_windows = kDefaultSampleWindows;  // >= 1
  // Stop once this many bytes of probed regions could not be given back (the peak cost when the
  // layer below ignores discard).
  uint64_t max_not_given_back_bytes = kDefaultMaxNotGivenBackBytes;
  // Stop probing (report kStoppedTimeLimit) once this time has passed.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Called with (0, total) before the first probe, then every 1/100 of the way and at the end.
  std::function<void(uint64_t done, uint64_t total)> progress;
  size_t max_unresolved = 65536;    // per disk; beyond it blocks count as foreign (fail closed)
  size_t max_listed_regions = 32;   // foreign region offsets listed in the report
};

// Audits the ext4 filesystem on `device`. The caller guarantees it is quiescent.
Result<DiskReport> AuditDevice(Device& device, const AuditOptions& options);

// The most host disk an audit of a `device_bytes` device with `options` can leave allocated at
// its peak, whatever the layers below do with discards: the regions it may fail to give back,
// the one in flight, and one qcow2 L2 table per window it probes in.
uint64_t PeakAllocationBound(uint64_t device_bytes, const AuditOptions& options);

// Settles unresolved blocks against `base` (host side): identical blocks become base_image, the
// rest zero + foreign. Clears report.unresolved.
Status ResolveWithBase(DiskReport& report, BaseImage& base);

}  // namespace cloister::audit

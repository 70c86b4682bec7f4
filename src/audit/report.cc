#include "audit/report.h"

#include <cstring>
#include <sstream>

#include "audit/ext4.h"

#include "base/strings.h"

namespace cloister::audit {
namespace {

using nlohmann::json;

std::string HexOf(const uint8_t* p, size_t n) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(p), n));
}

Error Bad(const std::string& what) {
  return Error(ErrorCode::kCorrupt, "audit report from the guest: " + what,
               "the guest's audit output is malformed; the audit result is unknown");
}

Result<uint64_t> U64(const json& obj, const char* key, uint64_t max = UINT64_MAX) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_unsigned()) return Bad(std::string("missing or non-integer ") + key);
  uint64_t v = it->get<uint64_t>();
  if (v > max) return Bad(std::string(key) + " out of range");
  return v;
}

Result<bool> Bool(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_boolean()) return Bad(std::string("missing or non-boolean ") + key);
  return it->get<bool>();
}

Result<std::string> Str(const json& obj, const char* key, size_t max = 4096) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return Bad(std::string("missing or non-string ") + key);
  std::string s = it->get<std::string>();
  if (s.size() > max) return Bad(std::string(key) + " too long");
  return s;
}

template <size_t N>
Result<std::array<uint8_t, N>> FixedHex(const std::string& hex, const char* what) {
  if (hex.size() != 2 * N) return Bad(std::string(what) + " has the wrong length");
  auto raw = HexDecode(hex);
  if (!raw.ok()) return Bad(std::string(what) + " is not hex");
  std::array<uint8_t, N> out{};
  std::memcpy(out.data(), raw->data(), N);
  return out;
}

Result<DiskReport> ParseDisk(const json& d) {
  if (!d.is_object()) return Bad("disk entry is not an object");
  DiskReport r;
  ASSIGN_OR_RETURN(r.device, Str(d, "device", 256));
  ASSIGN_OR_RETURN(std::string kind, Str(d, "kind", 16));
  auto k = ParseDiskKind(kind);
  if (!k.ok()) return Bad("unknown disk kind");
  r.kind = *k;
  ASSIGN_OR_RETURN(r.mountpoint, Str(d, "mountpoint", 4096));
  ASSIGN_OR_RETURN(r.frozen, Bool(d, "frozen"));
  ASSIGN_OR_RETURN(r.device_bytes, U64(d, "device_bytes", uint64_t{1} << 50));
  ASSIGN_OR_RETURN(uint64_t bs, U64(d, "block_size", 65536));
  r.block_size = static_cast<uint32_t>(bs);
  ASSIGN_OR_RETURN(r.fs_blocks, U64(d, "fs_blocks", kMaxAuditBlocks));
  ASSIGN_OR_RETURN(r.free_blocks, U64(d, "free_blocks", r.fs_blocks));
  const uint64_t max_regions = r.device_bytes / kRegionSize;
  ASSIGN_OR_RETURN(r.free_regions, U64(d, "free_regions", max_regions));
  ASSIGN_OR_RETURN(r.probed_regions, U64(d, "probed_regions", r.free_regions));
  ASSIGN_OR_RETURN(r.probe_writes, U64(d, "probe_writes", 2 * r.probed_regions));
  auto sm = d.find("sample");
  if (sm == d.end() || !sm->is_object()) return Bad("missing sample");
  ASSIGN_OR_RETURN(r.exhaustive, Bool(*sm, "exhaustive"));
  ASSIGN_OR_RETURN(r.requested_regions, U64(*sm, "requested_regions", uint64_t{1} << 40));
  const uint64_t max_windows = r.device_bytes / kSampleWindowBytes + 1;
  ASSIGN_OR_RETURN(r.windows, U64(*sm, "windows", max_windows));
  ASSIGN_OR_RETURN(r.sampled_windows, U64(*sm, "sampled_windows", r.windows));
  ASSIGN_OR_RETURN(r.sampled_window_free_regions,
                   U64(*sm, "sampled_window_free_regions", r.free_regions));
  if (r.probed_regions > r.sampled_window_free_regions) {
    return Bad("more regions probed than the sampled windows hold");
  }
  ASSIGN_OR_RETURN(r.stopped, Str(*sm, "stopped", 32));
  if (!r.stopped.empty() && r.stopped != kStoppedNotGivenBack && r.stopped != kStoppedTimeLimit) {
    return Bad("unknown stop reason");
  }
  ASSIGN_OR_RETURN(r.given_back_regions, U64(d, "given_back_regions", r.probed_regions));
  ASSIGN_OR_RETURN(r.not_given_back_regions, U64(d, "not_given_back_regions", r.probed_regions));
  if (r.given_back_regions + r.not_given_back_regions != r.probed_regions) {
    return Bad("given-back counts of " + r.device + " do not add up to the probed regions");
  }
  if (r.probe_writes != r.probed_regions + r.not_given_back_regions) {
    return Bad("probe writes of " + r.device + " do not match the probed regions");
  }
  ASSIGN_OR_RETURN(r.in_use_blocks_written, U64(d, "in_use_blocks_written"));
  ASSIGN_OR_RETURN(r.allocation_unchanged, Bool(d, "allocation_unchanged"));
  ASSIGN_OR_RETURN(r.probe_mismatch_blocks, U64(d, "probe_mismatch_blocks", r.probed_regions));
  ASSIGN_OR_RETURN(r.unresolved_overflow, Bool(d, "unresolved_overflow"));

  auto b = d.find("bytes");
  if (b == d.end() || !b->is_object()) return Bad("missing bytes");
  const uint64_t total = r.probed_regions * kRegionSize;
  ASSIGN_OR_RETURN(r.bytes.probe, U64(*b, "probe", total));
  ASSIGN_OR_RETURN(r.bytes.zero, U64(*b, "zero", total));
  ASSIGN_OR_RETURN(r.bytes.base_image, U64(*b, "base_image", total));
  ASSIGN_OR_RETURN(r.bytes.earlier_probe, U64(*b, "earlier_probe", total));
  ASSIGN_OR_RETURN(r.bytes.foreign, U64(*b, "foreign", total));
  ASSIGN_OR_RETURN(r.bytes.unresolved, U64(*b, "unresolved", total));
  if (r.bytes.Total() != total) {
    return Bad("byte counts of " + r.device + " do not add up to the probed regions");
  }

  auto fr = d.find("foreign_regions");
  if (fr == d.end() || !fr->is_array() || fr->size() > kMaxListedRegions) {
    return Bad("foreign_regions missing or too long");
  }
  for (const auto& o : *fr) {
    if (!o.is_number_unsigned()) return Bad("foreign region offset is not an integer");
    uint64_t off = o.get<uint64_t>();
    if (off % kRegionSize != 0 || off >= r.device_bytes) return Bad("foreign region offset out of range");
    r.foreign_regions.push_back(off);
  }

  auto un = d.find("unresolved_blocks");
  if (un == d.end() || !un->is_array() || un->size() > kMaxUnresolvedPerDisk) {
    return Bad("unresolved_blocks missing or too long");
  }
  if (un->size() * kProbeSize != r.bytes.unresolved) {
    return Bad("unresolved block list does not match the unresolved byte count");
  }
  if (!un->empty() && r.kind != DiskKind::kBase) return Bad("unresolved blocks on a home disk");
  r.unresolved.reserve(un->size());
  for (const auto& u : *un) {
    if (!u.is_object()) return Bad("unresolved block is not an object");
    UnresolvedBlock blk;
    ASSIGN_OR_RETURN(blk.offset, U64(u, "offset", r.device_bytes));
    if (blk.offset % kProbeSize != 0 || blk.offset + kProbeSize > r.device_bytes) {
      return Bad("unresolved block offset out of range");
    }
    ASSIGN_OR_RETURN(std::string hex, Str(u, "sha256", 64));
    ASSIGN_OR_RETURN(blk.sha256, FixedHex<32>(hex, "sha256"));
    ASSIGN_OR_RETURN(uint64_t z, U64(u, "zero_bytes", kProbeSize - 1));
    blk.zero_bytes = static_cast<uint32_t>(z);
    r.unresolved.push_back(blk);
  }
  return r;
}

}  // namespace

nlohmann::json ReportToJson(const AuditReport& report) {
  json disks = json::array();
  for (const DiskReport& d : report.disks) {
    json un = json::array();
    for (const auto& u : d.unresolved) {
      un.push_back({{"offset", u.offset}, {"sha256", HexOf(u.sha256.data(), 32)}, {"zero_bytes", u.zero_bytes}});
    }
    const SampleStatement st = DescribeSample(d);
    disks.push_back({
        {"device", d.device},
        {"kind", DiskKindName(d.kind)},
        {"mountpoint", d.mountpoint},
        {"frozen", d.frozen},
        {"device_bytes", d.device_bytes},
        {"block_size", d.block_size},
        {"fs_blocks", d.fs_blocks},
        {"free_blocks", d.free_blocks},
        {"free_regions", d.free_regions},
        {"probed_regions", d.probed_regions},
        {"probe_writes", d.probe_writes},
        {"sample",
         {{"exhaustive", d.exhaustive},
          {"requested_regions", d.requested_regions},
          {"windows", d.windows},
          {"sampled_windows", d.sampled_windows},
          {"window_bytes", kSampleWindowBytes},
          {"sampled_window_free_regions", d.sampled_window_free_regions},
          {"stopped", d.stopped},
          // Derived from the figures above (recomputed by whoever re-encodes; never parsed).
          {"rules_out_fraction_95", st.fraction_95},
          {"can_rule_out", st.can},
          {"cannot_rule_out", st.cannot}}},
        {"given_back_regions", d.given_back_regions},
        {"not_given_back_regions", d.not_given_back_regions},
        {"in_use_blocks_written", d.in_use_blocks_written},
        {"allocation_unchanged", d.allocation_unchanged},
        {"probe_mismatch_blocks", d.probe_mismatch_blocks},
        {"unresolved_overflow", d.unresolved_overflow},
        {"bytes",
         {{"probe", d.bytes.probe},
          {"zero", d.bytes.zero},
          {"base_image", d.bytes.base_image},
          {"earlier_probe", d.bytes.earlier_probe},
          {"foreign", d.bytes.foreign},
          {"unresolved", d.bytes.unresolved}}},
        {"foreign_regions", d.foreign_regions},
        {"unresolved_blocks", un},
        {"clean", d.Clean()},
    });
  }
  return {{"version", kReportVersion},
          {"run_id", HexOf(report.run_id.data(), report.run_id.size())},
          {"clean", report.Clean()},
          {"disks", disks}};
}

Result<AuditReport> ParseAuditReport(std::string_view text) {
  // SECURITY: guest bytes; see the header.
  if (text.size() > kMaxReportBytes) return Bad("larger than " + std::to_string(kMaxReportBytes) + " bytes");
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Bad("not a JSON object");
  ASSIGN_OR_RETURN(uint64_t version, U64(doc, "version"));
  if (version != kReportVersion) return Bad("unsupported version " + std::to_string(version));
  AuditReport report;
  ASSIGN_OR_RETURN(std::string run, Str(doc, "run_id", 32));
  ASSIGN_OR_RETURN(report.run_id, FixedHex<16>(run, "run_id"));
  auto disks = doc.find("disks");
  if (disks == doc.end() || !disks->is_array() || disks->empty() || disks->size() > kMaxDisks) {
    return Bad("disks missing, empty or too many");
  }
  for (const auto& d : *disks) {
    ASSIGN_OR_RETURN(DiskReport r, ParseDisk(d));
    report.disks.push_back(std::move(r));
  }
  return report;
}

std::string RenderReport(const AuditReport& report, DiskHistory history) {
  std::ostringstream o;
  for (const DiskReport& d : report.disks) {
    const auto& b = d.bytes;
    o << d.device << " (" << DiskKindName(d.kind) << " disk, " << FormatSize(d.device_bytes);
    if (!d.mountpoint.empty()) o << ", mounted at " << d.mountpoint << (d.frozen ? ", frozen while probing" : "");
    o << ")\n";
    const SampleStatement st = DescribeSample(d);
    o << "  free 64 KiB regions: " << d.free_regions << ", probed: " << d.probed_regions;
    if (d.exhaustive) {
      o << " (exhaustive: every free region)";
    } else {
      o << " (a random sample of " << d.requested_regions << " asked, from " << d.sampled_windows
        << " of the " << d.windows << " 512 MiB windows that hold free space, spread over the disk)";
    }
    o << "\n";
    if (d.stopped == kStoppedNotGivenBack) {
      o << "  STOPPED EARLY: " << d.not_given_back_regions
        << " probed regions could not be given back (the disk ignores discard); stopped to cap "
           "the host disk the audit uses\n";
    } else if (d.stopped == kStoppedTimeLimit) {
      o << "  STOPPED EARLY: the freeze time limit was near (raise --freeze-timeout)\n";
    }
    o << "  rules out: " << st.can << "\n";
    o << "  cannot rule out: " << st.cannot << "\n";
    o << "  wrote " << d.probe_writes << " blocks of 4 KiB (probes, and restores where not given back), "
      << "each into blocks the bitmap marks free; blocks in use written: " << d.in_use_blocks_written
      << "; allocation after probing " << (d.allocation_unchanged ? "unchanged" : "CHANGED") << "\n";
    o << "  given back to the host by discard right after reading: " << d.given_back_regions
      << " regions; not given back (restored): " << d.not_given_back_regions << "\n";
    o << "  bytes: probe " << b.probe << ", zero " << b.zero << ", base-image " << b.base_image
      << ", earlier-probe " << b.earlier_probe << ", foreign " << b.foreign;
    if (b.unresolved) o << ", unresolved " << b.unresolved;
    o << "\n";
    if (d.probe_mismatch_blocks) {
      o << "  " << d.probe_mismatch_blocks << " probe blocks did not read back as written\n";
    }
    if (b.foreign) {
      o << "  FOREIGN bytes in regions at:";
      for (size_t i = 0; i < d.foreign_regions.size() && i < 8; ++i) o << " " << d.foreign_regions[i];
      o << "\n";
      switch (history) {
        case DiskHistory::kUsed:
          o << "  note: this workspace has run before; foreign bytes can be its own deleted files "
               "(free blocks keep old contents). On a fresh workspace foreign must be 0.\n";
          break;
        case DiskHistory::kFresh:
          o << "  this disk is fresh: foreign bytes mean blocks were handed over with someone "
               "else's data\n";
          break;
        case DiskHistory::kUnknown:
          o << "  foreign bytes are this disk's own deleted files if it has been used, and residue "
               "from someone else's data if it is fresh\n";
          break;
      }
    }
    o << "  verdict: " << (d.Clean() ? "clean" : "NOT CLEAN") << "\n";
  }
  return o.str();
}

}  // namespace cloister::audit

// Fuzzes the ext4 allocation reader and the probe that runs on its result: a crafted filesystem
// must give an error or a report, never a crash, an out-of-bounds access, or a write or discard of
// a block the filesystem marks in use.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "audit/ext4.h"
#include "audit/probe.h"

namespace {

// Fails hard if the probe writes anything the map reports in use.
class CheckedDevice : public cloister::audit::Device {
 public:
  CheckedDevice(cloister::audit::Device& inner, const cloister::audit::Ext4Map& map)
      : inner_(inner), map_(map) {}
  uint64_t size() const override { return inner_.size(); }
  cloister::Status ReadAt(uint64_t o, uint8_t* b, size_t n) override { return inner_.ReadAt(o, b, n); }
  cloister::Status WriteAt(uint64_t o, const uint8_t* b, size_t n) override {
    if (!map_.RangeFree(o, n)) std::abort();
    return inner_.WriteAt(o, b, n);
  }
  cloister::Status Sync() override { return inner_.Sync(); }
  cloister::Status Discard(uint64_t o, uint64_t n) override {
    if (!map_.RangeFree(o, n)) std::abort();
    return inner_.Discard(o, n);
  }

 private:
  cloister::audit::Device& inner_;
  const cloister::audit::Ext4Map& map_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (8u << 20)) return 0;
  auto dev = cloister::audit::MemoryDevice(std::string(reinterpret_cast<const char*>(data), size));
  auto map = cloister::audit::ReadExt4Map(*dev);
  if (!map.ok()) return 0;
  if (map->free_blocks() > map->blocks_count()) std::abort();
  CheckedDevice checked(*dev, *map);
  cloister::audit::AuditOptions options;
  options.sample_regions = 4;
  auto report = cloister::audit::AuditDevice(checked, options);
  if (report.ok() && report->bytes.Total() != report->probed_regions * cloister::audit::kRegionSize) {
    std::abort();
  }
  return 0;
}

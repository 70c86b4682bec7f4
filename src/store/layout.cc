#include "store/layout.h"

namespace cloister::layout {

const char* DiskFormatName(DiskFormat format) {
  return format == DiskFormat::kRaw ? "raw" : "qcow2";
}

std::string_view DiskExtension(DiskFormat format) {
  return format == DiskFormat::kRaw ? kRawExtension : kQcow2Extension;
}

std::string LiveDiskFileName(std::string_view stem, uint64_t generation, DiskFormat format) {
  std::string out(stem);
  out += '.';
  out += std::to_string(generation);
  out += DiskExtension(format);
  return out;
}

std::string CheckpointLayerPath(std::string_view checkpoint_id, std::string_view stem,
                                DiskFormat format) {
  std::string out(kCheckpointsDir);
  out += '/';
  out += checkpoint_id;
  out += '/';
  out += stem;
  out += DiskExtension(format);
  return out;
}

}  // namespace cloister::layout

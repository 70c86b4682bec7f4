// Fuzzes the host's reading of the image builder VM's output (image/oci/build_output.h): the
// builder runs the image's own code, so its output is hostile.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "image/oci/build_output.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cloister::image::oci;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  LineSplitter split;
  std::vector<std::string> lines;
  // Fed in two pieces, so a line across a read boundary is exercised too.
  split.Feed(in.substr(0, size / 2), lines);
  split.Feed(in.substr(size / 2), lines);
  if (auto last = split.Finish()) lines.push_back(*last);
  BuildFacts facts;
  for (const auto& l : lines) {
    if (l.size() > kMaxLineBytes) __builtin_trap();
    (void)ApplyLine(ClassifyLine(l), facts);
  }
  if (facts.error_text.size() > kMaxErrorBytes) __builtin_trap();
  // The error the user reads carries the builder's text without a control character.
  cloister::Error e = BuildError(facts, 1);
  for (char c : e.message()) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) __builtin_trap();
  }
  return 0;
}

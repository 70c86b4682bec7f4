// Fuzzes the host side of `cloister git pull`: a guest's git bundle header through
// ParseBundleHeader and CheckBundleRefs. Checks the bounds the header contract states.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "transfer/git_bundle.h"

using namespace cloister::transfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto h = ParseBundleHeader(bytes);
  if (!h.ok()) return 0;
  if (h->header_size > kMaxBundleHeader || h->header_size > size) abort();
  if (h->refs.empty() || h->refs.size() > kMaxBundleRefs) abort();
  for (const BundleRef& r : h->refs) {
    if (!ValidRefName(r.name)) abort();
  }
  (void)CheckBundleRefs(*h, {"refs/heads/main"});
  return 0;
}

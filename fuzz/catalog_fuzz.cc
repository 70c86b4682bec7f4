// Fuzzes the catalog document parser and the signature file parser (both read files imported
// from elsewhere). Properties: never crash; anything accepted re-serialises to a document that
// parses to the same catalog with the same canonical (signed) bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "catalog/catalog.h"
#include "catalog/signing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto c = cloister::catalog::ParseCatalog(in);
  if (c.ok()) {
    auto again = cloister::catalog::ParseCatalog(cloister::catalog::SerializeCatalog(*c));
    if (!again.ok() || !(*again == *c) ||
        cloister::catalog::CanonicalBytes(*again) != cloister::catalog::CanonicalBytes(*c)) {
      std::abort();
    }
  }
  auto s = cloister::catalog::ParseSignature(in);
  if (s.ok() && (s->signature.size() != 64 || s->key_id.size() != 32)) std::abort();
  return 0;
}

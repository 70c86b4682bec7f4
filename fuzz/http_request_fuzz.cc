// Fuzz target: the proxy's request-head parsing and validation (Beast parser with our limits and
// rules, chunked body decoding) and the compromise detector's stream scanner over the same bytes.
// SECURITY: both run on bytes straight from the guest.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/detector.h"
#include "proxy/http_head.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  size_t body = 0;
  (void)cloister::proxy::ParseRequestBytes(bytes, &body);
  (void)cloister::proxy::ParseTarget("GET", bytes.substr(0, 512));
  (void)cloister::proxy::ParseAuthority(bytes.substr(0, 300), 443);

  static const cloister::proxy::PlaceholderSet set(
      {"sk-ant-api03-CLOISTERq7Xk2mPz9vR4tY8wB3nL6hJ1dF5gS0aE",
       "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"});
  cloister::proxy::StreamScanner scanner(set);
  std::vector<cloister::proxy::Hit> hits;
  // Feed in uneven pieces so chunk-boundary state is exercised.
  size_t off = 0, step = 1;
  while (off < bytes.size()) {
    size_t n = std::min(step, bytes.size() - off);
    scanner.Feed(bytes.substr(off, n), hits);
    off += n;
    step = step * 3 % 97 + 1;
  }
  (void)set.Scan(bytes);
  return 0;
}

// Fuzz target: the dashboard's own parsers (src/ui/request.h, src/ui/traffic.h): request target
// routing and query decoding, the Cookie header, Host/Origin checks, the JSON action body, the
// traffic filter, trace.jsonl lines (guest-influenced text) as the live view reads them, and a
// supervisor's consent question line (src/ui/consent.h).
// SECURITY: the first five run on bytes any web page can make the browser send; the trace lines
// and consent questions carry guest-chosen hosts and paths.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ui/consent.h"
#include "ui/request.h"
#include "ui/traffic.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cloister::ui;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  TrafficFilter filter;  // the default, unless the bytes parse as a traffic route
  for (std::string_view method : {"GET", "POST"}) {
    auto route = ParseRoute(method, bytes);
    if (!route.ok()) continue;
    auto f = ParseTrafficFilter(route->query);
    if (f.ok()) filter = *f;
  }
  TraceChunk c = ParseTraceLines(bytes, 0);
  for (const auto& r : c.records) {
    (void)filter.Matches(r);
    (void)Dump(RecordJson(r));
  }
  (void)Dump(LeakRows({{"name", "w"}, {"state", "paused"}, {"compromised", true}}, c.records));
  (void)CookieValue(bytes, "cloister_ui");
  (void)ValidRunHostName(bytes);
  (void)IsOwnHost(bytes, "0123456789abcdef0123456789abcdef.localhost", 8080);
  (void)IsOwnOrigin(bytes, "0123456789abcdef0123456789abcdef.localhost", 8080);
  (void)ParseActionBody(bytes);
  (void)ParseQuery(bytes);
  (void)SecretEquals(bytes, "0123456789abcdef");
  if (auto q = ParseConsentQuestion(bytes)) (void)Dump(*q);
  return 0;
}

// Fuzzes what `cloister --host ... run -p/--auto-ports` reads from a (hostile) remote's
// `port NAME ls --json` answer before it starts tunnels here: ParseRemoteForwards must never
// crash (no float-to-integer conversion of a huge number), and every forward it keeps has both
// ports in 1..65535.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/remote.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;
  for (const auto& f : cloister::cli::ParseRemoteForwards(doc)) {
    if (f.remote_port < 1 || f.remote_port > 65535 || f.guest_port < 1 || f.guest_port > 65535) abort();
  }
  return 0;
}

// Fuzz target: the parsers of the guest's DevTools answers in the kept profile's Browser.close
// (supervisor/devtools_close.h): the /json/version body and one WebSocket message, on the same
// bytes.
// SECURITY: both come from the browser VM's Chromium, which renders hostile pages.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "supervisor/devtools_close.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto path = cloister::vm::BrowserTargetPath(bytes);
  if (path.ok()) {
    // Only a browser target's path of safe characters reaches the handshake's request line.
    const std::string_view prefix = "/devtools/browser/";
    if (path->size() > 128 || path->size() <= prefix.size() ||
        std::string_view(*path).substr(0, prefix.size()) != prefix) {
      std::abort();
    }
    for (char c : path->substr(prefix.size())) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') std::abort();
    }
  }
  (void)cloister::vm::IsBrowserCloseAnswer(bytes);
  return 0;
}

// Fuzzes what `cloister --host ... ssh-config` writes from a (hostile) remote's answer into a
// local known_hosts file: CheckRemotePinLine must accept only one "ws.cloister ssh-ed25519 KEY"
// line, whatever the bytes; anything it accepts is re-checked here.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/remote.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto line = cloister::cli::CheckRemotePinLine("ws", text);
  if (!line.ok()) return 0;
  const std::string prefix = "ws.cloister ssh-ed25519 ";
  if (line->compare(0, prefix.size(), prefix) != 0) abort();
  for (size_t i = prefix.size(); i < line->size(); ++i) {
    char c = (*line)[i];
    bool b64 = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '+' || c == '/' || c == '=';
    if (!b64) abort();  // no newline, space, marker or pattern can follow
  }
  return 0;
}

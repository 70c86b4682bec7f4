// Fuzz target: response redaction's matcher (proxy/redactor.h) streaming over an upstream's bytes,
// cut into pieces wherever the input says. SECURITY: the upstream is not ours to trust and may
// reflect a real credential in any form and place; whatever the bytes and the cuts, the streamed
// output holds no real value raw or in hex (either case), and is exactly as long as the input
// (Content-Length was already sent). A violation traps.
// Input: byte 0 picks the credentials (bit 0 adds a one-byte value: the search's slow path),
// byte 1 seeds the piece lengths (1-97 bytes), the rest is the response body.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "proxy/redactor.h"

namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

const Pairs& Credentials(bool one_byte) {
  static const Pairs with = {{"sk-REAL-9f3c2a71b8d4e605", "PHpppppppppppppppppppppp"},
                             {"k9Zq", "PHpp"},
                             {"Q", "P"}};
  static const Pairs without(with.begin(), with.end() - 1);
  return one_byte ? with : without;
}

std::string Hex(const std::string& s, bool upper) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Pairs& creds = Credentials(data[0] & 1);
  uint32_t k = data[1];
  std::string body(reinterpret_cast<const char*>(data + 2), size - 2);
  cloister::proxy::Redactor r;
  for (const auto& [real, placeholder] : creds) r.Add(real, placeholder);
  std::string out;
  size_t pos = 0;
  bool last = false;
  while (!last) {
    size_t n = std::min<size_t>(body.size() - pos, 1 + k % 97);
    k = k * 1103515245u + 12345u;
    std::string piece = body.substr(pos, n);
    pos += n;
    last = pos >= body.size();
    r.FeedInPlace(piece, last);
    out += piece;
  }
  if (out.size() != body.size()) __builtin_trap();
  for (const auto& [real, placeholder] : creds) {
    if (out.find(real) != std::string::npos) __builtin_trap();
    if (real.size() >= 4) {  // encoded forms under 8 characters are not redacted (redactor.cc)
      for (bool upper : {false, true}) {
        if (out.find(Hex(real, upper)) != std::string::npos) __builtin_trap();
      }
    }
  }
  return 0;
}

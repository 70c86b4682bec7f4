// Fuzz target: response redaction's matcher (proxy/redactor.h) streaming over an upstream's bytes,
// cut into pieces wherever the input says. SECURITY: the upstream is not ours to trust and may
// reflect a real credential in any form and place; whatever the bytes and the cuts, no real value
// the input holds raw or in hex (either case) goes out untouched, and the output is exactly as
// long as the input (Content-Length was already sent). A violation traps.
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
  // A form in the output is a miss when all its bytes are the input's own, where they were: a
  // form the upstream sent that went out untouched. (A replacement may complete a form with the
  // input's bytes beside it, e.g. a hex prefix of a real value and a placeholder's hex starting
  // with its last digit: that tells the guest nothing the input did not.)
  auto missed = [&](const std::string& form) {
    for (size_t p = out.find(form); p != std::string::npos; p = out.find(form, p + 1)) {
      if (out.compare(p, form.size(), body, p, form.size()) == 0) return true;
    }
    return false;
  };
  for (const auto& [real, placeholder] : creds) {
    if (missed(real)) __builtin_trap();
    if (real.size() >= 4) {  // encoded forms under 8 characters are not redacted (redactor.cc)
      for (bool upper : {false, true}) {
        if (missed(Hex(real, upper))) __builtin_trap();
      }
    }
  }
  return 0;
}

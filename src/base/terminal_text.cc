#include "base/terminal_text.h"

#include <cstdint>
#include <cstdio>

namespace cloister {
namespace {

void Escape(unsigned char c, std::string& out) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// Length of the valid UTF-8 sequence at s[i] encoding a code point >= U+00A0 that is not a
// surrogate, or 0.
size_t PrintableUtf8(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;
  if (cp < 0xa0) return 0;  // C1 controls (U+0080..U+009F); U+0080..U+009F are 2-byte forms
  if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) return 0;  // bidi
  return len;
}

}  // namespace

std::string TerminalSafe(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (keep_newlines && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
      ++i;
    } else if (keep_newlines && c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;  // "\r\n": the "\n" follows
    } else if (size_t n = c >= 0x80 ? PrintableUtf8(text, i) : 0; n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      Escape(c, out);
      ++i;
    }
  }
  return out;
}

}  // namespace cloister

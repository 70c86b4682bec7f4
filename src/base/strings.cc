#include "base/strings.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace cloister {

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

Result<uint64_t> ParseSize(std::string_view text) {
  std::string t = Trim(text);
  auto bad = [&] {
    return Error(ErrorCode::kInvalidArgument, "invalid size '" + std::string(text) + "'",
                 "use a number with an optional unit, e.g. 64G, 512M, 4096");
  };
  if (t.empty()) return bad();
  size_t i = 0;
  bool seen_digit = false, seen_dot = false;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) {
    if (t[i] == '.') {
      if (seen_dot) return bad();
      seen_dot = true;
    } else {
      seen_digit = true;
    }
    ++i;
  }
  if (!seen_digit || i > 30) return bad();
  double number = std::strtod(t.substr(0, i).c_str(), nullptr);
  std::string unit = ToLower(Trim(t.substr(i)));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();
  double mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "k") mult = 1024.0;
  else if (unit == "m") mult = 1024.0 * 1024;
  else if (unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else return bad();
  double bytes = number * mult;
  if (!(bytes >= 0) || bytes > 1.8e19) return bad();
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else if (v == std::floor(v)) std::snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[u]);
  else std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string HexEncode(std::string_view bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

Result<std::string> HexDecode(std::string_view hex) {
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return Error(ErrorCode::kInvalidArgument, "odd-length hex string");
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = val(hex[i]), lo = val(hex[i + 1]);
    if (hi < 0 || lo < 0) return Error(ErrorCode::kInvalidArgument, "invalid hex digit");
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

}  // namespace cloister

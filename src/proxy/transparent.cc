#include "proxy/transparent.h"

#include <string>

namespace cloister::proxy {

bool IsIpv4Literal(std::string_view host) {
  int parts = 0;
  size_t i = 0;
  while (i <= host.size()) {
    size_t dot = host.find('.', i);
    if (dot == std::string_view::npos) dot = host.size();
    std::string_view p = host.substr(i, dot - i);
    if (p.empty() || p.size() > 3 || (p.size() > 1 && p[0] == '0')) return false;
    int v = 0;
    for (char c : p) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    if (v > 255) return false;
    ++parts;
    i = dot + 1;
    if (dot == host.size()) break;
  }
  return parts == 4;
}

Result<Authority> ParseTransparentHeader(std::string_view line) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "transparent header: " + why);
  };
  // SECURITY: guest bytes; every check below is on a bounded view.
  if (line.size() + 1 > kMaxTransparentHeader) return bad("too long");
  size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return bad("no port");
  std::string_view host = line.substr(0, sp);
  std::string_view port = line.substr(sp + 1);
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > 253) return bad("host length");
  size_t label = 0;
  bool all_numeric = true;
  for (size_t i = 0; i < host.size(); ++i) {
    char c = host[i];
    if (c == '.') {
      if (label == 0) return bad("empty label");
      label = 0;
      continue;
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return bad("host character");
    if (c < '0' || c > '9') all_numeric = false;
    if (++label > 63) return bad("label longer than 63");
  }
  if (label == 0) return bad("empty label");
  if (all_numeric && !IsIpv4Literal(host)) return bad("numeric host is not an IPv4 address");
  if (port.empty() || port.size() > 5 || port[0] == '0') return bad("port");
  unsigned v = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad("port");
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v < 1 || v > 65535) return bad("port out of range");
  Authority a;
  a.host = std::string(host);
  a.port = static_cast<uint16_t>(v);
  return a;
}

}  // namespace cloister::proxy

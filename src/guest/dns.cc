#include "guest/dns.h"

#include <cstdio>

#include "base/strings.h"

namespace cloister::guest {
namespace {

constexpr uint32_t kSyntheticSize = 1u << 17;  // addresses in the /15
constexpr uint32_t kLocalhost = 0x7F000001u;

uint16_t Get16(std::string_view s, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(s[at]) << 8) | static_cast<uint8_t>(s[at + 1]));
}

void Put16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xFF));
}

void Put32(std::string& out, uint32_t v) {
  Put16(out, static_cast<uint16_t>(v >> 16));
  Put16(out, static_cast<uint16_t>(v & 0xFFFF));
}

// Header of a response: QR, AA, RA set; opcode and RD echoed.
std::string Header(uint16_t id, uint8_t opcode, bool rd, DnsRcode rcode, uint16_t qd, uint16_t an) {
  std::string h;
  Put16(h, id);
  uint16_t flags = 0x8000 | static_cast<uint16_t>((opcode & 0xF) << 11) | 0x0400 |
                   (rd ? 0x0100 : 0) | 0x0080 | static_cast<uint16_t>(rcode);
  Put16(h, flags);
  Put16(h, qd);
  Put16(h, an);
  Put16(h, 0);
  Put16(h, 0);
  return h;
}

// "d.c.b.a.in-addr.arpa" -> a.b.c.d; nullopt for anything else.
std::optional<uint32_t> ParseReverseName(const std::string& name) {
  static const std::string kSuffix = ".in-addr.arpa";
  if (name.size() <= kSuffix.size() || !EndsWith(name, kSuffix)) return std::nullopt;
  auto parts = Split(name.substr(0, name.size() - kSuffix.size()), '.');
  if (parts.size() != 4) return std::nullopt;
  uint32_t addr = 0;
  for (int i = 3; i >= 0; --i) {
    const std::string& p = parts[static_cast<size_t>(i)];
    if (p.empty() || p.size() > 3) return std::nullopt;
    unsigned v = 0;
    for (char c : p) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v > 255) return std::nullopt;
    addr = (addr << 8) | v;
  }
  return addr;
}

// `name` in wire form (labels), for a PTR answer's data. `name` passed ValidHostName.
std::string WireName(const std::string& name) {
  std::string out;
  for (const std::string& label : Split(name, '.')) {
    out.push_back(static_cast<char>(label.size()));
    out += label;
  }
  out.push_back('\0');
  return out;
}

bool IsLocalName(const std::string& name, const std::string& hostname) {
  return name == "localhost" || EndsWith(name, ".localhost") ||
         (!hostname.empty() && name == ToLower(hostname));
}

}  // namespace

std::string Ipv4String(uint32_t a) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xFF, (a >> 8) & 0xFF, a & 0xFF);
  return buf;
}

bool ValidHostName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t label = 0;
  for (char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok || ++label > 63) return false;
  }
  return label > 0;
}

SyntheticMap::SyntheticMap(size_t max_names)
    : max_names_(std::max<size_t>(1, std::min<size_t>(max_names, kSyntheticSize / 2))) {}

uint32_t SyntheticMap::AddressFor(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = by_name_.find(name); it != by_name_.end()) return it->second;
  // Next offset, skipping the /15's network and broadcast addresses.
  uint32_t off = next_;
  next_ = next_ + 1 >= kSyntheticSize - 1 ? 1 : next_ + 1;
  uint32_t addr = kSyntheticNet | off;
  // Only after a full cycle can the address still be in use; max_names_ <= half the range, so
  // that entry is long evicted. Keep the map exact anyway.
  if (auto old = by_addr_.find(addr); old != by_addr_.end()) {
    by_name_.erase(old->second);
    by_addr_.erase(old);
  }
  by_name_[name] = addr;
  by_addr_[addr] = name;
  order_.push_back(addr);
  while (by_name_.size() > max_names_ && !order_.empty()) {
    uint32_t oldest = order_.front();
    order_.pop_front();
    if (auto it = by_addr_.find(oldest); it != by_addr_.end()) {
      by_name_.erase(it->second);
      by_addr_.erase(it);
    }
  }
  // order_ may hold addresses already dropped by the reuse branch: bound it too.
  while (order_.size() > 2 * max_names_) order_.pop_front();
  return addr;
}

std::optional<std::string> SyntheticMap::NameFor(uint32_t addr) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_addr_.find(addr);
  if (it == by_addr_.end()) return std::nullopt;
  return it->second;
}

size_t SyntheticMap::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return by_name_.size();
}

Result<DnsQuery> ParseDnsQuery(std::string_view msg) {
  // SECURITY: hostile bytes. Every read below is checked against msg.size() first.
  if (msg.size() < 12) return Error(ErrorCode::kCorrupt, "DNS message shorter than its header");
  if (msg.size() > kMaxDnsMessage) return Error(ErrorCode::kCorrupt, "DNS message too large");
  DnsQuery q;
  q.id = Get16(msg, 0);
  uint16_t flags = Get16(msg, 2);
  if (flags & 0x8000) return Error(ErrorCode::kCorrupt, "DNS response where a query was expected");
  q.opcode = static_cast<uint8_t>((flags >> 11) & 0xF);
  q.rd = (flags & 0x0100) != 0;
  if (Get16(msg, 4) != 1) return Error(ErrorCode::kCorrupt, "DNS query must have one question");
  size_t at = 12;
  size_t labels = 0;
  while (true) {
    if (at >= msg.size()) return Error(ErrorCode::kCorrupt, "DNS name runs past the message");
    uint8_t len = static_cast<uint8_t>(msg[at]);
    if (len == 0) {
      ++at;
      break;
    }
    if (len & 0xC0) return Error(ErrorCode::kCorrupt, "compressed or extended DNS label in a question");
    if (len > 63) return Error(ErrorCode::kCorrupt, "DNS label too long");
    if (at + 1 + len > msg.size()) return Error(ErrorCode::kCorrupt, "DNS label runs past the message");
    if (++labels > 127 || at + 1 + len - 12 > 254) return Error(ErrorCode::kCorrupt, "DNS name too long");
    if (!q.name.empty()) q.name.push_back('.');
    for (size_t i = 0; i < len; ++i) {
      char c = msg[at + 1 + i];
      // A dot or a control byte inside a label cannot be a host name; keep the joined name exact.
      if (c == '.' || static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7E) {
        return Error(ErrorCode::kCorrupt, "unsupported byte in a DNS label");
      }
      q.name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    }
    at += 1 + len;
  }
  if (at + 4 > msg.size()) return Error(ErrorCode::kCorrupt, "DNS question truncated");
  q.qtype = Get16(msg, at);
  q.qclass = Get16(msg, at + 2);
  q.question_wire = std::string(msg.substr(12, at + 4 - 12));
  // Answer, authority and additional sections (EDNS OPT) are ignored: nothing in them changes
  // the answer, and the response carries none of them back.
  return q;
}

std::string AnswerDnsQuery(std::string_view msg, SyntheticMap& map, const std::string& hostname) {
  if (msg.size() < 12 || (static_cast<uint8_t>(msg[2]) & 0x80)) return "";  // nothing to answer
  auto parsed = ParseDnsQuery(msg);
  if (!parsed.ok()) {
    uint8_t opcode = (static_cast<uint8_t>(msg[2]) >> 3) & 0xF;
    bool rd = static_cast<uint8_t>(msg[2]) & 1;
    return Header(Get16(msg, 0), opcode, rd, DnsRcode::kFormErr, 0, 0);
  }
  const DnsQuery& q = *parsed;
  if (q.opcode != 0) return Header(q.id, q.opcode, q.rd, DnsRcode::kNotImp, 0, 0);
  auto reply = [&](DnsRcode rcode, const std::string& answers, uint16_t count) {
    return Header(q.id, q.opcode, q.rd, rcode, 1, count) + q.question_wire + answers;
  };
  if (q.qclass != 1 && q.qclass != 255) return reply(DnsRcode::kRefused, "", 0);
  auto a_record = [&](uint32_t addr) {
    std::string rr;
    Put16(rr, 0xC00C);  // the question's name
    Put16(rr, static_cast<uint16_t>(DnsType::kA));
    Put16(rr, 1);
    Put32(rr, kSyntheticTtl);
    Put16(rr, 4);
    Put32(rr, addr);
    return rr;
  };
  if (q.qtype == static_cast<uint16_t>(DnsType::kPtr)) {
    auto addr = ParseReverseName(q.name);
    std::optional<std::string> target;
    if (addr && IsSynthetic(*addr)) target = map.NameFor(*addr);
    if (addr && (*addr >> 24) == 127) target = "localhost";
    if (!target) return reply(DnsRcode::kNxDomain, "", 0);
    std::string data = WireName(*target);
    std::string rr;
    Put16(rr, 0xC00C);
    Put16(rr, static_cast<uint16_t>(DnsType::kPtr));
    Put16(rr, 1);
    Put32(rr, kSyntheticTtl);
    Put16(rr, static_cast<uint16_t>(data.size()));
    return reply(DnsRcode::kNoError, rr + data, 1);
  }
  if (!ValidHostName(q.name)) return reply(DnsRcode::kNxDomain, "", 0);
  bool wants_a = q.qtype == static_cast<uint16_t>(DnsType::kA) ||
                 q.qtype == static_cast<uint16_t>(DnsType::kAny);
  if (IsLocalName(q.name, hostname)) {
    return wants_a ? reply(DnsRcode::kNoError, a_record(kLocalhost), 1) : reply(DnsRcode::kNoError, "", 0);
  }
  // AAAA, MX, TXT, HTTPS...: the name exists, it has no such record (no IPv6 path out).
  if (!wants_a) return reply(DnsRcode::kNoError, "", 0);
  return reply(DnsRcode::kNoError, a_record(map.AddressFor(q.name)), 1);
}

}  // namespace cloister::guest

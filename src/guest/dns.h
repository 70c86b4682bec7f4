// The guest's DNS: every name resolves to a synthetic IPv4 address from 198.18.0.0/15 (RFC 2544,
// never routed), and the agent remembers which name each address stands for. The transparent
// listener (guest/transparent.h) turns a connection to such an address back into "<name> <port>"
// for the host's `egress` service; the guest never learns a real address.
//
// Owned by the guest agent. The map lives in the agent's memory for one boot (a reboot starts a new
// one); nothing is written to disk. Thread-safe: the DNS servers and the transparent listener share
// one SyntheticMap.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/result.h"

namespace cloister::guest {

// 198.18.0.0/15 in host byte order.
inline constexpr uint32_t kSyntheticNet = 0xC6120000u;
inline constexpr uint32_t kSyntheticMask = 0xFFFE0000u;
inline constexpr uint32_t kSyntheticTtl = 60;  // seconds, in every answer

inline bool IsSynthetic(uint32_t addr) { return (addr & kSyntheticMask) == kSyntheticNet; }
// "198.18.0.1" for 0xC6120001.
std::string Ipv4String(uint32_t addr);

// True for a name the host side accepts in a transparent header: lowercase [a-z0-9.-], 1..253
// characters, no empty label, no label over 63 characters.
bool ValidHostName(std::string_view name);

// Name <-> synthetic address, stable per name while it stays in the map. Bounded: at most
// `max_names` names; the oldest assignment is forgotten first. Addresses are handed out in order
// through the whole /15 (131070 of them) before any is reused, so a forgotten name's address is
// not given to another name until ~131k later assignments (a stale cached answer is refused, never
// sent to another host).
class SyntheticMap {
 public:
  static constexpr size_t kDefaultMaxNames = 16384;
  explicit SyntheticMap(size_t max_names = kDefaultMaxNames);

  // The address for `name` (which must satisfy ValidHostName), assigning one if needed.
  uint32_t AddressFor(const std::string& name);
  // The name `addr` stands for, if it is a current synthetic address.
  std::optional<std::string> NameFor(uint32_t addr) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  size_t max_names_;
  uint32_t next_ = 1;  // offset into the /15 of the next address to hand out
  std::unordered_map<std::string, uint32_t> by_name_;
  std::unordered_map<uint32_t, std::string> by_addr_;
  std::deque<uint32_t> order_;  // assignment order, oldest first
};

// DNS wire constants used here.
enum class DnsType : uint16_t { kA = 1, kNs = 2, kCname = 5, kSoa = 6, kPtr = 12, kMx = 15,
                                kTxt = 16, kAaaa = 28, kSrv = 33, kOpt = 41, kHttps = 65,
                                kAny = 255 };
enum class DnsRcode : uint8_t { kNoError = 0, kFormErr = 1, kServFail = 2, kNxDomain = 3,
                                kNotImp = 4, kRefused = 5 };

// One parsed question.
struct DnsQuery {
  uint16_t id = 0;
  uint8_t opcode = 0;
  bool rd = false;              // recursion desired (echoed)
  std::string name;             // lower-cased, no trailing dot ("" = the root)
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  std::string question_wire;    // the question section as received (qname, qtype, qclass)
};

inline constexpr size_t kMaxDnsMessage = 4096;  // larger queries are refused (FORMERR or dropped)

// SECURITY: `msg` is a DNS query from any process in the guest (or a container in it): hostile.
// Bounded: at most kMaxDnsMessage bytes, exactly one question, uncompressed name of at most 255
// wire bytes and 127 labels; anything else is an error. Never reads past `msg`.
Result<DnsQuery> ParseDnsQuery(std::string_view msg);

// What the guest's DNS answers to `msg` (empty: drop it, e.g. fewer than 12 bytes or a response).
// A -> the synthetic address of the name (assigned in `map`); "localhost", "*.localhost" and
// `hostname` -> 127.0.0.1; PTR of a synthetic address -> its name; AAAA and the other types ->
// NOERROR without answers (there is no IPv6 path; clients fall back to A); a name outside
// ValidHostName -> NXDOMAIN; opcode other than QUERY -> NOTIMP; class other than IN -> REFUSED;
// malformed -> FORMERR. Responses never exceed 512 bytes.
std::string AnswerDnsQuery(std::string_view msg, SyntheticMap& map, const std::string& hostname);

}  // namespace cloister::guest

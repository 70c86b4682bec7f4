// Transparent egress, guest side (issue #9): every outbound TCP connection of the guest reaches
// the host's egress proxy without any proxy setting.
//
// - DNS: the agent answers on UDP and TCP port `dns_port` (0.0.0.0; /etc/resolv.conf says
//   127.0.0.1) from a SyntheticMap (guest/dns.h): names -> 198.18.0.0/15.
// - Routing: 198.18.0.0/15 is a `local` route on lo, and the IPv4 default route goes into lo, so a
//   connect() to any address reaches netfilter and nothing is routed out of the guest, whatever
//   the firewall says. More specific routes (a container bridge) keep working.
// - Redirect: nftables table `ip cloister` (RedirectRuleset): nat output and prerouting (containers
//   in the guest) send all TCP not to 127.0.0.0/8 to the agent's listener on `port` and every
//   port-53 packet to its DNS; a filter output chain rejects every other non-loopback packet (UDP
//   such as QUIC gets an immediate ICMP refusal, so clients fall back to TCP at once).
// - Listener: accept, SO_ORIGINAL_DST, the name of that synthetic address, open a stream to the
//   host service `service` ("egress"), write exactly one header line `<name> <port>\n`, then relay
//   bytes both ways with half-close. An address the DNS never gave out (a literal IP) is refused
//   here (TCP reset, logged) and never reaches the host. The host refuses by closing the stream:
//   if it closes before sending a byte, the client's connection is reset, not closed cleanly.
//
// Fail closed: if root flushes the rules, connections to non-loopback addresses hit the local
// route (refused, or a local listener); a direct connect to the listener's port without the
// redirect is refused (its original destination is the listener itself). No IPv6 path: AAAA
// queries get no answers and the guest has no IPv6 route beyond ::1.
//
// Threads: one for UDP DNS, one accepting TCP DNS, one accepting redirected connections, and one
// per open connection (bounded by kMaxConnections; beyond it, new ones are reset).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"
#include "guest/dns.h"
#include "protocol/contract.h"

namespace cloister::guest {

inline constexpr const char* kTransparentService = protocol::kEgressService;  // the contract's
using protocol::kTransparentPort;
inline constexpr uint16_t kGuestDnsPort = 53;
inline constexpr size_t kMaxTransparentHeader = 300;  // the host's bound on the header line

struct TransparentOptions {
  std::string service = kTransparentService;
  uint16_t port = kTransparentPort;     // listener on 0.0.0.0 (redirect targets)
  uint16_t dns_port = kGuestDnsPort;    // DNS on 0.0.0.0, UDP and TCP
  std::string hostname;                 // answered as 127.0.0.1, like localhost
  // System setup: lo up, the local default route, the nft ruleset (through `nft_binary`), and
  // resolv.conf. Tests run it inside a network namespace they created, with a temp resolv_conf.
  bool system_setup = true;
  std::string nft_binary = "nft";
  std::string resolv_conf = "/etc/resolv.conf";
  size_t max_names = SyntheticMap::kDefaultMaxNames;
  static constexpr size_t kMaxConnections = 1024;
};

// Opens a stream to the host service `service` bridged to `fd` and takes ownership of `fd` in
// every case (closing it when there is no channel: the client then sees a refusal).
using OpenStreamFn = std::function<void(const std::string& service, int fd)>;

// The nftables ruleset the agent loads (`nft -f -`): flushes and recreates table `ip cloister`.
std::string RedirectRuleset(uint16_t port, uint16_t dns_port);
// The part of the ruleset without the optional filter chain (loaded alone if the full one fails,
// e.g. a kernel without nft_reject).
std::string RedirectNatRuleset(uint16_t port, uint16_t dns_port);

// The header line the host's ServeTransparent reads: "<name> <port>\n". `name` must satisfy
// ValidHostName (guest/dns.h) and `port` be 1..65535, so the line is at most 260 bytes.
std::string TransparentHeader(const std::string& name, uint16_t port);

// Brings lo up and adds, through rtnetlink, `local 198.18.0.0/15 dev lo` (table local) and
// `default dev lo src 127.0.0.1` (an existing default route is kept).
Status SetupLocalRoute();

class TransparentEgress {
 public:
  // Binds the DNS and the listener (before any setup, so a taken port is an error here), runs the
  // system setup, and starts the threads. `log` gets one line per event worth a look (refusals
  // are rate-limited).
  static Result<std::unique_ptr<TransparentEgress>> Start(TransparentOptions options,
                                                          OpenStreamFn open,
                                                          std::function<void(const std::string&)> log);
  // Stops accepting (the listening sockets are shut down; their threads exit and close them).
  // Connections already relaying run to their end.
  ~TransparentEgress();

  SyntheticMap& map();
  uint16_t port() const;      // the bound listener port (options.port, or the one 0 picked)
  uint16_t dns_port() const;  // the bound DNS port (UDP and TCP)

  struct State;

 private:
  TransparentEgress() = default;
  std::shared_ptr<State> state_;
};

}  // namespace cloister::guest

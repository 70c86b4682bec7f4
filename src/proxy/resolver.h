// Upstream name resolution for the proxy: asynchronous (c-ares on the event loop, no thread per
// lookup, no lookup waiting behind another), with a cache bounded by each answer's TTL.
//
// Asio's resolver runs getaddrinfo(3) on one private thread per event loop, so every lookup of a
// loop waited for the ones before it: one name whose resolver answer took 5 s (a dropped AAAA
// reply and glibc's timeout) held every new upstream connection of that loop for 5 s, and every
// new connection looked its name up again. Here each lookup is its own c-ares query; lookups of
// the same name while one is in flight share it; an answer is kept for its smallest record TTL
// (at most kMaxCacheTtl; a TTL of 0 is not kept; failures are not kept).
//
// One Resolver per event loop (Proxy::Impl makes them), used only from that loop's thread.
// Servers: the host's /etc/resolv.conf (and /etc/hosts), or `servers` (tests: a fake DNS server).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "proxy/net.h"

namespace cloister::proxy {

inline constexpr std::chrono::seconds kMaxCacheTtl{300};

class Resolver {
 public:
  // `servers`: "ip:port,ip:port" to ask instead of resolv.conf's ("" = resolv.conf).
  static Result<std::unique_ptr<Resolver>> Create(asio::io_context& io,
                                                  const std::string& servers = "");
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // The addresses of `host` (IPv4 and IPv6; an IP literal is returned as is). kUnavailable when
  // it does not resolve. Runs on this resolver's loop.
  awaitable<Result<std::vector<asio::ip::address>>> Resolve(const std::string& host);

  // Queries sent to a server so far (tests: what the cache and sharing saved).
  uint64_t queries() const { return queries_; }

  class Impl;

 private:
  explicit Resolver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  uint64_t queries_ = 0;
  friend class Impl;
};

}  // namespace cloister::proxy

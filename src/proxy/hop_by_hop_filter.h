// Hop-by-hop normalisation: drops hop-by-hop headers both ways (Proxy-*, Keep-Alive, TE,
// Trailer), keeps an Upgrade (Connection: upgrade), answers Expect: 100-continue itself (the
// driver writes the 100), and sends HTTP/1.1 upstream.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class HopByHopFilter : public Filter {
 public:
  const char* name() const override { return "hop_by_hop"; }
  Status OnRequestHead(Exchange& ex) override;
  Status OnResponseHead(Exchange& ex, ResponseHeader& res) override;
};

}  // namespace cloister::proxy

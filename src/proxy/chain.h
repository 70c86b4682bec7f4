// The proxy's filter chain: one ordered list of filters (filter.h) that every proxied request
// passes through. The order is in ONE place, DefaultChain() in chain.cc, and docs/design.md shows
// it. Requests go down the list, responses come back up it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "proxy/exchange.h"
#include "proxy/filter.h"

namespace cloister::proxy {

class Chain {
 public:
  explicit Chain(std::vector<std::unique_ptr<Filter>> filters) : filters_(std::move(filters)) {}
  Status OnRequestHead(Exchange& ex) const;
  Status OnRequestBody(Exchange& ex, std::string& data, bool end) const;
  Status OnResponseHead(Exchange& ex, ResponseHeader& res) const;
  Status OnResponseBody(Exchange& ex, ResponseHeader& res, std::string& data, bool end) const;
  std::vector<std::string> Names() const;

 private:
  std::vector<std::unique_ptr<Filter>> filters_;
};

// The proxy's chain, in order. One chain serves every connection and thread.
Chain DefaultChain();

}  // namespace cloister::proxy

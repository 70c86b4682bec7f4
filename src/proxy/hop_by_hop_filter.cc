#include "proxy/hop_by_hop_filter.h"

#include <set>

#include "base/strings.h"

namespace cloister::proxy {
namespace {

namespace http = boost::beast::http;

bool IsHopByHop(std::string_view name) {
  static const std::set<std::string> kHop = {"proxy-connection", "proxy-authorization",
                                             "keep-alive", "te", "trailer", "proxy-authenticate"};
  return kHop.count(ToLower(name)) > 0;
}

void DropHopByHop(http::fields& fields) {
  std::vector<std::string> drop;
  for (const auto& f : fields) {
    if (IsHopByHop(f.name_string())) drop.push_back(std::string(f.name_string()));
  }
  for (const auto& d : drop) fields.erase(d);
}

// As Beast's message::keep_alive(), on a bare header.
bool KeepAlive(const RequestHeader& req) {
  auto it = req.find(http::field::connection);
  if (req.version() >= 11) return it == req.end() || !http::token_list(it->value()).exists("close");
  return it != req.end() && http::token_list(it->value()).exists("keep-alive");
}

}  // namespace

Status HopByHopFilter::OnRequestHead(Exchange& ex) {
  auto& req = ex.req;
  ex.upgrade = req.find(http::field::upgrade) != req.end();  // upgrades pass through
  DropHopByHop(req);
  ex.client_keep_alive = KeepAlive(req);
  if (ex.upgrade) {
    req.set(http::field::connection, "upgrade");
  } else {
    req.erase(http::field::connection);
  }
  if (auto e = req.find(http::field::expect); e != req.end()) {
    ex.expect_continue = boost::beast::iequals(e->value(), "100-continue");
    if (ex.expect_continue) req.erase(http::field::expect);
  }
  req.version(11);
  return OkStatus();
}

Status HopByHopFilter::OnResponseHead(Exchange&, ResponseHeader& res) {
  DropHopByHop(res);
  return OkStatus();
}

}  // namespace cloister::proxy

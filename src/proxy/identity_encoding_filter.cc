#include "proxy/identity_encoding_filter.h"

#include "base/strings.h"

namespace cloister::proxy {

namespace http = boost::beast::http;

Status IdentityEncodingFilter::OnRequestHead(Exchange& ex) {
  if (!ex.redactor.active() && ex.response_transforms.empty()) return OkStatus();
  // SECURITY: a compressed response would hide a reflected real value (or a minted credential)
  // from the filters that must see it.
  ex.identity_response = true;
  ex.req.set(http::field::accept_encoding, "identity");
  return OkStatus();
}

Status IdentityEncodingFilter::OnResponseHead(Exchange& ex, ResponseHeader& res) {
  if (!ex.identity_response) return OkStatus();
  auto range = res.equal_range(http::field::content_encoding);
  for (auto it = range.first; it != range.second; ++it) {
    std::string enc = ToLower(Trim(std::string_view(it->value().data(), it->value().size())));
    if (!enc.empty() && enc != "identity") {
      return ex.Refuse(502, "upstream answered with Content-Encoding: " + enc +
                                " although the proxy asked for identity (it must read the "
                                "response to keep credentials out of the guest); refused");
    }
  }
  return OkStatus();
}

}  // namespace cloister::proxy

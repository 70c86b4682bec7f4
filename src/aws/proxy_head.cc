#include "aws/proxy_head.h"

namespace cloister::aws {

RequestHead ToAws(const proxy::RequestHead& h) {
  RequestHead out;
  out.method = h.method;
  out.target = h.target;
  for (const auto& [name, value] : h.headers) out.headers.push_back({name, value});
  return out;
}

void FromAws(const RequestHead& a, proxy::RequestHead& h) {
  h.target = a.target;
  h.headers.clear();
  for (const Header& x : a.headers) h.headers.emplace_back(x.name, x.value);
}

}  // namespace cloister::aws

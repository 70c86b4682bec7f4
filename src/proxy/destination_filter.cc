#include "proxy/destination_filter.h"

#include <algorithm>

#include "vault/credential.h"

namespace cloister::proxy {

Status DestinationFilter::OnRequestHead(Exchange& ex) {
  const Origin& origin = ex.origin;
  auto target = ParseTarget(ex.rec.method, ex.raw_target);
  if (!target.ok()) return ex.Refuse(400, target.error().message());
  if (origin.tls) {
    if (target->form == RequestTarget::Form::kAbsolute &&
        (target->authority.host != origin.connect.host || target->scheme != "https")) {
      return ex.Refuse(400, "request target does not match the tunnel");
    }
    if (target->form == RequestTarget::Form::kAsterisk) target->path = "*";
    ex.target = origin.connect;
  } else if (origin.transparent) {
    // Plain HTTP redirected in the guest: it goes to the header's host:port, whatever it names.
    if (target->form == RequestTarget::Form::kAbsolute &&
        (target->authority.host != origin.connect.host || target->scheme != "http")) {
      return ex.Refuse(400, "request target does not match the connection");
    }
    if (target->form == RequestTarget::Form::kAsterisk) target->path = "*";
    ex.target = origin.connect;
  } else {
    if (target->form != RequestTarget::Form::kAbsolute || target->scheme != "http") {
      return ex.Refuse(400, "not a proxy request (use http://host/ targets, or CONNECT for https)");
    }
    ex.target = target->authority;
    ex.rec.host = ex.target.host;
    ex.rec.port = ex.target.port;
    if (!ex.ctx.config->egress_policy.Allows(ex.target.host, ex.target.port)) {
      return ex.Refuse(403, "egress policy: " + ex.target.HostPort() + " is not allowed");
    }
  }
  ex.rec.host = ex.target.host;
  ex.rec.port = ex.target.port;
  ex.rec.path = TracePath(target->path);
  // Upstream gets the origin form; the detector still scans the target as the client sent it.
  ex.req.target(target->path);

  if (auto h = ex.req.find(boost::beast::http::field::host); h != ex.req.end()) {
    auto a = ParseAuthority(std::string_view(h->value().data(), h->value().size()), ex.target.port);
    if (a.ok()) ex.host_header = a->host;
  } else {
    ex.host_header = ex.target.host;  // HTTP/1.0 without Host: the target names the host
  }
  ex.hosts = {ex.target.host};
  if (!ex.host_header.empty() && ex.host_header != ex.target.host) ex.hosts.push_back(ex.host_header);
  if (origin.tls && !origin.sni.empty() && origin.sni != ex.target.host) ex.hosts.push_back(origin.sni);
  ex.names_agree =
      origin.tls && ex.host_header == ex.target.host && origin.sni == ex.target.host;
  if (origin.transparent && ex.host_header != ex.target.host) {
    // SECURITY: the guest resolved one name and asks another: refuse rather than guess.
    return ex.Refuse(421, "Host " + ex.host_header + " does not match the connection's name " +
                              ex.target.host);
  }
  const auto& creds = ex.ctx.config->credentials;
  for (size_t i = 0; i < creds.size(); ++i) {
    const auto& hosts = creds[i].credential.hosts;
    if (std::all_of(ex.hosts.begin(), ex.hosts.end(),
                    [&](const std::string& h) { return vault::HostInAnyScope(h, hosts); })) {
      ex.in_scope.push_back(i);
    }
  }
  if (ex.ctx.tripped->load()) return ex.Refuse(451, "workspace is compromised; nothing is forwarded");
  return OkStatus();
}

}  // namespace cloister::proxy

#include "proxy/name_agreement_filter.h"

namespace cloister::proxy {

Status NameAgreementFilter::OnRequestHead(Exchange& ex) {
  if (ex.origin.transparent) return OkStatus();  // DestinationFilter and InterceptTls check it
  const std::string& to = ex.target.host;
  if (ex.origin.tls) {
    if (!ex.origin.sni.empty() && ex.origin.sni != to) {
      return ex.Refuse(421, "TLS SNI " + ex.origin.sni + " does not match the CONNECT authority " +
                                to + " (send SNI, Host and CONNECT for the same host)");
    }
    if (ex.host_header != to) {
      return ex.Refuse(421, "Host " + ex.host_header + " does not match the CONNECT authority " +
                                to + " (send SNI, Host and CONNECT for the same host)");
    }
    return OkStatus();
  }
  if (ex.host_header != to) {
    return ex.Refuse(421, "Host " + ex.host_header + " does not match the request target's host " +
                              to);
  }
  return OkStatus();
}

}  // namespace cloister::proxy

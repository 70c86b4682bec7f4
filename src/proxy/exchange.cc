#include "proxy/exchange.h"

#include "vault/credential.h"

namespace cloister::proxy {

bool ProxyContext::IsLlmHost(const std::string& host) const {
  for (vault::CredentialKind k : {vault::CredentialKind::kAnthropic, vault::CredentialKind::kOpenai}) {
    if (vault::HostInAnyScope(host, vault::InfoFor(k).default_hosts)) return true;
  }
  for (const auto& b : config->credentials) {
    if (vault::InfoFor(b.credential.kind).llm_provider &&
        vault::HostInAnyScope(host, b.credential.hosts)) {
      return true;
    }
  }
  return false;
}

}  // namespace cloister::proxy

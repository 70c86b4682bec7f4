// Subscription logins as an extension filter of the egress proxy (proxy/extension_filter.h, in
// ProxyConfig::extension_filters like aws/; added by AddOauthFilters, wiring.h). One filter per
// proxy, holding every login of the workspace (LoginCustody, custody.h) and guarding the
// providers' token endpoints.
//
// For a TLS-intercepted request (names agree; the detector has already scanned it: a placeholder
// toward a host outside its scope never gets here, it trips the detector):
//   1. to a login's API host (exact or subdomain) with `Authorization: Bearer <access
//      placeholder>`: the placeholder is replaced by the login's current real access token;
//   2. a POST to a token endpoint (path ending in /oauth/token) of a known provider
//      (platform.claude.com, console.anthropic.com, auth.openai.com and the logins' token hosts):
//      - a refresh (grant_type=refresh_token) carrying a login's refresh placeholder: the body is
//        held (<= 64 KiB), the placeholder replaced by the real refresh token (LoginCustody::
//        BeginRefresh: one in flight per login, else 403 with a retry hint), and the 200 answer
//        held (<= 256 KiB), taken into custody and saved to the vault before the guest gets the
//        same document with placeholders (LoginCustody::CompleteRefresh);
//      - a login in the guest (grant_type=authorization_code: Claude's pasted code, Codex's
//        device code exchange) toward the token hosts of a login or capture slot: forwarded as
//        sent; the 200 answer is held (<= 256 KiB) and taken into that custody
//        (LoginCustody::CaptureLogin: saved to the vault first), the guest gets it with
//        placeholders; an answer that cannot be parsed or saved is refused (502, nothing of it
//        forwarded);
//      - anything else (a refresh with a token that is not a placeholder, another grant): the
//        answer is held, and one that carries an access, refresh or id token is refused (502,
//        nothing of it forwarded) with the hint to import the login on the host: no real token
//        ever reaches a guest buffer.
//
// Thread safe (the custodies are; the filter itself is immutable).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "oauth/custody.h"
#include "proxy/extension_filter.h"

namespace cloister::oauth {

// The providers' token endpoint hosts, guarded even when the workspace holds no login.
const std::vector<std::string>& ProviderTokenHosts();

class OauthFilter : public proxy::ExtensionFilter {
 public:
  explicit OauthFilter(std::vector<std::shared_ptr<LoginCustody>> logins);
  Result<proxy::ExtensionVerdict> OnRequestHead(proxy::RequestHead& head) override;
  Status OnFullBody(proxy::RequestHead& head, std::string_view body) override;

  const std::vector<std::shared_ptr<LoginCustody>>& logins() const { return logins_; }

 private:
  std::vector<std::shared_ptr<LoginCustody>> logins_;
  std::vector<std::string> token_hosts_;  // ProviderTokenHosts() and every login's
};

}  // namespace cloister::oauth

// Subscription logins as an extension filter of the egress proxy (proxy/extension_filter.h, in
// ProxyConfig::extension_filters like aws/; added by AddOauthFilters, wiring.h). One filter per
// proxy, holding every login of the workspace (LoginCustody, custody.h) and guarding the
// providers' token endpoints.
//
// For a TLS-intercepted request (names agree; the detector has already scanned it: a placeholder
// toward a host outside its scope never gets here, it trips the detector):
//   1. to a login's API host (exact or subdomain) with `Authorization: Bearer <access
//      placeholder>`: on a path the pinned clients need (api_paths.h; or one the user allowed
//      with `cloister cred policy NAME KIND --allow-path`) the placeholder is replaced by the
//      login's current real access token, which WouldSwap names first (consent asks by it) and
//      the verdict reports (ExtensionVerdict::swapped: redacted from the answer, in the trace);
//      any other path is refused (403 naming the credential and the --allow-path fix), and a path
//      that mints a credential from the login (create_api_key) is refused even when allowed;
//   2. every request to a token host (platform.claude.com, console.anthropic.com,
//      auth.openai.com and the logins' token hosts): its answer is held (<= 256 KiB at a token
//      endpoint, <= 4 MiB elsewhere) and scanned deeply (token_scan.h: token-shaped values in any
//      field, at any depth) before the guest gets it; one that carries a real token is refused
//      (502, nothing of it forwarded) with the hint to import the login on the host;
//   3. a POST to a token endpoint (a path ending in /token): its body is held (<= 64 KiB) and
//      parsed (token_body.h: a field given twice is refused, 403);
//      - a refresh (grant_type=refresh_token) carrying a login's refresh placeholder: the
//        placeholder is replaced by the real refresh token (LoginCustody::BeginRefresh: one in
//        flight per login, else 403 with a retry hint; a refresh asking for a minting scope is
//        refused), and the 200 answer is taken into custody and saved to the vault before the
//        guest gets the same document with placeholders (LoginCustody::CompleteRefresh);
//      - a login in the guest (grant_type=authorization_code: Claude's pasted code, Codex's
//        device code exchange) toward the token hosts of a login or capture slot: forwarded as
//        sent; the 200 answer is taken into that custody (LoginCustody::CaptureLogin: saved to
//        the vault first), the guest gets it with placeholders; an answer that cannot be parsed
//        or saved is refused (502);
//      - a token exchange for an API key (Codex's `requested_token=openai-api-key`) mints a
//        credential from the login: refused (403);
//      - anything else is forwarded; its answer goes through the scan of 2.
//
// Thread safe (the custodies are; the filter itself is immutable).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "oauth/api_paths.h"
#include "oauth/custody.h"
#include "proxy/extension_filter.h"

namespace cloister::oauth {

// The providers' token endpoint hosts, guarded even when the workspace holds no login.
const std::vector<std::string>& ProviderTokenHosts();

inline constexpr size_t kMaxTokenHostResponse = 4 * 1024 * 1024;  // a token host's other answers

class OauthFilter : public proxy::ExtensionFilter {
 public:
  // `workspace` names the workspace in refusals (their fix is a command on the host).
  explicit OauthFilter(std::vector<std::shared_ptr<LoginCustody>> logins,
                       std::string workspace = "WORKSPACE");
  std::vector<std::string> WouldSwap(const proxy::RequestHead& head) const override;
  Result<proxy::ExtensionVerdict> OnRequestHead(proxy::RequestHead& head) override;
  Status OnFullBody(proxy::RequestHead& head, std::string_view body) override;

  const std::vector<std::shared_ptr<LoginCustody>>& logins() const { return logins_; }

 private:
  // A request that carries a login's access placeholder toward its API host: the login, and
  // whether its path may have the real token (api_paths.h). `login` null: not such a request.
  struct ApiUse {
    std::shared_ptr<LoginCustody> login;
    PathVerdict path = PathVerdict::kNotAllowed;
  };
  ApiUse MatchApi(const proxy::RequestHead& head) const;
  // Token-shaped values that are none of this workspace's placeholders (token_scan.h).
  bool IsPlaceholder(std::string_view token) const;

  std::vector<std::shared_ptr<LoginCustody>> logins_;
  std::vector<std::string> token_hosts_;  // ProviderTokenHosts() and every login's
  std::string workspace_;
};

}  // namespace cloister::oauth

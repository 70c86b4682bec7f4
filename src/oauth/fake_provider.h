// Test support: a fake OAuth provider (token endpoint with single-use rotating refresh tokens,
// and an API that accepts only the current access token), served by proxy::testing::FakeUpstream
// on 127.0.0.1 and reached through the proxy's resolve override. Plays platform.claude.com +
// api.anthropic.com (Claude) or auth.openai.com + chatgpt.com (ChatGPT: JWT tokens). Never used
// by the product.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "proxy/fake_upstream.h"

namespace cloister::oauth::testing {

class FakeProvider {
 public:
  // `jwt`: mint JWT access and id tokens (ChatGPT) instead of sk-ant-oat01-/sk-ant-ort01- ones.
  explicit FakeProvider(bool jwt);

  // The handler to give FakeUpstream::Start. Paths (JSON or form bodies, as the clients send):
  //   GET .../oauth/authorize?client_id&redirect_uri&code_challenge&code_challenge_method=S256
  //       &state (the user's browser): 302 to redirect_uri?code=CODE&state=STATE (Authorize()).
  //   POST .../oauth/token  grant_type=refresh_token: the current refresh token -> 200 with a new
  //       access token, a new refresh token and expires_in; any other (a reused, retired one) ->
  //       400 invalid_grant AND the login is revoked (every later refresh fails), as providers
  //       do on refresh token reuse.
  //     grant_type=authorization_code: a code from Authorize() or an approved device code, used
  //       once, with its redirect_uri and a code_verifier whose S256 is the code's challenge ->
  //       200 with a fresh login (it becomes the current one; revoked is cleared); else 400
  //       invalid_grant. Without strict_pkce (the default), a code this provider never issued
  //       is accepted too (tests that only look at the proxy's side).
  //     Claude's answer carries account {uuid, email_address} and organization {uuid}.
  //   POST .../api/accounts/deviceauth/usercode {client_id} -> {device_auth_id, user_code,
  //       interval} (Codex's device code login); POST .../api/accounts/deviceauth/token
  //       {device_auth_id, user_code} -> 403 {"error":"authorization_pending"} until
  //       ApproveDevice(user_code), then once 200 {authorization_code, code_challenge,
  //       code_verifier} (redirect_uri of its exchange: https://auth.openai.com/deviceauth/callback).
  //   GET .../api/oauth/profile (Claude) with the current access token: a profile of the shape
  //       Claude Code checks (account {uuid, email}, organization {uuid, organization_type}).
  //   anything else: 200 {"ok":true} when `Authorization: Bearer <current access token>`, else
  //       401.
  proxy::testing::Handler handler();

  // The token endpoint without HTTP (crash tests): the status and body the handler would send
  // for a POST .../oauth/token with `body`.
  std::pair<int, std::string> Exchange(const std::string& body);

  // The user's browser at the authorize endpoint: a code bound to `code_challenge` (S256) and
  // `redirect_uri`.
  std::string Authorize(const std::string& code_challenge, const std::string& redirect_uri);
  // The user typed `user_code` at the device page and approved.
  bool ApproveDevice(const std::string& user_code);
  // Every device code is approved as soon as it is issued (a user who approved at once).
  void set_auto_approve(bool on);
  // Codes issued only (Authorize, device flow), and PKCE checked on each.
  void set_strict_pkce(bool strict);
  // expires_in of every answer (default 3600).
  void set_expires_in(int64_t seconds);
  int logins();  // authorization code exchanges answered 200
  // PKCE S256 of a verifier (base64url of its SHA-256, no padding).
  static std::string S256(const std::string& verifier);

  // The login as it stands (what a host's client would hold after logging in).
  std::string access();
  std::string refresh();
  std::string id_token();  // jwt only
  int refreshes();
  bool revoked();
  // Every access/refresh/id token this provider ever issued (for scans: none may reach a guest).
  std::vector<std::string> issued();

  // Mints a token of the provider's shape (deterministic from the counter).
  std::string MintAccess();
  std::string MintRefresh();
  std::string MintId();

 private:
  std::string JwtFor(const std::string& kind, int n);

  struct Code {
    std::string challenge, redirect_uri;
    bool used = false;
  };
  struct Device {
    std::string device_auth_id, user_code, verifier;
    bool approved = false, delivered = false;
  };

  const bool jwt_;
  std::mutex mu_;
  int counter_ = 0;
  int refreshes_ = 0;
  int logins_ = 0;
  bool revoked_ = false;
  bool strict_pkce_ = false;
  bool auto_approve_ = false;
  int64_t expires_in_ = 3600;
  std::map<std::string, Code> codes_;
  std::vector<Device> devices_;
  std::string access_, refresh_, id_;
  std::vector<std::string> issued_;
};

}  // namespace cloister::oauth::testing

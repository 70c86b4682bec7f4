// Test support: a fake OAuth provider (token endpoint with single-use rotating refresh tokens,
// and an API that accepts only the current access token), served by proxy::testing::FakeUpstream
// on 127.0.0.1 and reached through the proxy's resolve override. Plays platform.claude.com +
// api.anthropic.com (Claude) or auth.openai.com + chatgpt.com (ChatGPT: JWT tokens). Never used
// by the product.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "proxy/fake_upstream.h"

namespace cloister::oauth::testing {

class FakeProvider {
 public:
  // `jwt`: mint JWT access and id tokens (ChatGPT) instead of sk-ant-oat01-/sk-ant-ort01- ones.
  explicit FakeProvider(bool jwt);

  // The handler to give FakeUpstream::Start. Paths:
  //   POST .../oauth/token  grant_type=refresh_token: the current refresh token -> 200 with a new
  //       access token, a new refresh token and expires_in; any other (a reused, retired one) ->
  //       400 invalid_grant AND the login is revoked (every later refresh fails), as providers
  //       do on refresh token reuse. grant_type=authorization_code -> 200 with fresh tokens.
  //   anything else: 200 {"ok":true} when `Authorization: Bearer <current access token>`, else
  //       401.
  proxy::testing::Handler handler();

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

  const bool jwt_;
  std::mutex mu_;
  int counter_ = 0;
  int refreshes_ = 0;
  bool revoked_ = false;
  std::string access_, refresh_, id_;
  std::vector<std::string> issued_;
};

}  // namespace cloister::oauth::testing

// Fuzzes what the oauth filter parses of guest bytes: the body of a request to a provider's token
// endpoint (JSON or urlencoded form), through ParseTokenRequest, SwapRefreshToken and the filter's
// own body transform with a login in custody (so a body carrying its refresh placeholder reaches
// the refresh path), the token response parsers on the same bytes, and login capture: the
// provider's answer to a login (LoginFromTokenResponse for both kinds, and CaptureLogin through
// the filter for an authorization code exchange), the deep scan of every token host answer
// (FindForeignToken, token_scan.h) and the API path checks (CheckApiPath, api_paths.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "oauth/custody.h"
#include "oauth/login_response.h"
#include "oauth/oauth_filter.h"
#include "oauth/api_paths.h"
#include "oauth/token_body.h"
#include "oauth/token_scan.h"

using namespace cloister;
using namespace cloister::oauth;

namespace {

std::shared_ptr<LoginCustody> MakeLogin() {
  vault::OauthLogin login;
  login.refresh_token = "sk-ant-ort01-REALREFRESHxxxxxxxxxxxxxxxx";
  login.scopes = {"user:inference"};
  auto c = vault::MakeOauthCredential(vault::CredentialKind::kClaudeSubscription,
                                      "sk-ant-oat01-REALACCESSxxxxxxxxxxxxxxxxx", login, {});
  vault::BoundCredential b;
  b.credential = *c;
  b.placeholder = "sk-ant-oat01-CLOISTERaccessPH";
  b.refresh_placeholder = "sk-ant-ort01-CLOISTERrefreshPH";
  auto ok = [](const vault::Credential&) { return OkStatus(); };
  return std::make_shared<LoginCustody>(b, ok, nullptr, nullptr, ok);
}

// A ChatGPT capture slot (no login yet), saving to nowhere.
std::shared_ptr<LoginCustody> MakeSlot() {
  vault::BoundCredential b;
  b.credential.kind = vault::CredentialKind::kChatgptSubscription;
  b.credential.id = "chatgpt-subscription";
  b.credential.hosts = {"chatgpt.com"};
  b.credential.oauth.token_hosts = {"auth.openai.com"};
  b.placeholder = "e30.e30.CLOISTERaccesssignature0123456789";
  b.id_token_placeholder = "e30.e30.CLOISTERidsignature0123456789";
  b.refresh_placeholder = "rt_CLOISTERrefreshPH0123456789";
  auto ok = [](const vault::Credential&) { return OkStatus(); };
  return std::make_shared<LoginCustody>(b, ok, nullptr, nullptr, ok);
}

void ThroughFilter(OauthFilter& filter, const char* host, const char* target, std::string_view in) {
  proxy::RequestHead head;
  head.method = "POST";
  head.target = target;
  head.host = host;
  head.headers = {{"Content-Type", "application/json"}};
  auto v = filter.OnRequestHead(head);
  if (v.ok() && (v->body || v->response)) {
    if (v->body) {
      auto d = v->body->Data(in);
      if (d.ok()) (void)v->body->End();
    }
    if (v->response) {
      proxy::ResponseHead rh;
      rh.status = 200;
      auto hold = v->response->OnHead(rh);
      if (hold.ok()) (void)v->response->OnBody(rh, std::string(in));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::shared_ptr<LoginCustody> login = MakeLogin();
  static std::shared_ptr<LoginCustody> slot = MakeSlot();
  static OauthFilter filter({login, slot});
  std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)ParseTokenRequest(in);
  (void)SwapRefreshToken(in, "REAL");
  (void)ParseTokenResponse(in);
  (void)RewriteTokenResponse(in, "A", "R", "");
  (void)FindForeignToken(in, [](std::string_view t) { return t.size() % 2 == 0; });
  (void)CheckApiPath(vault::CredentialKind::kClaudeSubscription, {"/a/*"}, in);
  (void)ParseAllowedPath(vault::CredentialKind::kClaudeSubscription, in);

  (void)LoginFromTokenResponse(vault::CredentialKind::kClaudeSubscription, in, 1800000000000);
  (void)LoginFromTokenResponse(vault::CredentialKind::kChatgptSubscription, in, 1800000000000);
  ThroughFilter(filter, "platform.claude.com", "/v1/oauth/token", in);
  ThroughFilter(filter, "auth.openai.com", "/oauth/token", in);
  ThroughFilter(filter, "auth.openai.com", "/page", in);  // a token host's other answers
  return 0;
}

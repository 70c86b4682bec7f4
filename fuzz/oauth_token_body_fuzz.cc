// Fuzzes what the oauth filter parses of guest bytes: the body of a request to a provider's token
// endpoint (JSON or urlencoded form), through ParseTokenRequest, SwapRefreshToken and the filter's
// own body transform with a login in custody (so a body carrying its refresh placeholder reaches
// the refresh path), and the token response parsers on the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "oauth/custody.h"
#include "oauth/oauth_filter.h"
#include "oauth/token_body.h"

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
  return std::make_shared<LoginCustody>(b, [](const vault::Credential&) { return OkStatus(); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::shared_ptr<LoginCustody> login = MakeLogin();
  static OauthFilter filter({login});
  std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)ParseTokenRequest(in);
  (void)SwapRefreshToken(in, "REAL");
  (void)ParseTokenResponse(in);
  (void)RewriteTokenResponse(in, "A", "R", "");

  proxy::RequestHead head;
  head.method = "POST";
  head.target = "/v1/oauth/token";
  head.host = "platform.claude.com";
  head.headers = {{"Content-Type", "application/json"}};
  auto v = filter.OnRequestHead(head);
  if (v.ok() && v->body) {
    auto d = v->body->Data(in);
    if (d.ok()) (void)v->body->End();
    if (v->response) {
      proxy::ResponseHead rh;
      rh.status = 200;
      auto hold = v->response->OnHead(rh);
      if (hold.ok()) (void)v->response->OnBody(rh, std::string(in));
    }
  }
  return 0;
}

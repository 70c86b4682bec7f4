#include "oauth/fake_provider.h"

#include <nlohmann/json.hpp>

#include "oauth/token_body.h"
#include "vault/crypto.h"

namespace cloister::oauth::testing {

FakeProvider::FakeProvider(bool jwt) : jwt_(jwt) {
  access_ = MintAccess();
  refresh_ = MintRefresh();
  if (jwt_) id_ = MintId();
}

std::string FakeProvider::JwtFor(const std::string& kind, int n) {
  nlohmann::json header = {{"alg", "RS256"}, {"typ", "JWT"}, {"kid", "fake-key-1"}};
  nlohmann::json payload = {
      {"exp", 1900000000 + n}, {"iat", 1800000000 + n}, {"iss", "https://auth.openai.com"},
      {"aud", "app_EMoamEEZ73f0CkXaXp7hrann"}, {"sub", "user-fake"}, {"email", "dev@example.test"},
      {"jti", "SECRETJTI" + kind + std::to_string(n)},
      {"https://api.openai.com/auth",
       {{"chatgpt_plan_type", "pro"}, {"chatgpt_account_id", "acct-fake-1"},
        {"chatgpt_user_id", "user-fake"}, {"session_secret", "SECRETSESSION" + std::to_string(n)}}}};
  std::string sig;
  for (int i = 0; i < 256; ++i) sig += static_cast<char>((i * 7 + n * 13 + kind.size()) & 0xff);
  return vault::Base64Encode(header.dump(), true, false) + "." +
         vault::Base64Encode(payload.dump(), true, false) + "." +
         vault::Base64Encode(sig, true, false);
}

std::string FakeProvider::MintAccess() {
  int n = ++counter_;
  std::string t = jwt_ ? JwtFor("access", n)
                       : "sk-ant-oat01-REALACCESS" + std::to_string(1000 + n) +
                             std::string(80, 'a' + n % 26) + "AA";
  issued_.push_back(t);
  return t;
}

std::string FakeProvider::MintRefresh() {
  int n = ++counter_;
  std::string t = jwt_ ? "rt_REALREFRESH" + std::to_string(1000 + n) + std::string(40, 'A' + n % 26)
                       : "sk-ant-ort01-REALREFRESH" + std::to_string(1000 + n) +
                             std::string(80, 'b' + n % 20) + "AA";
  issued_.push_back(t);
  return t;
}

std::string FakeProvider::MintId() {
  std::string t = JwtFor("id", ++counter_);
  issued_.push_back(t);
  return t;
}

proxy::testing::Handler FakeProvider::handler() {
  return [this](const proxy::testing::SeenRequest& req, proxy::testing::ResponseWriter& w) {
    std::map<std::string, std::string> json = {{"Content-Type", "application/json"}};
    std::string path = req.target.substr(0, req.target.find('?'));
    std::lock_guard<std::mutex> l(mu_);
    if (req.method == "POST" && path.size() >= 12 &&
        path.compare(path.size() - 12, 12, "/oauth/token") == 0) {
      auto r = ParseTokenRequest(req.body);
      if (!r.ok()) {
        w.Send(400, json, R"({"error":"invalid_request"})");
        return;
      }
      if (r->grant_type == "refresh_token") {
        if (revoked_ || r->refresh_token != refresh_) {
          revoked_ = true;  // reuse of a retired token: the whole login dies
          w.Send(400, json, R"({"error":"invalid_grant","error_description":"refresh token reused"})");
          return;
        }
        ++refreshes_;
      } else if (r->grant_type != "authorization_code") {
        w.Send(400, json, R"({"error":"unsupported_grant_type"})");
        return;
      }
      access_ = MintAccess();
      refresh_ = MintRefresh();
      nlohmann::json out = {{"access_token", access_}, {"refresh_token", refresh_},
                            {"expires_in", 3600}, {"token_type", "Bearer"},
                            {"scope", jwt_ ? "openid profile email offline_access"
                                           : "user:inference user:profile"}};
      if (jwt_) {
        id_ = MintId();
        out["id_token"] = id_;
      }
      w.Send(200, json, out.dump());
      return;
    }
    if (req.Header("authorization") == "Bearer " + access_) {
      w.Send(200, json, R"({"ok":true})");
    } else {
      w.Send(401, json, R"({"error":"invalid access token"})");
    }
  };
}

std::string FakeProvider::access() { std::lock_guard<std::mutex> l(mu_); return access_; }
std::string FakeProvider::refresh() { std::lock_guard<std::mutex> l(mu_); return refresh_; }
std::string FakeProvider::id_token() { std::lock_guard<std::mutex> l(mu_); return id_; }
int FakeProvider::refreshes() { std::lock_guard<std::mutex> l(mu_); return refreshes_; }
bool FakeProvider::revoked() { std::lock_guard<std::mutex> l(mu_); return revoked_; }
std::vector<std::string> FakeProvider::issued() {
  std::lock_guard<std::mutex> l(mu_);
  return issued_;
}

}  // namespace cloister::oauth::testing

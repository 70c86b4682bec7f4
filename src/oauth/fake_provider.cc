#include "oauth/fake_provider.h"

#include <openssl/sha.h>

#include <nlohmann/json.hpp>

#include "oauth/token_body.h"
#include "vault/crypto.h"

namespace cloister::oauth::testing {
namespace {

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out += static_cast<char>(Hex(s[i + 1]) * 16 + Hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The string fields of a JSON object body, or of a form / query string.
std::map<std::string, std::string> Fields(std::string_view body) {
  std::map<std::string, std::string> out;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
    }
    return out;
  }
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t amp = body.find('&', pos);
    std::string_view pair = body.substr(pos, amp == std::string_view::npos ? amp : amp - pos);
    size_t eq = pair.find('=');
    if (!pair.empty()) {
      out[Unescape(pair.substr(0, eq))] =
          eq == std::string_view::npos ? "" : Unescape(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    pos = amp + 1;
  }
  return out;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string FakeProvider::S256(const std::string& verifier) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(verifier.data()), verifier.size(), d);
  return vault::Base64Encode(std::string_view(reinterpret_cast<const char*>(d), sizeof d), true,
                             false);
}

std::string FakeProvider::Authorize(const std::string& code_challenge,
                                    const std::string& redirect_uri) {
  std::lock_guard<std::mutex> l(mu_);
  std::string code = "authcode-" + std::to_string(++counter_) + "-fake";
  codes_[code] = Code{code_challenge, redirect_uri, false};
  return code;
}

bool FakeProvider::ApproveDevice(const std::string& user_code) {
  std::lock_guard<std::mutex> l(mu_);
  for (Device& d : devices_) {
    if (d.user_code == user_code) {
      d.approved = true;
      return true;
    }
  }
  return false;
}

void FakeProvider::set_auto_approve(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  auto_approve_ = on;
}

void FakeProvider::set_strict_pkce(bool strict) {
  std::lock_guard<std::mutex> l(mu_);
  strict_pkce_ = strict;
}

void FakeProvider::set_expires_in(int64_t seconds) {
  std::lock_guard<std::mutex> l(mu_);
  expires_in_ = seconds;
}

int FakeProvider::logins() {
  std::lock_guard<std::mutex> l(mu_);
  return logins_;
}

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
                             std::string(79, 'a' + n % 26) + "AA";  // 108 characters, as real ones
  issued_.push_back(t);
  return t;
}

std::string FakeProvider::MintRefresh() {
  int n = ++counter_;
  std::string t = jwt_ ? "rt_REALREFRESH" + std::to_string(1000 + n) + std::string(40, 'A' + n % 26)
                       : "sk-ant-ort01-REALREFRESH" + std::to_string(1000 + n) +
                             std::string(78, 'b' + n % 20) + "AA";
  issued_.push_back(t);
  return t;
}

std::string FakeProvider::MintId() {
  std::string t = JwtFor("id", ++counter_);
  issued_.push_back(t);
  return t;
}

std::pair<int, std::string> FakeProvider::Exchange(const std::string& body) {
  std::lock_guard<std::mutex> l(mu_);
  auto r = ParseTokenRequest(body);
  if (!r.ok()) {
    return {400, R"({"error":"invalid_request"})"};
  }
  if (r->grant_type == "refresh_token") {
    if (revoked_ || r->refresh_token != refresh_) {
      revoked_ = true;  // reuse of a retired token: the whole login dies
      return {400, R"({"error":"invalid_grant","error_description":"refresh token reused"})"};
    }
    ++refreshes_;
  } else if (r->grant_type == "authorization_code") {
    auto f = Fields(body);
    auto it = codes_.find(f["code"]);
    if (it == codes_.end() ? strict_pkce_
                           : it->second.used || it->second.redirect_uri != f["redirect_uri"] ||
                                 S256(f["code_verifier"]) != it->second.challenge) {
      return {400, R"({"error":"invalid_grant","error_description":"bad code or PKCE"})"};
    }
    if (it != codes_.end()) it->second.used = true;
    ++logins_;
    revoked_ = false;
  } else {
    return {400, R"({"error":"unsupported_grant_type"})"};
  }
  access_ = MintAccess();
  refresh_ = MintRefresh();
  nlohmann::json out = {{"access_token", access_}, {"refresh_token", refresh_},
                        {"expires_in", expires_in_}, {"token_type", "Bearer"},
                        {"scope", jwt_ ? "openid profile email offline_access"
                                       : "user:inference user:profile"}};
  if (jwt_) {
    id_ = MintId();
    out["id_token"] = id_;
  } else {
    out["account"] = {{"uuid", "acct-uuid-fake"}, {"email_address", "dev@example.test"}};
    out["organization"] = {{"uuid", "org-uuid-fake"}};
  }
  return {200, out.dump()};
}

proxy::testing::Handler FakeProvider::handler() {
  return [this](const proxy::testing::SeenRequest& req, proxy::testing::ResponseWriter& w) {
    std::map<std::string, std::string> json = {{"Content-Type", "application/json"}};
    std::string path = req.target.substr(0, req.target.find('?'));
    std::string query =
        req.target.find('?') == std::string::npos ? "" : req.target.substr(req.target.find('?') + 1);
    if (req.method == "POST" && EndsWith(path, "/oauth/token")) {
      auto [status, answer] = Exchange(req.body);
      w.Send(status, json, answer);
      return;
    }
    std::lock_guard<std::mutex> l(mu_);
    if (req.method == "GET" && EndsWith(path, "/oauth/authorize")) {
      auto q = Fields(query);
      if (q["code_challenge_method"] != "S256" || q["code_challenge"].empty() ||
          q["redirect_uri"].empty()) {
        w.Send(400, json, R"({"error":"invalid_request"})");
        return;
      }
      std::string code = "authcode-" + std::to_string(++counter_) + "-fake";
      codes_[code] = Code{q["code_challenge"], q["redirect_uri"], false};
      w.Send(302, {{"Location", q["redirect_uri"] + "?code=" + code + "&state=" + q["state"]}}, "");
      return;
    }
    if (req.method == "POST" && EndsWith(path, "/deviceauth/usercode")) {
      Device d;
      int n = ++counter_;
      d.device_auth_id = "deviceauth-" + std::to_string(n);
      d.user_code = "FAKE-" + std::to_string(1000 + n);
      d.verifier = "device-verifier-" + std::to_string(n) + std::string(40, 'v');
      d.approved = auto_approve_;
      devices_.push_back(d);
      w.Send(200, json, nlohmann::json({{"device_auth_id", d.device_auth_id},
                                        {"user_code", d.user_code},
                                        {"interval", "1"}}).dump());
      return;
    }
    if (req.method == "POST" && EndsWith(path, "/deviceauth/token")) {
      auto f = Fields(req.body);
      for (Device& d : devices_) {
        if (d.device_auth_id != f["device_auth_id"] || d.user_code != f["user_code"]) continue;
        if (!d.approved || d.delivered) break;
        d.delivered = true;
        std::string code = "authcode-" + std::to_string(++counter_) + "-device";
        codes_[code] = Code{S256(d.verifier), "https://auth.openai.com/deviceauth/callback", false};
        w.Send(200, json, nlohmann::json({{"authorization_code", code},
                                          {"code_challenge", S256(d.verifier)},
                                          {"code_verifier", d.verifier}}).dump());
        return;
      }
      w.Send(403, json, R"({"error":"authorization_pending"})");
      return;
    }
    if (req.method == "GET" && EndsWith(path, "/api/oauth/profile")) {
      if (req.Header("authorization") != "Bearer " + access_) {
        w.Send(401, json, R"({"error":"invalid access token"})");
        return;
      }
      w.Send(200, json, R"({"account":{"uuid":"acct-uuid-fake","email":"dev@example.test",)"
                        R"("display_name":"Dev","created_at":"2025-01-01T00:00:00Z"},)"
                        R"("organization":{"uuid":"org-uuid-fake","organization_type":"claude_max",)"
                        R"("rate_limit_tier":"default_claude_max_20x","billing_type":"stripe"}})");
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

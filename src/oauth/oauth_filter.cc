#include "oauth/oauth_filter.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "vault/credential.h"
#include "vault/crypto.h"

namespace cloister::oauth {
namespace {

// What the request and response sides of one token endpoint call share.
struct TokenCall {
  std::shared_ptr<LoginCustody> login;  // set once a refresh of this login began
  bool finished = false;                // CompleteRefresh or AbortRefresh ran
  // A login in the guest (authorization code exchange) toward this custody's token hosts: its
  // 200 answer is captured (LoginCustody::CaptureLogin).
  std::shared_ptr<LoginCustody> capture;
};

std::string PathOf(const std::string& target) {
  size_t q = target.find('?');
  return q == std::string::npos ? target : target.substr(0, q);
}

bool IsTokenEndpoint(const proxy::RequestHead& head) {
  return head.method == "POST" && EndsWith(PathOf(head.target), "/oauth/token");
}

// SECURITY: the body is guest bytes (bounded by the proxy's hold, then by kMaxTokenBody).
class TokenBodyTransform : public proxy::BodyTransform {
 public:
  TokenBodyTransform(std::vector<std::shared_ptr<LoginCustody>> logins, std::string host,
                     std::shared_ptr<TokenCall> call)
      : logins_(std::move(logins)), host_(std::move(host)), call_(std::move(call)) {}
  ~TokenBodyTransform() override { vault::SecureWipe(buf_); }

  Result<std::string> Data(std::string_view in) override {
    if (buf_.size() + in.size() > kMaxTokenBody) {
      return Error(ErrorCode::kInvalidArgument, "token request body too large");
    }
    buf_.append(in);
    return std::string();
  }

  Result<std::string> End() override {
    auto req = ParseTokenRequest(buf_);
    if (!req.ok()) return req.error();
    if (req->grant_type == "authorization_code") {
      // A login typed in the guest (Claude's pasted code, Codex's device code): the guest's
      // request goes as it is; its answer is taken into the custody of this host's kind.
      for (const auto& login : logins_) {
        if (vault::HostInAnyScope(host_, login->token_hosts())) {
          call_->capture = login;
          break;
        }
      }
      return std::move(buf_);
    }
    if (req->grant_type != "refresh_token" || req->refresh_token.empty()) return std::move(buf_);
    for (const auto& login : logins_) {
      if (!login->IsRefreshPlaceholder(req->refresh_token)) continue;
      if (!vault::HostInAnyScope(host_, login->token_hosts())) {
        // Unreachable through the proxy (the detector trips first); kept as a second lock.
        return Error(ErrorCode::kPermissionDenied, "refresh placeholder sent to a foreign host");
      }
      ASSIGN_OR_RETURN(std::string real, login->BeginRefresh());
      call_->login = login;
      auto swapped = SwapRefreshToken(buf_, real);
      vault::SecureWipe(real);
      if (!swapped.ok()) {
        login->AbortRefresh(0);
        call_->finished = true;
        return swapped.error();
      }
      return std::move(swapped).value();
    }
    return std::move(buf_);  // not one of ours: the response guard decides
  }

 private:
  std::vector<std::shared_ptr<LoginCustody>> logins_;
  std::string host_;
  std::shared_ptr<TokenCall> call_;
  std::string buf_;
};

bool CarriesTokens(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    // Not JSON: look for the field names anyway (a form-encoded answer).
    return body.find("access_token") != std::string_view::npos ||
           body.find("refresh_token") != std::string_view::npos ||
           body.find("id_token") != std::string_view::npos;
  }
  bool found = false;
  for (const char* k : {"access_token", "refresh_token", "id_token"}) {
    found |= j.contains(k) && j[k].is_string() && !j[k].get<std::string>().empty();
  }
  j.clear();
  return found;
}

class TokenResponseTransform : public proxy::ResponseTransform {
 public:
  explicit TokenResponseTransform(std::shared_ptr<TokenCall> call) : call_(std::move(call)) {}
  ~TokenResponseTransform() override {
    if (call_->login && !call_->finished) call_->login->AbortRefresh(0);
  }

  Result<proxy::ResponseHold> OnHead(proxy::ResponseHead& head) override {
    if (call_->login && !call_->finished && head.status != 200) {
      call_->login->AbortRefresh(head.status);
      call_->finished = true;
    }
    // Everything else is held: a refresh's 200 to take into custody, and any other token
    // endpoint answer to check that it carries no token.
    return proxy::ResponseHold{true, kMaxTokenResponse};
  }

  Result<std::string> OnBody(proxy::ResponseHead& head, std::string body) override {
    if (call_->login && !call_->finished) {
      call_->finished = true;
      auto out = call_->login->CompleteRefresh(body);
      vault::SecureWipe(body);
      return out;
    }
    if (call_->capture && head.status == 200) {
      // SECURITY: saved to the vault before the guest gets the answer, with placeholders only;
      // an answer that cannot be parsed or saved is an error (502): nothing real is forwarded.
      auto out = call_->capture->CaptureLogin(body);
      vault::SecureWipe(body);
      if (!out.ok()) {
        return Error(ErrorCode::kPermissionDenied,
                     "cloister: the login could not be taken into custody: " +
                         out.error().message() + " (" + out.error().hint() + ")");
      }
      return out;
    }
    if (CarriesTokens(body)) {
      vault::SecureWipe(body);
      // The message is what the guest sees (the proxy answers 502 with it): it carries the fix.
      return Error(ErrorCode::kPermissionDenied,
                   "cloister: this token endpoint answer would put real tokens in the workspace; "
                   "refused. Log in on the host and take the login into custody with `cloister "
                   "cred import WORKSPACE claude|codex`");
    }
    return body;
  }

 private:
  std::shared_ptr<TokenCall> call_;
};

}  // namespace

const std::vector<std::string>& ProviderTokenHosts() {
  static const std::vector<std::string> hosts = [] {
    std::vector<std::string> h = vault::DefaultTokenHosts(vault::CredentialKind::kClaudeSubscription);
    for (const std::string& x : vault::DefaultTokenHosts(vault::CredentialKind::kChatgptSubscription)) {
      h.push_back(x);
    }
    return h;
  }();
  return hosts;
}

OauthFilter::OauthFilter(std::vector<std::shared_ptr<LoginCustody>> logins)
    : logins_(std::move(logins)), token_hosts_(ProviderTokenHosts()) {
  for (const auto& l : logins_) {
    for (const std::string& h : l->token_hosts()) {
      if (std::find(token_hosts_.begin(), token_hosts_.end(), h) == token_hosts_.end()) {
        token_hosts_.push_back(h);
      }
    }
  }
}

Result<proxy::ExtensionVerdict> OauthFilter::OnRequestHead(proxy::RequestHead& head) {
  proxy::ExtensionVerdict v;
  if (vault::HostInAnyScope(head.host, token_hosts_) && IsTokenEndpoint(head)) {
    auto call = std::make_shared<TokenCall>();
    v.handled = true;
    v.need_full_body = true;
    v.max_body = kMaxTokenBody;
    v.body = std::make_unique<TokenBodyTransform>(logins_, head.host, call);
    v.response = std::make_unique<TokenResponseTransform>(call);
    return v;
  }
  for (auto& [name, value] : head.headers) {
    if (ToLower(name) != "authorization") continue;
    std::string_view val = value;
    if (val.size() < 8 || ToLower(val.substr(0, 7)) != "bearer ") continue;
    std::string token = Trim(val.substr(7));
    for (const auto& login : logins_) {
      if (!login->IsAccessPlaceholder(token)) continue;
      if (!vault::HostInAnyScope(head.host, login->api_hosts())) continue;  // the detector's
      std::string real = login->AccessToken();
      if (real.empty()) continue;  // a capture slot before its login: the API refuses the placeholder
      vault::SecureWipe(value);
      value = "Bearer " + real;
      vault::SecureWipe(real);
      v.handled = true;
      break;
    }
  }
  return v;
}

Status OauthFilter::OnFullBody(proxy::RequestHead&, std::string_view) { return OkStatus(); }

}  // namespace cloister::oauth

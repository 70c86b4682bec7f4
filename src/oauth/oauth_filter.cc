#include "oauth/oauth_filter.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "oauth/token_scan.h"
#include "vault/credential.h"
#include "vault/crypto.h"

namespace cloister::oauth {
namespace {

// What the request and response sides of one call to a token host share.
struct TokenCall {
  bool token_endpoint = false;          // a POST to .../token (its body is parsed)
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
  return head.method == "POST" && EndsWith(PathOf(head.target), "/token");
}

bool AsksForMintingScope(std::string_view scope) {
  for (const std::string& s : Split(scope, ' ')) {
    if (IsMintingScope(s)) return true;
  }
  return false;
}

// SECURITY: the body is guest bytes (bounded by the proxy's hold, then by kMaxTokenBody).
class TokenBodyTransform : public proxy::BodyTransform {
 public:
  TokenBodyTransform(std::vector<std::shared_ptr<LoginCustody>> logins, std::string host,
                     std::shared_ptr<TokenCall> call)
      : logins_(std::move(logins)), host_(std::move(host)), call_(std::move(call)) {}
  ~TokenBodyTransform() override {
    vault::SecureWipe(buf_);
    for (auto& s : swapped_) vault::SecureWipe(s.real);
  }

  Result<std::string> Data(std::string_view in) override {
    if (buf_.size() + in.size() > kMaxTokenBody) {
      return Error(ErrorCode::kInvalidArgument, "token request body too large");
    }
    buf_.append(in);
    return std::string();
  }

  Result<std::string> End() override {
    // A field given twice is refused here (token_body.h).
    auto req = ParseTokenRequest(buf_);
    if (!req.ok()) return req.error();
    if (!req->requested_token.empty() || req->grant_type.find("token-exchange") != std::string::npos) {
      // SECURITY: Codex 0.171.0 exchanges its id token for an API key here
      // (grant_type=urn:ietf:params:oauth:grant-type:token-exchange, requested_token=
      // openai-api-key): a credential that works from anywhere. Never from the workspace.
      return Error(ErrorCode::kPermissionDenied,
                   "cloister: a token exchange mints a credential from the login; refused");
    }
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
      if (AsksForMintingScope(req->scope)) {
        // SECURITY: the scope a refresh asks for can only narrow the login's; never back to one
        // that mints credentials (api_paths.h).
        return Error(ErrorCode::kPermissionDenied,
                     "cloister: this refresh asks for a scope that mints credentials "
                     "(org:create_api_key); refused");
      }
      ASSIGN_OR_RETURN(std::string real, login->BeginRefresh());
      call_->login = login;
      auto swapped = SwapRefreshToken(buf_, real);
      if (!swapped.ok()) {
        vault::SecureWipe(real);
        login->AbortRefresh(0);
        call_->finished = true;
        return swapped.error();
      }
      swapped_.push_back({login->id() + ":refresh", std::move(real), req->refresh_token});
      return std::move(swapped).value();
    }
    return std::move(buf_);  // not one of ours: the response scan decides
  }

  std::vector<proxy::SwappedValue> TakeSwapped() override { return std::move(swapped_); }

 private:
  std::vector<std::shared_ptr<LoginCustody>> logins_;
  std::string host_;
  std::shared_ptr<TokenCall> call_;
  std::string buf_;
  std::vector<proxy::SwappedValue> swapped_;
};

class TokenResponseTransform : public proxy::ResponseTransform {
 public:
  TokenResponseTransform(std::shared_ptr<TokenCall> call,
                         std::function<bool(std::string_view)> is_placeholder)
      : call_(std::move(call)), is_placeholder_(std::move(is_placeholder)) {}
  ~TokenResponseTransform() override {
    if (call_->login && !call_->finished) call_->login->AbortRefresh(0);
  }

  Result<proxy::ResponseHold> OnHead(proxy::ResponseHead& head) override {
    if (call_->login && !call_->finished && head.status != 200) {
      call_->login->AbortRefresh(head.status);
      call_->finished = true;
    }
    // Everything a token host answers is held: a refresh's 200 to take into custody, and every
    // other answer to check that it carries no token.
    return proxy::ResponseHold{true, call_->token_endpoint ? kMaxTokenResponse : kMaxTokenHostResponse};
  }

  Result<std::string> OnBody(proxy::ResponseHead& head, std::string body) override {
    std::string out;
    if (call_->login && !call_->finished) {
      call_->finished = true;
      auto done = call_->login->CompleteRefresh(body);
      vault::SecureWipe(body);
      if (!done.ok()) return done.error();
      out = std::move(done).value();
    } else if (call_->capture && head.status == 200) {
      // SECURITY: saved to the vault before the guest gets the answer, with placeholders only;
      // an answer that cannot be parsed or saved is an error (502): nothing real is forwarded.
      auto done = call_->capture->CaptureLogin(body);
      vault::SecureWipe(body);
      if (!done.ok()) {
        return Error(ErrorCode::kPermissionDenied,
                     "cloister: the login could not be taken into custody: " +
                         done.error().message() + " (" + done.error().hint() + ")");
      }
      out = std::move(done).value();
    } else {
      out = std::move(body);
    }
    // SECURITY: whatever the answer is, no real token in it reaches the guest: every field, every
    // depth, every endpoint of a token host (token_scan.h).
    if (auto found = FindForeignToken(out, is_placeholder_)) {
      vault::SecureWipe(out);
      // The message is what the guest sees (the proxy answers 502 with it): it carries the fix.
      return Error(ErrorCode::kPermissionDenied,
                   "cloister: this answer of a token host carries a token (" + *found +
                       ") and would put it in the workspace; refused. Log in on the host and take "
                       "the login into custody with `cloister cred import WORKSPACE claude|codex`");
    }
    return out;
  }

 private:
  std::shared_ptr<TokenCall> call_;
  std::function<bool(std::string_view)> is_placeholder_;
};

std::string RefusedPath(const std::string& workspace, const LoginCustody& login,
                        const proxy::RequestHead& head, PathVerdict verdict) {
  std::string what = head.method + " " + head.host + PathOf(head.target).substr(0, 200);
  if (verdict == PathVerdict::kMinting) {
    return "cloister: " + login.id() + " is not used for " + what +
           ": it mints a credential from the login (an API key that works from anywhere); never "
           "allowed";
  }
  if (verdict == PathVerdict::kMalformed) {
    return "cloister: " + login.id() + " is not used for " + what +
           ": only a plain path (no escapes, no '.' or '..' segments) can be allowed";
  }
  return "cloister: " + login.id() + " is not used for " + what +
         " (not a path its client needs for inference or its login); allow it on the host with "
         "`cloister cred policy " + workspace + " " + login.id() + " --allow-path " +
         PathOf(head.target).substr(0, 200) + "`";
}

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

OauthFilter::OauthFilter(std::vector<std::shared_ptr<LoginCustody>> logins, std::string workspace)
    : logins_(std::move(logins)), token_hosts_(ProviderTokenHosts()),
      workspace_(workspace.empty() ? "WORKSPACE" : std::move(workspace)) {
  for (const auto& l : logins_) {
    for (const std::string& h : l->token_hosts()) {
      if (std::find(token_hosts_.begin(), token_hosts_.end(), h) == token_hosts_.end()) {
        token_hosts_.push_back(h);
      }
    }
  }
}

bool OauthFilter::IsPlaceholder(std::string_view token) const {
  for (const auto& l : logins_) {
    if (l->IsPlaceholder(token)) return true;
  }
  return false;
}

OauthFilter::ApiUse OauthFilter::MatchApi(const proxy::RequestHead& head) const {
  for (const auto& [name, value] : head.headers) {
    if (ToLower(name) != "authorization") continue;
    std::string_view val = value;
    if (val.size() < 8 || ToLower(val.substr(0, 7)) != "bearer ") continue;
    std::string token = Trim(val.substr(7));
    for (const auto& login : logins_) {
      if (!login->IsAccessPlaceholder(token)) continue;
      if (!vault::HostInAnyScope(head.host, login->api_hosts())) continue;  // the detector's
      return {login, CheckApiPath(login->kind(), login->allow_paths(), head.target)};
    }
  }
  return {};
}

std::vector<std::string> OauthFilter::WouldSwap(const proxy::RequestHead& head) const {
  ApiUse use = MatchApi(head);
  if (use.login && use.path == PathVerdict::kAllowed) return {use.login->id()};
  return {};
}

Result<proxy::ExtensionVerdict> OauthFilter::OnRequestHead(proxy::RequestHead& head) {
  proxy::ExtensionVerdict v;
  if (vault::HostInAnyScope(head.host, token_hosts_)) {
    auto call = std::make_shared<TokenCall>();
    call->token_endpoint = IsTokenEndpoint(head);
    v.handled = true;
    if (call->token_endpoint) {
      v.need_full_body = true;
      v.max_body = kMaxTokenBody;
      v.body = std::make_unique<TokenBodyTransform>(logins_, head.host, call);
    }
    v.response = std::make_unique<TokenResponseTransform>(
        call, [this](std::string_view t) { return IsPlaceholder(t); });
    return v;
  }
  ApiUse use = MatchApi(head);
  if (!use.login) return v;
  if (use.path != PathVerdict::kAllowed) {
    // SECURITY: the login opens nothing beyond what its client needs (api_paths.h); the refusal
    // is the proxy's 403, recorded in the trace with this message.
    return Error(ErrorCode::kPermissionDenied, RefusedPath(workspace_, *use.login, head, use.path));
  }
  std::string real = use.login->AccessToken();
  if (real.empty()) return v;  // a capture slot before its login: the API refuses the placeholder
  for (auto& [name, value] : head.headers) {
    if (ToLower(name) != "authorization") continue;
    std::string_view val = value;
    if (val.size() < 8 || ToLower(val.substr(0, 7)) != "bearer ") continue;
    std::string token = Trim(val.substr(7));
    if (!use.login->IsAccessPlaceholder(token)) continue;
    vault::SecureWipe(value);
    value = "Bearer " + real;
    v.swapped.push_back({use.login->id(), real, token});
    v.handled = true;
  }
  vault::SecureWipe(real);
  return v;
}

Status OauthFilter::OnFullBody(proxy::RequestHead&, std::string_view) { return OkStatus(); }

}  // namespace cloister::oauth

#include "oauth/custody.h"

#include <chrono>

#include "base/strings.h"
#include "oauth/api_paths.h"
#include "oauth/login_response.h"
#include "vault/crypto.h"
#include "vault/placeholder.h"

namespace cloister::oauth {

int64_t SystemMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

std::string SigOf(vault::CredentialKind kind, const std::string& ph) {
  if (kind != vault::CredentialKind::kChatgptSubscription) return "";
  return std::string(vault::JwtSignature(ph));
}

void Wipe(vault::Credential& c) {
  vault::SecureWipe(c.value);
  vault::SecureWipe(c.oauth.refresh_token);
  vault::SecureWipe(c.oauth.id_token);
}

}  // namespace

const char* RefreshStateName(RefreshState s) {
  switch (s) {
    case RefreshState::kIdle: return "idle";
    case RefreshState::kInFlight: return "in-flight";
    case RefreshState::kUnsaved: return "unsaved";
  }
  return "?";
}

LoginCustody::LoginCustody(vault::BoundCredential bound, PersistFn persist, TraceFn trace,
                           Clock clock, PersistFn create)
    : kind_(bound.credential.kind),
      id_(bound.credential.id),
      api_hosts_(bound.credential.hosts),
      token_hosts_(bound.credential.oauth.token_hosts),
      allow_paths_(bound.credential.allow_paths),
      access_ph_(bound.placeholder),
      refresh_ph_(bound.refresh_placeholder),
      id_ph_(bound.id_token_placeholder),
      access_sig_(SigOf(bound.credential.kind, bound.placeholder)),
      id_sig_(SigOf(bound.credential.kind, bound.id_token_placeholder)),
      persist_(std::move(persist)),
      create_(std::move(create)),
      trace_(std::move(trace)),
      clock_(clock ? std::move(clock) : Clock(SystemMs)),
      login_(std::move(bound.credential)) {
  Wipe(bound.credential);
}

LoginCustody::~LoginCustody() { Wipe(login_); }

bool LoginCustody::IsAccessPlaceholder(std::string_view token) const {
  if (token.empty()) return false;
  if (kind_ == vault::CredentialKind::kChatgptSubscription) {
    return !access_sig_.empty() && vault::JwtSignature(token) == access_sig_;
  }
  return token == access_ph_;
}

bool LoginCustody::IsRefreshPlaceholder(std::string_view token) const {
  return !refresh_ph_.empty() && token == refresh_ph_;
}

bool LoginCustody::IsPlaceholder(std::string_view token) const {
  if (IsAccessPlaceholder(token) || IsRefreshPlaceholder(token)) return true;
  if (kind_ == vault::CredentialKind::kChatgptSubscription) {
    return !id_sig_.empty() && vault::JwtSignature(token) == id_sig_;
  }
  return !id_ph_.empty() && token == id_ph_;
}

Status LoginCustody::SaveLocked() {
  if (state_ != RefreshState::kUnsaved) return OkStatus();
  Status st = persist_ ? persist_(login_)
                       : Status(Error(ErrorCode::kFailedPrecondition, "no vault to save to"));
  if (st.ok()) state_ = RefreshState::kIdle;
  return st;
}

std::string LoginCustody::AccessToken() {
  std::lock_guard<std::mutex> lock(mu_);
  (void)SaveLocked();
  return login_.value;
}

Result<std::string> LoginCustody::BeginRefresh() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == RefreshState::kInFlight) {
    return Error(ErrorCode::kUnavailable, "a refresh of " + id_ + " is already in flight",
                 "retry in a moment (the refresh token is single use)");
  }
  if (Status st = SaveLocked(); !st.ok()) {
    return Error(ErrorCode::kUnavailable,
                 "the last refresh of " + id_ + " is not saved yet: " + st.error().message(),
                 "the login is kept in memory; fix the workspace's secrets file and retry");
  }
  if (login_.value.empty() || login_.oauth.refresh_token.empty()) {
    return Error(ErrorCode::kFailedPrecondition, "no " + id_ + " login to refresh",
                 "log in in the workspace, or `cloister cred import WORKSPACE claude|codex`");
  }
  // SECURITY (the refresh record): the intent is on disk before the single-use token leaves, so
  // a crash after the provider rotated it cannot lose the login silently. Fail closed.
  vault::Credential intent = login_;
  intent.oauth.refresh_started_at = clock_() / 1000;
  Status st = persist_ ? persist_(intent)
                       : Status(Error(ErrorCode::kFailedPrecondition, "no vault to save to"));
  Wipe(intent);
  if (!st.ok()) {
    return Error(ErrorCode::kUnavailable,
                 "cannot record the refresh of " + id_ + " in the vault: " + st.error().message(),
                 "the login is unchanged; fix the workspace's secrets file and retry");
  }
  login_.oauth.refresh_started_at = clock_() / 1000;
  state_ = RefreshState::kInFlight;
  return login_.oauth.refresh_token;
}

void LoginCustody::RecordFailureLocked(const std::string& error, bool maybe_retired) {
  std::string e = error.substr(0, 200);
  for (char& c : e) {
    if (c < 0x20 || c >= 0x7f) c = '?';
  }
  login_.oauth.refresh_error = e;
  login_.oauth.refresh_error_at = clock_() / 1000;
  // Refused by the provider: the token was not used up (or the login is dead either way).
  // No answer: the provider may have rotated it; the record keeps saying so.
  if (!maybe_retired) login_.oauth.refresh_started_at = 0;
  if (persist_) (void)persist_(login_);
}

void LoginCustody::AbortRefresh(int status) {
  std::string error = status == 0 ? "oauth refresh: no answer"
                                  : "oauth refresh: refused by the provider (HTTP " +
                                        std::to_string(status) + ")";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != RefreshState::kInFlight) return;
    state_ = RefreshState::kIdle;
    RecordFailureLocked(status == 0 ? "no answer from the provider (the refresh token may be "
                                      "retired)"
                                    : "refused by the provider (HTTP " + std::to_string(status) +
                                          "); if it persists, log in again",
                        status == 0);
  }
  TraceRefresh(status, error);
}

Result<std::string> LoginCustody::CompleteRefresh(std::string_view provider_body) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ != RefreshState::kInFlight) {
    return Error(ErrorCode::kFailedPrecondition, "no refresh of " + id_ + " in flight");
  }
  auto parsed = ParseTokenResponse(provider_body);
  if (!parsed.ok()) {
    // The provider answered 200 but not with tokens: nothing rotated that we know of.
    state_ = RefreshState::kIdle;
    RecordFailureLocked("the provider's answer is not a token response", true);
    lock.unlock();
    TraceRefresh(200, "oauth refresh: " + parsed.error().message());
    return parsed.error();
  }
  TokenResponse& t = *parsed;
  // The new placeholders: Claude's are fixed per workspace (same shape); ChatGPT's JWTs follow
  // the new token's public claims with the fixed placeholder signature.
  std::string access_ph = access_ph_, id_ph;
  if (kind_ == vault::CredentialKind::kChatgptSubscription) {
    auto a = vault::JwtPlaceholderFor(t.access_token, access_sig_);
    if (!a.ok()) {
      state_ = RefreshState::kIdle;
      RecordFailureLocked("the refreshed access token is not a JWT", true);
      lock.unlock();
      TraceRefresh(200, "oauth refresh: access token is not a JWT");
      return Error(ErrorCode::kInvalidArgument, "the refreshed access token is not a JWT");
    }
    access_ph = *a;
    if (!t.id_token.empty()) {
      auto i = vault::JwtPlaceholderFor(t.id_token, id_sig_);
      if (!i.ok()) {
        state_ = RefreshState::kIdle;
        RecordFailureLocked("the refreshed id token is not a JWT", true);
        lock.unlock();
        TraceRefresh(200, "oauth refresh: id token is not a JWT");
        return Error(ErrorCode::kInvalidArgument, "the refreshed id token is not a JWT");
      }
      id_ph = *i;
    }
  }
  // SECURITY: build the new login beside the old one; the old is wiped only once the new one is
  // current (saved, or held as the only live copy after a failed save).
  vault::Credential next = login_;
  next.value = t.access_token;
  if (!t.refresh_token.empty()) next.oauth.refresh_token = t.refresh_token;
  if (!t.id_token.empty()) next.oauth.id_token = t.id_token;
  int64_t now = clock_();
  if (t.expires_in > 0) next.oauth.expires_at_ms = now + t.expires_in * 1000;
  if (!t.scope.empty()) {
    next.oauth.scopes.clear();
    for (const std::string& s : Split(t.scope, ' ')) {
      if (!s.empty()) next.oauth.scopes.push_back(s);
    }
    next.oauth.scopes = WithoutMintingScopes(next.oauth.scopes);  // api_paths.h
  }
  next.oauth.last_refresh = now / 1000;
  next.oauth.refresh_started_at = 0;
  next.oauth.refresh_error.clear();
  next.oauth.refresh_error_at = 0;
  vault::SecureWipe(t.access_token);
  vault::SecureWipe(t.refresh_token);
  vault::SecureWipe(t.id_token);

  Status saved = persist_ ? persist_(next)
                          : Status(Error(ErrorCode::kFailedPrecondition, "no vault to save to"));
  Wipe(login_);
  login_ = std::move(next);
  state_ = saved.ok() ? RefreshState::kIdle : RefreshState::kUnsaved;
  lock.unlock();
  if (!saved.ok()) {
    TraceRefresh(200, "oauth refresh: not saved: " + saved.error().message());
    return Error(ErrorCode::kUnavailable,
                 "refreshed " + id_ + " but could not save it: " + saved.error().message(),
                 "the new login is kept in memory and saved at the next request");
  }
  TraceRefresh(200, "");
  return RewriteTokenResponse(provider_body, access_ph, refresh_ph_,
                              id_ph.empty() ? id_ph_ : id_ph);
}

bool LoginCustody::has_login() {
  std::lock_guard<std::mutex> lock(mu_);
  return !login_.value.empty();
}

Result<std::string> LoginCustody::CaptureLogin(std::string_view provider_body) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == RefreshState::kInFlight) {
    return Error(ErrorCode::kUnavailable, "a refresh of " + id_ + " is in flight",
                 "log in again in a moment");
  }
  if (!create_) {
    return Error(ErrorCode::kFailedPrecondition, "no vault to save a captured " + id_ + " login to",
                 "log in on the host and take the login into custody with `cloister cred import "
                 "WORKSPACE claude|codex`");
  }
  auto made = LoginFromTokenResponse(kind_, provider_body, clock_());
  if (!made.ok()) {
    lock.unlock();
    TraceRefresh(200, "oauth capture: " + made.error().message(), "oauth-capture");
    return made.error();
  }
  vault::Credential next = std::move(made).value();
  next.hosts = api_hosts_;
  next.oauth.token_hosts = token_hosts_;
  // The guest's copies: Claude's placeholders are the slot's; ChatGPT's JWTs follow the new
  // tokens' public claims with the slot's signatures.
  std::string access_ph = access_ph_, id_ph = id_ph_;
  if (kind_ == vault::CredentialKind::kChatgptSubscription) {
    auto a = vault::JwtPlaceholderFor(next.value, access_sig_);
    auto i = vault::JwtPlaceholderFor(next.oauth.id_token, id_sig_);
    if (!a.ok() || !i.ok()) {
      Wipe(next);
      lock.unlock();
      TraceRefresh(200, "oauth capture: a token is not a JWT", "oauth-capture");
      return Error(ErrorCode::kInvalidArgument, "the captured login's tokens are not JWTs");
    }
    access_ph = *a;
    id_ph = *i;
  }
  // SECURITY: saved before the guest gets anything; a failed save wipes the captured tokens
  // (the guest gets an error, the login was never live in the workspace).
  Status saved = create_(next);
  if (!saved.ok()) {
    Wipe(next);
    lock.unlock();
    TraceRefresh(200, "oauth capture: not saved: " + saved.error().message(), "oauth-capture");
    return Error(ErrorCode::kUnavailable,
                 "captured a " + id_ + " login but could not save it: " + saved.error().message(),
                 "nothing of it reached the workspace; fix the workspace's secrets file and log "
                 "in again");
  }
  Wipe(login_);
  login_ = std::move(next);
  state_ = RefreshState::kIdle;
  lock.unlock();
  TraceRefresh(200, "", "oauth-capture");
  return RewriteTokenResponse(provider_body, access_ph, refresh_ph_, id_ph);
}

void LoginCustody::TraceRefresh(int status, const std::string& error, const char* what) {
  if (!trace_) return;
  proxy::TraceRecord rec;
  rec.time_ms = SystemMs();
  rec.host = token_hosts_.empty() ? "" : token_hosts_.front();
  rec.port = 443;
  rec.method = "POST";
  rec.path = what;
  rec.status = status;
  rec.swaps.push_back(std::string(what) + ":" + id_);
  rec.error = error;
  trace_(rec);
}

RefreshState LoginCustody::state() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

int64_t LoginCustody::expires_at_ms() {
  std::lock_guard<std::mutex> lock(mu_);
  return login_.oauth.expires_at_ms;
}

int64_t LoginCustody::last_refresh_ms() {
  std::lock_guard<std::mutex> lock(mu_);
  return login_.oauth.last_refresh * 1000;
}

std::string LoginCustody::refresh_error() {
  std::lock_guard<std::mutex> lock(mu_);
  return login_.oauth.refresh_error;
}

std::vector<std::string> LoginCustody::scopes() {
  std::lock_guard<std::mutex> lock(mu_);
  return login_.oauth.scopes;
}

void LoginCustody::NoteRefreshFailure(const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == RefreshState::kInFlight || login_.value.empty()) return;
  // The token did not leave through this path; a record of an earlier interrupted refresh stays.
  RecordFailureLocked(error, login_.oauth.refresh_started_at != 0);
}

vault::Credential LoginCustody::Snapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  return login_;
}

}  // namespace cloister::oauth

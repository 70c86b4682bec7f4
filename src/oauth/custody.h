// Custody of one subscription login (Claude or ChatGPT) inside the egress proxy of one running
// workspace: the real access, refresh and id tokens live here (and in the encrypted vault), the
// guest holds placeholders. Made by AddOauthFilters (wiring.h) from the vault's BoundCredential;
// shared by the OauthFilter and the response transforms of refresh requests in flight.
//
// The refresh state machine (one owner per login: this object, in the workspace's supervisor):
//
//   kIdle ──BeginRefresh──▶ kInFlight ──Complete, persisted──────────▶ kIdle (new tokens current)
//                              │      ──Complete, persist failed─────▶ kUnsaved
//                              └──────Abort (error answer, no answer)─▶ kIdle (old tokens kept)
//   kUnsaved: the new tokens are current in memory (the provider has retired the old refresh
//   token, so they are the only live login) and every BeginRefresh and AccessToken first retries
//   the save; BeginRefresh refuses (kUnavailable) until it succeeded.
//   kInFlight: a second BeginRefresh is refused (kUnavailable, the guest gets 503 and retries):
//   the refresh token is single use, two refreshes with it would kill the login.
//
// The persist function writes the login to the vault (atomically: write, fsync, rename) BEFORE
// Complete makes the new tokens current and wipes the old ones, so a crash between the provider's
// answer and the save leaves the vault with the old login intact, never a torn one. BeginRefresh
// first saves the login with `refresh_started_at` set (the refresh record, vault/credential.h)
// and refuses when that save fails: after a crash between the provider's answer and the save the
// vault says the stored refresh token may be retired (`cred ls`: "refresh interrupted"), so what
// a crash loses is stated, never silent. A refused or unanswered refresh is saved as
// `refresh_error` (the refresh timer's failures show in `cred ls` the same way).
//
// Login capture (a login typed in the guest): a custody made from a capture slot
// (vault::Vault::BindCaptureSlots: placeholders, no token) has no login until CaptureLogin takes
// the provider's answer to the authorization code exchange: the new login is saved with `create`
// (which adds it to the vault) BEFORE the guest gets the answer with placeholders; a custody that
// holds a login is replaced the same way (the user logged in again, perhaps as someone else).
//
// Thread safe (one mutex; the persist function runs under it, so saves are ordered).
// SECURITY: real tokens leave this object only as the return value of AccessToken/BeginRefresh
// (into a request going to the login's own hosts) and as the argument of the persist function;
// never in an error message or a trace record. Wiped on destruction and on rotation.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "oauth/token_body.h"
#include "proxy/trace.h"
#include "vault/vault.h"

namespace cloister::oauth {

enum class RefreshState { kIdle, kInFlight, kUnsaved };
const char* RefreshStateName(RefreshState s);

// The system clock in unix milliseconds: LoginCustody's and RefreshTimer's default Clock.
int64_t SystemMs();

class LoginCustody {
 public:
  using PersistFn = std::function<Status(const vault::Credential&)>;
  using TraceFn = std::function<void(const proxy::TraceRecord&)>;
  using Clock = std::function<int64_t()>;  // unix milliseconds

  // `bound`: the login and its placeholders (vault::Vault::Bind), or a capture slot (no token).
  // `persist` replaces the login in the vault (and refuses one `cred rm` removed); `create` adds
  // or replaces it (login capture); without `create` CaptureLogin refuses (fail closed).
  LoginCustody(vault::BoundCredential bound, PersistFn persist, TraceFn trace = nullptr,
               Clock clock = nullptr, PersistFn create = nullptr);
  ~LoginCustody();
  LoginCustody(const LoginCustody&) = delete;
  LoginCustody& operator=(const LoginCustody&) = delete;

  vault::CredentialKind kind() const { return kind_; }
  const std::string& id() const { return id_; }
  const std::vector<std::string>& api_hosts() const { return api_hosts_; }
  const std::vector<std::string>& token_hosts() const { return token_hosts_; }

  // True when `token` is this login's access placeholder (ChatGPT: a JWT whose signature is the
  // placeholder's signature; its header and payload follow the real token's and are not checked).
  bool IsAccessPlaceholder(std::string_view token) const;
  bool IsRefreshPlaceholder(std::string_view token) const;
  // Any of this login's placeholders (access, refresh, id; the JWT ones by their signature).
  bool IsPlaceholder(std::string_view token) const;
  // The paths of the API hosts the user allowed beyond the pinned clients' own (api_paths.h),
  // as the vault had them when this custody was made (a login captured later keeps them).
  const std::vector<std::string>& allow_paths() const { return allow_paths_; }

  // The current real access token (a save pending from kUnsaved is retried first; its failure
  // does not stop the request: the token in memory is the live one). "" without a login.
  std::string AccessToken();

  // False for a capture slot until a login was captured.
  bool has_login();
  // The provider's 200 answer to a login's authorization code exchange (guest bytes did not make
  // it; the proxy holds it): a new login, saved with `create` before this returns, becomes
  // current (the old one, if any, is wiped). Returns the body the guest gets (placeholders in
  // place of every token). An error (nothing of the answer may reach the guest) when the answer
  // is not a usable login (login_response.h), a refresh is in flight, or the save failed (the
  // captured tokens are then wiped: nothing was held before that could be lost).
  Result<std::string> CaptureLogin(std::string_view provider_body);

  // kIdle -> kInFlight; returns the real refresh token to send. kUnavailable: a refresh is in
  // flight, or the last refresh is still unsaved and saving failed again.
  Result<std::string> BeginRefresh();
  // kInFlight -> kIdle or kUnsaved with the provider's 200 answer; returns the body the guest
  // gets (placeholders in place of tokens). An error when the answer is malformed (the login is
  // unchanged, kIdle) or could not be saved (kUnsaved; the message says so).
  Result<std::string> CompleteRefresh(std::string_view provider_body);
  // kInFlight -> kIdle (the provider refused, or no answer came): the old tokens stay current.
  void AbortRefresh(int status);

  RefreshState state();
  int64_t expires_at_ms();
  int64_t last_refresh_ms();  // the last refresh, capture or import (unix ms)
  std::string refresh_error();  // the last failed refresh, "" after a success
  std::vector<std::string> scopes();
  const std::string& refresh_placeholder() const { return refresh_ph_; }  // not secret
  // A refresh that failed before reaching the provider (the refresh timer: no answer from the
  // proxy): saved in the refresh record like a refused one. No-op while one is in flight.
  void NoteRefreshFailure(const std::string& error);
  vault::Credential Snapshot();  // SECURITY: a copy with the real tokens (tests, cred ls)

 private:
  Status SaveLocked();  // kUnsaved -> kIdle when the save works
  // Saves the refresh record after a failed refresh (best effort: the tokens did not change).
  void RecordFailureLocked(const std::string& error, bool maybe_retired);
  void TraceRefresh(int status, const std::string& error, const char* what = "oauth-refresh");

  const vault::CredentialKind kind_;
  const std::string id_;
  std::vector<std::string> api_hosts_, token_hosts_;
  const std::vector<std::string> allow_paths_;
  // Placeholders (not secret). ChatGPT: access_sig_/id_sig_ are the JWT placeholders' signatures.
  const std::string access_ph_, refresh_ph_, id_ph_, access_sig_, id_sig_;
  PersistFn persist_;
  PersistFn create_;
  TraceFn trace_;
  Clock clock_;

  std::mutex mu_;
  vault::Credential login_;  // guarded by mu_; SECURITY: the real tokens
  RefreshState state_ = RefreshState::kIdle;
};

}  // namespace cloister::oauth

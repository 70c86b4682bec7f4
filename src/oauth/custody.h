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
// answer and the save leaves the vault with the old login intact, never a torn one.
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

class LoginCustody {
 public:
  using PersistFn = std::function<Status(const vault::Credential&)>;
  using TraceFn = std::function<void(const proxy::TraceRecord&)>;
  using Clock = std::function<int64_t()>;  // unix milliseconds

  // `bound`: the login and its placeholders (vault::Vault::Bind). `persist` is required.
  LoginCustody(vault::BoundCredential bound, PersistFn persist, TraceFn trace = nullptr,
               Clock clock = nullptr);
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

  // The current real access token (a save pending from kUnsaved is retried first; its failure
  // does not stop the request: the token in memory is the live one).
  std::string AccessToken();

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
  vault::Credential Snapshot();  // SECURITY: a copy with the real tokens (tests, cred ls)

 private:
  Status SaveLocked();  // kUnsaved -> kIdle when the save works
  void TraceRefresh(int status, const std::string& error);

  const vault::CredentialKind kind_;
  const std::string id_;
  std::vector<std::string> api_hosts_, token_hosts_;
  // Placeholders (not secret). ChatGPT: access_sig_/id_sig_ are the JWT placeholders' signatures.
  const std::string access_ph_, refresh_ph_, id_ph_, access_sig_, id_sig_;
  PersistFn persist_;
  TraceFn trace_;
  Clock clock_;

  std::mutex mu_;
  vault::Credential login_;  // guarded by mu_; SECURITY: the real tokens
  RefreshState state_ = RefreshState::kIdle;
};

}  // namespace cloister::oauth

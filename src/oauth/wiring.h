// The per-boot wiring of subscription logins into one workspace's proxy (like aws/wiring.cc).
#pragma once

#include <memory>
#include <vector>

#include "oauth/custody.h"
#include "oauth/oauth_filter.h"
#include "proxy/proxy.h"
#include "store/env.h"

namespace cloister::oauth {

// Call after vault::BuildGuestCredentials (it reads the placeholders as Bind made them) and
// after cfg.trace is set. Adds to `cfg`:
//   - one OauthFilter, always (the token endpoint guard applies without a login too), with a
//     LoginCustody per subscription login in cfg.credentials that saves through `persist`;
//   - detector entries for each login's refresh and id token placeholders, scoped to the token
//     hosts (a refresh placeholder sent anywhere else trips the detector like any placeholder);
//   - for ChatGPT, the access token's detector entry becomes the JWT placeholder's signature
//     (its payload follows the real token, so the whole JWT is not a fixed string).
// SECURITY: the detector entries carry no real value (refresh and id tokens live only in the
// custody: they rotate).
// Login capture: `capture_slots` (vault::Vault::BindCaptureSlots: one per subscription kind the
// vault holds no login of) become custodies without a login whose placeholders (access, refresh,
// id) are registered with the detector like a login's, so a login typed in the guest is captured
// (OauthFilter) with placeholders the detector already knows. `create` saves a captured login
// (VaultPersister with create = true); null: a login in the guest is refused (502), fail closed.
Result<std::shared_ptr<OauthFilter>> AddOauthFilters(
    proxy::ProxyConfig& cfg, LoginCustody::PersistFn persist,
    std::vector<vault::BoundCredential> capture_slots = {}, LoginCustody::PersistFn create = nullptr);

// The persist function of a running workspace: under `lock_path` (flock, exclusive; the store's
// config lock that `cloister cred` takes while the VM runs, so a concurrent `cred add` and a
// refresh never lose each other's change; "" = no lock), opens the vault at `location`, replaces
// the login (same id), saves atomically (write, fsync, rename). A login that `cred rm` removed
// meanwhile is not written back (kNotFound), unless `create` (a captured login: added or
// replaced). The save goes through `env` (the store's Env: store/env.h; null = Env::Default()),
// so crash tests can inject a fault at each step of it (store/fault_injection_env.h).
// Used by the supervisor's egress wiring.
LoginCustody::PersistFn VaultPersister(vault::VaultLocation location, vault::KeyBackend backend,
                                       std::string lock_path = "", bool create = false,
                                       Env* env = nullptr);

}  // namespace cloister::oauth

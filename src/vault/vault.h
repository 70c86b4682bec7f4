// The workspace's credential vault: an AEAD-encrypted secrets file plus the per-install keys.
//
// File format (<workspace dir>/secrets.enc, mode 0600, replaced atomically):
//   "cloister-secrets-v1\n" || nonce(12) || AES-256-GCM(master key, plaintext) || tag(16)
// The associated data is the magic line plus the workspace name, so a secrets file copied into
// another workspace does not open. The plaintext is JSON:
//   {"version":1,"credentials":[{"kind","id","value","hosts","header","body"
//                                 [,"ask":"once"|"always"] [,"allow_paths":["/v1/files",...]]
//                                 [,"aws_key_id","aws_token","aws_region"] (kind aws)
//                                 [,"oauth":{"refresh_token","id_token","expires_at_ms","scopes",
//                                   "plan","rate_limit_tier","account","account_id",
//                                   "last_refresh","token_hosts"}] (subscription kinds)}],
//    "policy":{"llm_body":"flag"|"block"}, "blobs":{"name":"<base64>"}}
//
// Ownership: a Vault is used by one thread at a time; writers (cred add/rm) hold the workspace
// lock (store) around Open..Save. The supervisor opens it once per boot, calls Bind(), and hands
// the result to the proxy; the Vault object is then destroyed (its key material wiped).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "vault/credential.h"
#include "vault/keys.h"

namespace cloister::vault {

inline constexpr char kSecretsFile[] = "secrets.enc";

// What to do with a placeholder found in the BODY of a request to an LLM provider's host
// (conversation content: an agent that read ~/.git-credentials sends it to its model).
enum class LlmBodyPolicy {
  kFlag,   // default: forward (it is only a placeholder), record a leak flag in the trace
  kBlock,  // treat like any other out-of-scope placeholder: 451, pause, mark compromised
};
const char* LlmBodyPolicyName(LlmBodyPolicy p);
Result<LlmBodyPolicy> ParseLlmBodyPolicy(std::string_view name);

struct VaultLocation {
  std::string keys_dir;      // the store's keys directory (0700)
  std::string secrets_file;  // <workspace dir>/secrets.enc
  std::string workspace;     // workspace name (AEAD associated data and placeholder derivation)
};

// A credential with its placeholder: what the proxy and the guest files need.
struct BoundCredential {
  Credential credential;  // SECURITY: includes the real value
  std::string placeholder;
  // kAws with a session token: the token's placeholder (MakePlaceholder of a copy of the
  // credential with id "aws:session-token" and value = the token: same length and alphabet).
  std::string aws_token_placeholder;
  // Subscription logins: the refresh token's placeholder (same prefix, length and alphabet) and,
  // for ChatGPT, the id token's (a JWT placeholder). For ChatGPT `placeholder` is a JWT too.
  std::string refresh_placeholder;
  std::string id_token_placeholder;
};

class Vault {
 public:
  // Loads keys (creating them on first use) and the secrets file if it exists.
  static Result<Vault> Open(const VaultLocation& location, KeyBackend backend = KeyBackendFromEnv());

  Vault(Vault&&) = default;
  Vault& operator=(Vault&&) = default;
  ~Vault();

  const std::vector<Credential>& credentials() const { return credentials_; }
  const Credential* Find(std::string_view id) const;
  // Adds or replaces (same id) a credential. SECURITY: a replaced credential keeps its stored
  // policy (ask, allow_paths): a new value (a rotated key, a re-import, a login captured in the
  // guest, a refresh) never turns consent off or widens what a login reaches. Only SetPolicy
  // changes a policy.
  void Put(Credential cred);
  // Sets the policy of credential `id` (kNotFound when there is none).
  Status SetPolicy(std::string_view id, ConsentAsk ask, std::vector<std::string> allow_paths);
  // kNotFound when no credential has this id.
  Status Remove(std::string_view id);

  // Named secret blobs kept in the same encrypted file (sshagent: the workspace key's seed under
  // "ssh-ed25519"). SECURITY: the bytes are secret.
  void PutBlob(std::string_view name, std::string bytes);
  const std::string* FindBlob(std::string_view name) const;  // nullptr if absent
  Status RemoveBlob(std::string_view name);                  // kNotFound if absent

  LlmBodyPolicy llm_body_policy() const { return llm_body_; }
  void set_llm_body_policy(LlmBodyPolicy p) { llm_body_ = p; }

  // Encrypts and atomically replaces the secrets file.
  Status Save() const;
  // The same through `write` (write PATH.tmp, fsync, rename, fsync the directory), so a caller can
  // run the save against a fault-injecting filesystem (oauth/wiring.h: the store's Env).
  using AtomicWriter =
      std::function<Status(const std::string& path, std::string_view data, uint32_t mode)>;
  Status Save(const AtomicWriter& write) const;

  Result<std::string> PlaceholderFor(const Credential& cred) const;
  Result<std::vector<BoundCredential>> Bind() const;
  // Login capture (oauth/): for each subscription kind this vault holds no login of, a slot whose
  // credential has the kind, id and scopes but no token, and the placeholders a login captured in
  // the guest will get. They are Bind()'s placeholders for tokens of the usual shape (Claude:
  // sk-ant-oat01-/sk-ant-ort01- and 95 more characters; ChatGPT: RS256 JWTs, a 342-character
  // signature), so the detector knows them before the login happens and the next boot keeps them
  // when the real tokens have that shape. SECURITY: no secret in the result.
  Result<std::vector<BoundCredential>> BindCaptureSlots() const;
  const std::string& key_backend() const { return key_backend_; }

 private:
  Vault() = default;
  VaultLocation location_;
  std::string master_key_;  // SECURITY: wiped in the destructor
  std::string salt_;
  std::string key_backend_;
  std::vector<Credential> credentials_;
  std::map<std::string, std::string, std::less<>> blobs_;
  LlmBodyPolicy llm_body_ = LlmBodyPolicy::kFlag;
};

// `fork --with-credentials`: puts every credential of the vault at `from` (with its policy, and
// the vault's llm_body policy) into the vault at `to`, whose file is bound to the fork's name.
// SECURITY: subscription logins are never copied (a login, and its refresh token, lives in one
// workspace: two holders refreshing it would log each other out), and no blob is (the source's
// SSH key and browser-profile key stay the source's). Returns how many credentials were copied.
Result<size_t> CopyCredentialsForFork(const VaultLocation& from, const VaultLocation& to,
                                      KeyBackend backend = KeyBackendFromEnv());

}  // namespace cloister::vault

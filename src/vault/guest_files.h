// What the guest gets for its credentials: placeholders, in the places tools look for them.
//
// Contract with vm (see /work/notes/proxy-vm.md): the supervisor calls BuildGuestCredentials()
// once per boot and puts the result on the per-boot metadata disk; the guest agent exports `env`
// into every session and writes each file (owner dev:dev, the given mode) under the user's home.
// Nothing here is secret: every value is a placeholder.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "vault/vault.h"

namespace cloister::vault {

struct GuestFile {
  std::string path;     // relative to the guest user's home, e.g. ".git-credentials"
  std::string content;
  int mode = 0600;
};

struct GuestCredentials {
  // ANTHROPIC_API_KEY, OPENAI_API_KEY, GH_TOKEN, ...; with a git credential also
  // GIT_CONFIG_COUNT/KEY_0/VALUE_0 = credential.helper store (so git reads ~/.git-credentials).
  std::map<std::string, std::string> env;
  // .git-credentials, .config/gh/hosts.yml, .claude/.credentials.json, .codex/auth.json
  std::vector<GuestFile> files;
};

// SECURITY: reads only the placeholders, kind, hosts and header of each credential (and, for kAws,
// the access key id and region, which are not secret; for subscription logins their public
// metadata: expiry, scopes, plan, account id), never the value or a token.
GuestCredentials BuildGuestCredentials(const std::vector<BoundCredential>& creds);

}  // namespace cloister::vault

// `cloister cred import NAME claude|codex`: a login the host's own client made, read from its
// credentials file and turned into a vault credential (kClaudeSubscription/kChatgptSubscription).
//
// Files (the pinned clients' own, see docs/design.md "Subscription logins"):
//   claude: $CLAUDE_CONFIG_DIR/.credentials.json, default ~/.claude/.credentials.json
//           {"claudeAiOauth":{"accessToken","refreshToken","expiresAt"(ms),"scopes",
//            "subscriptionType","rateLimitTier"}}; the account's email from ~/.claude.json
//           ("oauthAccount":{"emailAddress"}) when present.
//   codex:  $CODEX_HOME/auth.json, default ~/.codex/auth.json
//           {"tokens":{"id_token","access_token","refresh_token","account_id"},"last_refresh"};
//           expiry from the access JWT's exp, email and plan from the id token's claims.
// SECURITY: the files hold real tokens; the results are secret. Parsed with bounds (1 MiB), no
// exceptions; no error message carries a token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"
#include "vault/credential.h"

namespace cloister::oauth {

enum class Provider { kClaude, kCodex };
Result<Provider> ParseProvider(std::string_view name);  // "claude" | "codex"
vault::CredentialKind KindOf(Provider p);

// The host's credentials file for `p` from the environment (HOME, CLAUDE_CONFIG_DIR, CODEX_HOME).
Result<std::string> HostLoginPath(Provider p);

// `claude_json`: the content of ~/.claude.json or "" (only the account's email is read from it).
Result<vault::Credential> LoginFromClaudeFile(std::string_view credentials_json,
                                              std::string_view claude_json, int64_t now_unix);
Result<vault::Credential> LoginFromCodexFile(std::string_view auth_json, int64_t now_unix);

// The JSON payload of a JWT (no signature check: the provider's own token, for its public
// claims). kInvalidArgument when not a JWT.
Result<std::string> JwtPayload(std::string_view jwt);

}  // namespace cloister::oauth

// Where a subscription login's access token is swapped in: the paths of its API hosts that the
// pinned clients (base/agent_tools.h: Claude Code 2.1.332, Codex 0.171.0) call for inference and
// for their own login state, read from their npm packages (the tables in api_paths.cc cite where
// each path is built). Every other path of those hosts gets a 403 naming the credential and the
// way to allow it (`cloister cred policy NAME KIND --allow-path PATH`, vault::Credential::
// allow_paths); a path that mints a credential from the login (an API key that works from
// anywhere and outlives the workspace) is refused even when allowed.
//
// SECURITY: `target` is the guest's request target. Only a plain path is ever allowed: percent
// escapes, backslashes, empty, "." or ".." segments and any byte outside [A-Za-z0-9/_.~-] are
// refused, so what is compared is what the upstream will route (no decoding differences).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "vault/credential.h"

namespace cloister::oauth {

// One allowed path: exact, or every path below `path` + "/" when `prefix`.
struct ApiPath {
  const char* path;
  bool prefix;
  const char* why;  // what the client calls it for, and where in its package the path is built
};

// The kind's allowlist (empty for other kinds).
const std::vector<ApiPath>& DefaultApiPaths(vault::CredentialKind kind);

// Scopes that let a login mint credentials (Claude Code 2.1.332: org:create_api_key, which its
// login asks for to "create an API key from the login"). Stripped from a login's scopes at capture
// and import (the token still holds the scope until its next refresh, which asks only for the
// stored scopes), and a guest refresh that asks for one is refused.
bool IsMintingScope(std::string_view scope);
// `scopes` without the minting ones; `stripped` (may be null) gets what was removed.
std::vector<std::string> WithoutMintingScopes(const std::vector<std::string>& scopes,
                                              std::vector<std::string>* stripped = nullptr);

enum class PathVerdict { kAllowed, kNotAllowed, kMinting, kMalformed };
const char* PathVerdictName(PathVerdict v);

// The verdict for a request target (origin form, query ignored) on the API host of a login of
// `kind` whose user-allowed paths are `allowed` (vault::Credential::allow_paths).
PathVerdict CheckApiPath(vault::CredentialKind kind, const std::vector<std::string>& allowed,
                         std::string_view target);

// A path the user may allow: "/a/b" (exact) or "/a/b/*" (everything below /a/b/), plain (as
// CheckApiPath accepts), at most 256 bytes; a minting path is refused.
Result<std::string> ParseAllowedPath(vault::CredentialKind kind, std::string_view text);

}  // namespace cloister::oauth

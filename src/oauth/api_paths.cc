#include "oauth/api_paths.h"

#include <algorithm>

#include "base/strings.h"

namespace cloister::oauth {
namespace {

// Claude Code 2.1.332 (npm @anthropic-ai/claude-code-linux-x64, the `claude` bundle), with a
// claude.ai login: Authorization: Bearer <access token> toward BASE_API_URL (api.anthropic.com).
const std::vector<ApiPath>& ClaudePaths() {
  static const std::vector<ApiPath> paths = {
      {"/v1/messages", false,
       "inference: the Anthropic SDK's messages call (`/v1/messages?beta=true`)"},
      {"/v1/messages/count_tokens", false,
       "inference: token counting (`/v1/messages/count_tokens?beta=true`)"},
      {"/api/oauth/profile", false,
       "login state: `${BASE_API_URL}/api/oauth/profile` (\"Failed to fetch oauth profile\")"},
      {"/api/oauth/claude_cli/roles", false,
       "login state: the OAuth config's ROLES_URL, read after a login"},
      {"/api/oauth/usage", false,
       "login state: the subscription's usage limits (`/api/oauth/usage?skip_spend=1`, /usage)"},
      {"/api/claude_cli/bootstrap", false,
       "startup: `${BASE_API_URL}/api/claude_cli/bootstrap` (\"[Bootstrap] Fetching\")"},
      {"/api/claude_code/policy_limits", false,
       "startup: the organization's policy limits the client applies (\"no answer yet from "
       "/api/claude_code/policy_limits\")"},
      {"/api/claude_code/settings", false,
       "startup: the organization's managed settings (beside policy_limits)"},
  };
  return paths;
}

// Codex 0.171.0 (npm @openai/codex linux-x64, vendor/.../bin/codex), with a ChatGPT login:
// Authorization: Bearer <access JWT> toward https://chatgpt.com/backend-api.
const std::vector<ApiPath>& CodexPaths() {
  static const std::vector<ApiPath> paths = {
      {"/backend-api/codex/responses", false,
       "inference: the base URL `https://chatgpt.com/backend-api/codex` + `/responses`"},
      {"/backend-api/codex/models", false,
       "inference: the model catalog (models_endpoint.rs, `/models` under the same base)"},
      {"/backend-api/wham/usage", false, "login state: the plan's rate limits (`/wham/usage`)"},
      {"/backend-api/wham/accounts/check", false,
       "login state: the workspace routing discovery (`/wham/accounts/check`) Codex runs before it "
       "starts a ChatGPT session (without an answer it does not start one)"},
  };
  return paths;
}

const std::vector<ApiPath>& NoPaths() {
  static const std::vector<ApiPath> none;
  return none;
}

bool PlainPathChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
         c == '_' || c == '.' || c == '~' || c == '-';
}

// The path of `target` when it is plain (see api_paths.h), else "".
std::string PlainPath(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (path.empty() || path.size() > 2048 || path[0] != '/') return "";
  for (char c : path) {
    if (!PlainPathChar(c)) return "";
  }
  // Segments: none empty (no "//", no trailing "/" but the root), none "." or "..".
  if (path.size() > 1) {
    std::vector<std::string> segs = Split(path.substr(1), '/');
    for (const std::string& s : segs) {
      if (s.empty() || s == "." || s == "..") return "";
    }
  }
  return std::string(path);
}

bool Matches(std::string_view path, std::string_view entry, bool prefix) {
  if (!prefix) return path == entry;
  return path.size() > entry.size() + 1 && path.substr(0, entry.size()) == entry &&
         path[entry.size()] == '/';
}

bool IsMintingPath(std::string_view path) {
  // Claude Code 2.1.332's API_KEY_URL: `${BASE_API_URL}/api/oauth/claude_cli/create_api_key`
  // (its "create an API key from the login"; the answer's raw_key works from anywhere).
  return ToLower(path).find("create_api_key") != std::string::npos;
}

}  // namespace

const std::vector<ApiPath>& DefaultApiPaths(vault::CredentialKind kind) {
  switch (kind) {
    case vault::CredentialKind::kClaudeSubscription: return ClaudePaths();
    case vault::CredentialKind::kChatgptSubscription: return CodexPaths();
    default: return NoPaths();
  }
}

bool IsMintingScope(std::string_view scope) { return scope == "org:create_api_key"; }

std::vector<std::string> WithoutMintingScopes(const std::vector<std::string>& scopes,
                                              std::vector<std::string>* stripped) {
  std::vector<std::string> out;
  for (const std::string& s : scopes) {
    if (IsMintingScope(s)) {
      if (stripped) stripped->push_back(s);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

const char* PathVerdictName(PathVerdict v) {
  switch (v) {
    case PathVerdict::kAllowed: return "allowed";
    case PathVerdict::kNotAllowed: return "not allowed";
    case PathVerdict::kMinting: return "minting";
    case PathVerdict::kMalformed: return "malformed";
  }
  return "?";
}

PathVerdict CheckApiPath(vault::CredentialKind kind, const std::vector<std::string>& allowed,
                         std::string_view target) {
  std::string path = PlainPath(target);
  if (path.empty()) return PathVerdict::kMalformed;
  // SECURITY: before any allowlist, the user's included: a minting path is never swapped.
  if (IsMintingPath(path)) return PathVerdict::kMinting;
  for (const ApiPath& p : DefaultApiPaths(kind)) {
    if (Matches(path, p.path, p.prefix)) return PathVerdict::kAllowed;
  }
  for (const std::string& a : allowed) {
    bool prefix = a.size() > 2 && a.compare(a.size() - 2, 2, "/*") == 0;
    if (Matches(path, prefix ? std::string_view(a).substr(0, a.size() - 2) : a, prefix)) {
      return PathVerdict::kAllowed;
    }
  }
  return PathVerdict::kNotAllowed;
}

Result<std::string> ParseAllowedPath(vault::CredentialKind kind, std::string_view text) {
  (void)kind;
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument,
                 "--allow-path '" + std::string(text.substr(0, 64)) + "': " + why,
                 "a plain path such as /v1/files (exact) or /v1/files/* (everything below it)");
  };
  if (text.empty() || text.size() > 256) return bad("empty or longer than 256 bytes");
  bool prefix = text.size() > 2 && text.substr(text.size() - 2) == "/*";
  std::string_view base = prefix ? text.substr(0, text.size() - 2) : text;
  if (base.find('?') != std::string_view::npos || PlainPath(base) != base) {
    return bad("not a plain path (no query, escapes, empty, '.' or '..' segments)");
  }
  if (base == "/") return bad("the whole host cannot be allowed; name the paths");
  if (IsMintingPath(base)) return bad("it mints a credential from the login: never allowed");
  return std::string(text);
}

}  // namespace cloister::oauth

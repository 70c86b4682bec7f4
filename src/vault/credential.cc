#include "vault/credential.h"

#include <array>

#include "base/strings.h"

namespace cloister::vault {
namespace {

const std::array<KindInfo, 8>& Kinds() {
  static const std::array<KindInfo, 8> kinds = {{
      {CredentialKind::kAnthropic, "anthropic", {"api.anthropic.com"},
       {"x-api-key", "authorization"}, {"ANTHROPIC_API_KEY"}, true},
      {CredentialKind::kOpenai, "openai", {"api.openai.com"}, {"authorization"},
       {"OPENAI_API_KEY"}, true},
      // git over HTTPS talks to github.com; gh to api.github.com (a subdomain); raw content and
      // release assets come from githubusercontent.com.
      {CredentialKind::kGithub, "github", {"github.com", "githubusercontent.com"},
       {"authorization"}, {"GH_TOKEN", "GITHUB_TOKEN"}, false},
      {CredentialKind::kGitlab, "gitlab", {"gitlab.com"}, {"private-token", "authorization"},
       {"GITLAB_TOKEN"}, false},
      {CredentialKind::kHeader, "header", {}, {}, {}, false},
      // No header substitution and no env var placeholder of its own: the guest env is built in
      // guest_files.cc (key id, placeholder secret and token) and the proxy's AWS filter re-signs.
      {CredentialKind::kAws, "aws", {"amazonaws.com"}, {}, {}, false},
      // Subscription logins: the API hosts that take the access token (Claude Code 2.1.332:
      // BASE_API_URL; Codex 0.171.0: chatgpt.com/backend-api). No header list: the oauth filter
      // swaps (the access token rotates), and no env var (the guest gets a credentials file).
      {CredentialKind::kClaudeSubscription, "claude-subscription", {"api.anthropic.com"}, {}, {},
       true},
      {CredentialKind::kChatgptSubscription, "chatgpt-subscription", {"chatgpt.com"}, {}, {},
       true},
  }};
  return kinds;
}

bool IsHeaderNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace

const KindInfo& InfoFor(CredentialKind kind) {
  for (const KindInfo& k : Kinds()) {
    if (k.kind == kind) return k;
  }
  return Kinds()[4];  // kHeader
}

std::vector<CredentialKind> AllCredentialKinds() {
  std::vector<CredentialKind> out;
  for (const KindInfo& k : Kinds()) out.push_back(k.kind);
  return out;
}

Result<CredentialKind> ParseKind(std::string_view name) {
  std::string lower = ToLower(name);
  for (const KindInfo& k : Kinds()) {
    if (lower == k.name) return k.kind;
  }
  return Error(ErrorCode::kInvalidArgument, "unknown credential kind: " + std::string(name),
               "kinds: anthropic, openai, github, gitlab, header, aws (subscription logins: "
               "`cloister cred import NAME claude|codex`)");
}

const char* KindName(CredentialKind kind) { return InfoFor(kind).name; }

const char* ConsentAskName(ConsentAsk a) {
  switch (a) {
    case ConsentAsk::kOnce: return "once";
    case ConsentAsk::kAlways: return "always";
    case ConsentAsk::kOff: break;
  }
  return "off";
}

Result<ConsentAsk> ParseConsentAsk(std::string_view name) {
  std::string lower = ToLower(name);
  if (lower == "off") return ConsentAsk::kOff;
  if (lower == "once") return ConsentAsk::kOnce;
  if (lower == "always") return ConsentAsk::kAlways;
  return Error(ErrorCode::kInvalidArgument, "--ask must be once, always or off (not '" +
                                                std::string(name.substr(0, 32)) + "')",
               "once: the first use waits for `cloister approve`, the grant length decides "
               "after that; always: every use asks; off: never ask");
}

std::string CredentialId(CredentialKind kind, std::string_view header) {
  if (kind == CredentialKind::kHeader) return "header:" + ToLower(header);
  return KindName(kind);
}

Result<std::string> NormalizeScopeHost(std::string_view host) {
  std::string h = ToLower(Trim(host));
  if (!h.empty() && h.back() == '.') h.pop_back();
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "invalid host '" + std::string(host) + "': " + why,
                 "give a host name such as api.example.com (no scheme, port or wildcard)");
  };
  if (h.empty() || h.size() > 253) return bad("empty or too long");
  for (const std::string& label : Split(h, '.')) {
    if (label.empty() || label.size() > 63) return bad("empty or too long label");
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
        return bad("unexpected character");
      }
    }
    if (label.front() == '-' || label.back() == '-') return bad("label starts or ends with '-'");
  }
  return h;
}

bool HostInScope(std::string_view host, std::string_view scope) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || scope.empty()) return false;
  std::string h = ToLower(host), s = ToLower(scope);
  if (h == s) return true;
  return h.size() > s.size() + 1 && EndsWith(h, s) && h[h.size() - s.size() - 1] == '.';
}

bool HostInAnyScope(std::string_view host, const std::vector<std::string>& scopes) {
  for (const std::string& s : scopes) {
    if (HostInScope(host, s)) return true;
  }
  return false;
}

Result<Credential> MakeCredential(CredentialKind kind, std::string value,
                                  const std::vector<std::string>& hosts, std::string_view header,
                                  bool body_substitution) {
  // SECURITY: the value is never echoed in an error message.
  if (IsSubscriptionKind(kind)) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string("a ") + KindName(kind) + " login is not added by value",
                 "take a host login into custody with `cloister cred import NAME claude|codex`");
  }
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.size() < 8 || value.size() > 4096) {
    return Error(ErrorCode::kInvalidArgument, "credential value must be 8 to 4096 bytes long");
  }
  for (char c : value) {
    if (c <= 0x20 || c >= 0x7f) {
      return Error(ErrorCode::kInvalidArgument,
                   "credential value must be printable ASCII without spaces",
                   "pass the bare token on stdin (one line), not the whole header");
    }
  }
  Credential cred;
  cred.kind = kind;
  cred.value = std::move(value);
  cred.body_substitution = body_substitution;
  if (kind == CredentialKind::kHeader) {
    std::string h = ToLower(Trim(header));
    if (h.empty()) {
      return Error(ErrorCode::kInvalidArgument, "kind 'header' needs --header NAME",
                   "e.g. --header X-Api-Key --host api.example.com");
    }
    for (char c : h) {
      if (!IsHeaderNameChar(c)) {
        return Error(ErrorCode::kInvalidArgument, "invalid header name: " + std::string(header));
      }
    }
    if (hosts.empty()) {
      return Error(ErrorCode::kInvalidArgument, "kind 'header' needs at least one --host");
    }
    if (h == "host" || h == "content-length" || h == "transfer-encoding" || h == "connection") {
      return Error(ErrorCode::kInvalidArgument, "header " + h + " cannot carry a credential");
    }
    cred.header = h;
  } else if (!header.empty()) {
    return Error(ErrorCode::kInvalidArgument, "--header is only for kind 'header'");
  }
  for (const std::string& host : hosts) {
    ASSIGN_OR_RETURN(std::string h, NormalizeScopeHost(host));
    cred.hosts.push_back(h);
  }
  if (cred.hosts.empty()) cred.hosts = InfoFor(kind).default_hosts;
  cred.id = CredentialId(kind, cred.header);
  return cred;
}

Result<Credential> MakeAwsCredential(std::string access_key_id, std::string secret,
                                     std::string session_token, std::string region,
                                     const std::vector<std::string>& hosts) {
  auto strip = [](std::string& v) {
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r' || v.back() == ' ')) v.pop_back();
    size_t i = 0;
    while (i < v.size() && v[i] == ' ') ++i;
    v.erase(0, i);
  };
  strip(access_key_id);
  strip(secret);
  strip(session_token);
  strip(region);
  auto alnum = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  };
  if (access_key_id.size() < 16 || access_key_id.size() > 128) {
    return Error(ErrorCode::kInvalidArgument, "AWS access key id must be 16 to 128 characters",
                 "it looks like AKIA... or ASIA...");
  }
  for (char c : access_key_id) {
    if (!alnum(c)) {
      return Error(ErrorCode::kInvalidArgument, "AWS access key id must be letters and digits");
    }
  }
  if (secret.size() < 16 || secret.size() > 128) {
    return Error(ErrorCode::kInvalidArgument, "AWS secret access key must be 16 to 128 characters");
  }
  if (session_token.size() > 8192) {
    return Error(ErrorCode::kInvalidArgument, "AWS session token longer than 8192 characters");
  }
  for (char c : session_token) {
    if (!(alnum(c) || c == '+' || c == '/' || c == '=' || c == '_' || c == '-')) {
      return Error(ErrorCode::kInvalidArgument,
                   "AWS session token must be base64 characters ([A-Za-z0-9+/=_-])");
    }
  }
  if (!session_token.empty() && session_token.size() < 16) {
    return Error(ErrorCode::kInvalidArgument, "AWS session token shorter than 16 characters");
  }
  if (region.size() > 32) return Error(ErrorCode::kInvalidArgument, "AWS region too long");
  for (char c : region) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return Error(ErrorCode::kInvalidArgument, "invalid AWS region: " + region,
                   "e.g. eu-west-1");
    }
  }
  ASSIGN_OR_RETURN(Credential cred,
                   MakeCredential(CredentialKind::kAws, std::move(secret), hosts, "", false));
  cred.aws_access_key_id = std::move(access_key_id);
  cred.aws_session_token = std::move(session_token);
  cred.aws_region = std::move(region);
  return cred;
}

bool IsSubscriptionKind(CredentialKind kind) {
  return kind == CredentialKind::kClaudeSubscription ||
         kind == CredentialKind::kChatgptSubscription;
}

std::vector<std::string> DefaultTokenHosts(CredentialKind kind) {
  // Claude Code 2.1.332: TOKEN_URL https://platform.claude.com/v1/oauth/token (older versions:
  // console.anthropic.com). Codex 0.171.0: https://auth.openai.com/oauth/token.
  if (kind == CredentialKind::kClaudeSubscription) {
    return {"platform.claude.com", "console.anthropic.com"};
  }
  if (kind == CredentialKind::kChatgptSubscription) return {"auth.openai.com"};
  return {};
}

Result<Credential> MakeOauthCredential(CredentialKind kind, std::string access_token,
                                       OauthLogin login, const std::vector<std::string>& hosts) {
  if (!IsSubscriptionKind(kind)) {
    return Error(ErrorCode::kInvalidArgument, "not a subscription kind: " +
                                                  std::string(KindName(kind)));
  }
  // SECURITY: no token is echoed in an error message.
  auto check = [](const std::string& what, const std::string& v, bool required) -> Status {
    if (v.empty() && !required) return OkStatus();
    if (v.size() < 8 || v.size() > 16384) {
      return Error(ErrorCode::kInvalidArgument, what + " must be 8 to 16384 bytes long",
                   "import the client's own credentials file (`cloister cred import NAME "
                   "claude|codex`)");
    }
    for (char c : v) {
      if (c <= 0x20 || c >= 0x7f) {
        return Error(ErrorCode::kInvalidArgument, what + " must be printable ASCII without spaces");
      }
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(check("access token", access_token, true));
  RETURN_IF_ERROR(check("refresh token", login.refresh_token, true));
  RETURN_IF_ERROR(check("id token", login.id_token, kind == CredentialKind::kChatgptSubscription));
  auto plain = [](const std::string& v) {
    if (v.size() > 256) return false;
    for (char c : v) {
      if (c < 0x20 || c >= 0x7f) return false;
    }
    return true;
  };
  if (!plain(login.plan) || !plain(login.account) || !plain(login.account_id) ||
      !plain(login.rate_limit_tier) || login.scopes.size() > 64) {
    return Error(ErrorCode::kInvalidArgument, "login metadata (plan, account, scopes) malformed");
  }
  for (const std::string& s : login.scopes) {
    if (!plain(s) || s.find(' ') != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument, "malformed scope in the login");
    }
  }
  Credential cred;
  cred.kind = kind;
  cred.id = KindName(kind);
  cred.value = std::move(access_token);
  for (const std::string& host : hosts) {
    ASSIGN_OR_RETURN(std::string h, NormalizeScopeHost(host));
    cred.hosts.push_back(h);
  }
  if (cred.hosts.empty()) cred.hosts = InfoFor(kind).default_hosts;
  std::vector<std::string> token_hosts;
  for (const std::string& host : login.token_hosts) {
    ASSIGN_OR_RETURN(std::string h, NormalizeScopeHost(host));
    token_hosts.push_back(h);
  }
  if (token_hosts.empty()) token_hosts = DefaultTokenHosts(kind);
  login.token_hosts = std::move(token_hosts);
  cred.oauth = std::move(login);
  return cred;
}

}  // namespace cloister::vault

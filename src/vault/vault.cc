#include "vault/vault.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/json_util.h"
#include "vault/crypto.h"
#include "vault/placeholder.h"

namespace cloister::vault {
namespace {

constexpr std::string_view kMagic = "cloister-secrets-v1\n";
constexpr size_t kMaxSecretsFile = 4 << 20;

std::string Aad(const std::string& workspace) { return std::string(kMagic) + workspace; }

std::vector<std::string> StringList(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j[key].is_array()) {
    for (const auto& v : j[key]) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
  }
  return out;
}

// SECURITY: `c` holds real tokens (the caller wipes the document).
Result<Credential> OauthFromJson(CredentialKind kind, const nlohmann::json& c,
                                 const std::vector<std::string>& hosts) {
  if (!c.contains("oauth") || !c["oauth"].is_object()) {
    return Error(ErrorCode::kCorrupt, "subscription login without its oauth fields");
  }
  const nlohmann::json& o = c["oauth"];
  auto str = [&](const char* k) {
    return o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : std::string();
  };
  auto num = [&](const char* k) -> int64_t {
    return o.contains(k) && o[k].is_number_integer() ? o[k].get<int64_t>() : 0;
  };
  OauthLogin login;
  login.refresh_token = str("refresh_token");
  login.id_token = str("id_token");
  login.expires_at_ms = num("expires_at_ms");
  login.scopes = StringList(o, "scopes");
  login.plan = str("plan");
  login.rate_limit_tier = str("rate_limit_tier");
  login.account = str("account");
  login.account_id = str("account_id");
  login.last_refresh = num("last_refresh");
  login.token_hosts = StringList(o, "token_hosts");
  login.refresh_started_at = num("refresh_started_at");
  login.refresh_error = str("refresh_error");
  login.refresh_error_at = num("refresh_error_at");
  login.source = str("source");
  return MakeOauthCredential(kind, c["value"].get<std::string>(), std::move(login), hosts);
}

}  // namespace

const char* LlmBodyPolicyName(LlmBodyPolicy p) {
  return p == LlmBodyPolicy::kBlock ? "block" : "flag";
}

Result<LlmBodyPolicy> ParseLlmBodyPolicy(std::string_view name) {
  if (name == "flag") return LlmBodyPolicy::kFlag;
  if (name == "block") return LlmBodyPolicy::kBlock;
  return Error(ErrorCode::kInvalidArgument, "llm body policy must be 'flag' or 'block'");
}

Vault::~Vault() {
  SecureWipe(master_key_);
  SecureWipe(salt_);
  for (auto& [name, bytes] : blobs_) SecureWipe(bytes);
  for (Credential& c : credentials_) {
    SecureWipe(c.value);
    SecureWipe(c.aws_session_token);
    SecureWipe(c.oauth.refresh_token);
    SecureWipe(c.oauth.id_token);
  }
}

Result<Vault> Vault::Open(const VaultLocation& location, KeyBackend backend) {
  if (location.workspace.empty()) {
    return Error(ErrorCode::kInvalidArgument, "vault: empty workspace name");
  }
  Vault v;
  v.location_ = location;
  ASSIGN_OR_RETURN(MasterKey key, LoadOrCreateMasterKey(location.keys_dir, backend));
  v.master_key_ = std::move(key.bytes);
  v.key_backend_ = key.backend;
  ASSIGN_OR_RETURN(v.salt_, LoadOrCreateSalt(location.keys_dir));

  auto raw = ReadSmallFile(location.secrets_file, kMaxSecretsFile);
  if (!raw.ok()) {
    if (raw.error().code() == ErrorCode::kNotFound) return v;  // no credentials yet
    return raw.error();
  }
  std::string_view bytes = *raw;
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    return Error(ErrorCode::kCorrupt, location.secrets_file + " is not a cloister secrets file");
  }
  auto plain = AeadOpen(v.master_key_, Aad(location.workspace), bytes.substr(kMagic.size()));
  if (!plain.ok()) {
    return plain.error().WithContext(location.secrets_file)
        .WithHint("the master key changed or the file belongs to another workspace; remove the "
                  "file and add the credentials again");
  }
  // SECURITY: the parsed JSON holds secret values; it is destroyed at the end of this scope.
  nlohmann::json doc = nlohmann::json::parse(*plain, nullptr, false);
  SecureWipe(plain.value());
  if (doc.is_discarded() || !doc.is_object() || JsonInt<int>(doc, "version", 0) != 1 ||
      !doc.contains("credentials") || !doc["credentials"].is_array()) {
    return Error(ErrorCode::kCorrupt, location.secrets_file + ": unexpected content");
  }
  for (const auto& c : doc["credentials"]) {
    if (!c.is_object() || !c.contains("kind") || !c["kind"].is_string() ||
        !c.contains("value") || !c["value"].is_string()) {
      return Error(ErrorCode::kCorrupt, location.secrets_file + ": malformed credential");
    }
    ASSIGN_OR_RETURN(CredentialKind kind, ParseKind(c["kind"].get<std::string>()));
    std::vector<std::string> hosts;
    if (c.contains("hosts") && c["hosts"].is_array()) {
      for (const auto& h : c["hosts"]) {
        if (h.is_string()) hosts.push_back(h.get<std::string>());
      }
    }
    std::string header = c.value("header", "");
    Result<Credential> cred =
        IsSubscriptionKind(kind) ? OauthFromJson(kind, c, hosts)
        : kind == CredentialKind::kAws
            ? MakeAwsCredential(c.value("aws_key_id", ""), c["value"].get<std::string>(),
                                c.value("aws_token", ""), c.value("aws_region", ""), hosts)
            : MakeCredential(kind, c["value"].get<std::string>(), hosts, header,
                             c.value("body", false));
    if (!cred.ok()) return cred.error().WithContext(location.secrets_file);
    // SECURITY: an ask policy that does not parse fails the open (never silently "off").
    if (c.contains("ask")) {
      if (!c["ask"].is_string()) {
        return Error(ErrorCode::kCorrupt, location.secrets_file + ": malformed ask policy");
      }
      Result<ConsentAsk> ask = ParseConsentAsk(c["ask"].get<std::string>());
      if (!ask.ok()) return ask.error().WithContext(location.secrets_file);
      cred->ask = *ask;
    }
    if (c.contains("allow_paths")) {
      // SECURITY: a malformed list fails the open (never read as "none" nor as "anything").
      const auto& a = c["allow_paths"];
      if (!a.is_array() || a.size() > 64) {
        return Error(ErrorCode::kCorrupt, location.secrets_file + ": malformed allow_paths");
      }
      for (const auto& p : a) {
        if (!p.is_string() || p.get<std::string>().empty() || p.get<std::string>()[0] != '/') {
          return Error(ErrorCode::kCorrupt, location.secrets_file + ": malformed allow_paths");
        }
        cred->allow_paths.push_back(p.get<std::string>());
      }
    }
    v.credentials_.push_back(std::move(cred).value());
  }
  if (doc.contains("blobs") && doc["blobs"].is_object()) {
    for (const auto& [name, b64] : doc["blobs"].items()) {
      if (!b64.is_string()) return Error(ErrorCode::kCorrupt, location.secrets_file + ": bad blob");
      auto bytes = Base64Decode(b64.get<std::string>());
      if (!bytes.ok()) return Error(ErrorCode::kCorrupt, location.secrets_file + ": bad blob");
      v.blobs_[name] = std::move(bytes).value();
    }
  }
  if (doc.contains("policy") && doc["policy"].is_object()) {
    auto p = ParseLlmBodyPolicy(doc["policy"].value("llm_body", "flag"));
    if (p.ok()) v.llm_body_ = *p;
  }
  return v;
}

const Credential* Vault::Find(std::string_view id) const {
  for (const Credential& c : credentials_) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

void Vault::Put(Credential cred) {
  for (Credential& c : credentials_) {
    if (c.id == cred.id) {
      cred.ask = c.ask;
      cred.allow_paths = c.allow_paths;
      SecureWipe(c.value);
      SecureWipe(c.aws_session_token);
      SecureWipe(c.oauth.refresh_token);
      SecureWipe(c.oauth.id_token);
      c = std::move(cred);
      return;
    }
  }
  credentials_.push_back(std::move(cred));
}

Status Vault::SetPolicy(std::string_view id, ConsentAsk ask, std::vector<std::string> allow_paths) {
  for (Credential& c : credentials_) {
    if (c.id == id) {
      c.ask = ask;
      c.allow_paths = std::move(allow_paths);
      return OkStatus();
    }
  }
  return Error(ErrorCode::kNotFound, "no credential " + std::string(id) + " in workspace " +
                                         location_.workspace,
               "see `cloister cred ls " + location_.workspace + "`");
}

Status Vault::Remove(std::string_view id) {
  auto it = std::find_if(credentials_.begin(), credentials_.end(),
                         [&](const Credential& c) { return c.id == id; });
  if (it == credentials_.end()) {
    return Error(ErrorCode::kNotFound, "no credential " + std::string(id) + " in workspace " +
                                           location_.workspace,
                 "see `cloister cred ls " + location_.workspace + "`");
  }
  SecureWipe(it->value);
  SecureWipe(it->aws_session_token);
  SecureWipe(it->oauth.refresh_token);  // `cred rm` forgets both tokens of a login
  SecureWipe(it->oauth.id_token);
  credentials_.erase(it);
  return OkStatus();
}

Status Vault::Save() const {
  return Save([](const std::string& path, std::string_view data, uint32_t mode) {
    return WriteFileAtomic(path, data, static_cast<mode_t>(mode));
  });
}

Status Vault::Save(const AtomicWriter& write) const {
  nlohmann::json creds = nlohmann::json::array();
  for (const Credential& c : credentials_) {
    creds.push_back({{"kind", KindName(c.kind)}, {"id", c.id}, {"value", c.value},
                     {"hosts", c.hosts}, {"header", c.header}, {"body", c.body_substitution}});
    if (c.ask != ConsentAsk::kOff) creds.back()["ask"] = ConsentAskName(c.ask);
    if (!c.allow_paths.empty()) creds.back()["allow_paths"] = c.allow_paths;
    if (c.kind == CredentialKind::kAws) {
      creds.back()["aws_key_id"] = c.aws_access_key_id;
      creds.back()["aws_token"] = c.aws_session_token;
      creds.back()["aws_region"] = c.aws_region;
    }
    if (IsSubscriptionKind(c.kind)) {
      const OauthLogin& o = c.oauth;
      creds.back()["oauth"] = {{"refresh_token", o.refresh_token}, {"id_token", o.id_token},
                               {"expires_at_ms", o.expires_at_ms}, {"scopes", o.scopes},
                               {"plan", o.plan}, {"rate_limit_tier", o.rate_limit_tier},
                               {"account", o.account}, {"account_id", o.account_id},
                               {"last_refresh", o.last_refresh}, {"token_hosts", o.token_hosts},
                               {"refresh_started_at", o.refresh_started_at},
                               {"refresh_error", o.refresh_error},
                               {"refresh_error_at", o.refresh_error_at}, {"source", o.source}};
    }
  }
  nlohmann::json blobs = nlohmann::json::object();
  for (const auto& [name, bytes] : blobs_) blobs[name] = Base64Encode(bytes);
  nlohmann::json doc = {{"version", 1}, {"credentials", creds},
                        {"policy", {{"llm_body", LlmBodyPolicyName(llm_body_)}}},
                        {"blobs", blobs}};
  std::string plain = doc.dump();
  doc.clear();
  creds.clear();
  auto sealed = AeadSeal(master_key_, Aad(location_.workspace), plain);
  SecureWipe(plain);
  if (!sealed.ok()) return sealed.error();
  return write(location_.secrets_file, std::string(kMagic) + *sealed, 0600);
}

void Vault::PutBlob(std::string_view name, std::string bytes) {
  auto it = blobs_.find(name);
  if (it != blobs_.end()) {
    SecureWipe(it->second);
    it->second = std::move(bytes);
  } else {
    blobs_.emplace(std::string(name), std::move(bytes));
  }
}

const std::string* Vault::FindBlob(std::string_view name) const {
  auto it = blobs_.find(name);
  return it == blobs_.end() ? nullptr : &it->second;
}

Status Vault::RemoveBlob(std::string_view name) {
  auto it = blobs_.find(name);
  if (it == blobs_.end()) {
    return Error(ErrorCode::kNotFound, "no secret named " + std::string(name));
  }
  SecureWipe(it->second);
  blobs_.erase(it);
  return OkStatus();
}

Result<std::string> Vault::PlaceholderFor(const Credential& cred) const {
  return MakePlaceholder(salt_, location_.workspace, cred);
}

Result<std::vector<BoundCredential>> Vault::BindCaptureSlots() const {
  std::vector<BoundCredential> out;
  for (CredentialKind kind :
       {CredentialKind::kClaudeSubscription, CredentialKind::kChatgptSubscription}) {
    bool held = false;
    for (const Credential& c : credentials_) held |= c.kind == kind;
    if (held) continue;
    BoundCredential b;
    b.credential.kind = kind;
    b.credential.id = KindName(kind);
    b.credential.hosts = InfoFor(kind).default_hosts;
    b.credential.oauth.token_hosts = DefaultTokenHosts(kind);
    // The usual shapes (the placeholder depends only on prefix, length and alphabet).
    auto one = [&](const std::string& suffix, std::string shape) -> Result<std::string> {
      Credential t;
      t.kind = kind;
      t.id = b.credential.id + suffix;
      t.value = std::move(shape);
      return PlaceholderFor(t);
    };
    if (kind == CredentialKind::kClaudeSubscription) {
      ASSIGN_OR_RETURN(b.placeholder, one("", "sk-ant-oat01-" + std::string(93, 'a') + "AA"));
      ASSIGN_OR_RETURN(b.refresh_placeholder,
                       one(":refresh", "sk-ant-ort01-" + std::string(93, 'a') + "AA"));
    } else {
      // JWT placeholders are known by their signature; "e30" is "{}" (the header and payload of
      // a captured token follow the real one's public claims, vault/placeholder.h).
      ASSIGN_OR_RETURN(std::string access_sig,
                       JwtPlaceholderSignature(salt_, location_.workspace,
                                               b.credential.id + ":access", 342));
      ASSIGN_OR_RETURN(std::string id_sig,
                       JwtPlaceholderSignature(salt_, location_.workspace,
                                               b.credential.id + ":id", 342));
      b.placeholder = "e30.e30." + access_sig;
      b.id_token_placeholder = "e30.e30." + id_sig;
      ASSIGN_OR_RETURN(b.refresh_placeholder,
                       one(":refresh", "rt_" + std::string(40, 'a') + std::string(40, 'A') +
                                           std::string(20, '0')));
    }
    out.push_back(std::move(b));
  }
  return out;
}

Result<std::vector<BoundCredential>> Vault::Bind() const {
  std::vector<BoundCredential> out;
  for (const Credential& c : credentials_) {
    ASSIGN_OR_RETURN(std::string ph, PlaceholderFor(c));
    std::string token_ph;
    if (c.kind == CredentialKind::kAws && !c.aws_session_token.empty()) {
      Credential t = c;
      t.id = "aws:session-token";
      t.value = c.aws_session_token;
      auto made = PlaceholderFor(t);
      SecureWipe(t.value);
      SecureWipe(t.aws_session_token);
      if (!made.ok()) return made.error();
      token_ph = std::move(made).value();
    }
    BoundCredential b{c, std::move(ph), std::move(token_ph), "", ""};
    if (IsSubscriptionKind(c.kind)) {
      // Each secret of a login gets its own placeholder (its own id, so its own stream).
      auto one = [&](const char* suffix, const std::string& value) -> Result<std::string> {
        if (value.empty()) return std::string();
        Credential t;
        t.kind = c.kind;
        t.id = c.id + suffix;
        t.value = value;
        auto made = PlaceholderFor(t);
        SecureWipe(t.value);
        return made;
      };
      ASSIGN_OR_RETURN(b.refresh_placeholder, one(":refresh", c.oauth.refresh_token));
      if (c.kind == CredentialKind::kChatgptSubscription) {
        // The JWTs keep their header and public claims; their signature is the secret-shaped
        // part (see MakeJwtPlaceholder).
        ASSIGN_OR_RETURN(b.placeholder, MakeJwtPlaceholder(salt_, location_.workspace,
                                                           c.id + ":access", c.value));
        ASSIGN_OR_RETURN(b.id_token_placeholder,
                         MakeJwtPlaceholder(salt_, location_.workspace, c.id + ":id",
                                            c.oauth.id_token));
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

Result<size_t> CopyCredentialsForFork(const VaultLocation& from, const VaultLocation& to,
                                      KeyBackend backend) {
  ASSIGN_OR_RETURN(Vault source, Vault::Open(from, backend));
  ASSIGN_OR_RETURN(Vault fork, Vault::Open(to, backend));
  size_t copied = 0;
  for (const Credential& c : source.credentials()) {
    if (IsSubscriptionKind(c.kind)) continue;  // SECURITY: a login stays in one workspace
    fork.Put(c);
    RETURN_IF_ERROR(fork.SetPolicy(c.id, c.ask, c.allow_paths));
    ++copied;
  }
  fork.set_llm_body_policy(source.llm_body_policy());
  RETURN_IF_ERROR(fork.Save());
  return copied;
}

}  // namespace cloister::vault

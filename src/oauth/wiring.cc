#include "oauth/wiring.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "vault/crypto.h"
#include "vault/placeholder.h"

namespace cloister::oauth {

Result<std::shared_ptr<OauthFilter>> AddOauthFilters(
    proxy::ProxyConfig& cfg, LoginCustody::PersistFn persist,
    std::vector<vault::BoundCredential> capture_slots, LoginCustody::PersistFn create) {
  std::shared_ptr<proxy::TraceSink> trace = cfg.trace;
  auto trace_fn = [trace](const proxy::TraceRecord& rec) {
    if (trace) trace->Write(rec);
  };
  std::vector<std::shared_ptr<LoginCustody>> logins;
  std::vector<vault::BoundCredential> extra;
  // The slots join the credentials: their access placeholder is then scoped to the API hosts
  // by the detector exactly as a held login's (after BuildGuestCredentials: no guest file).
  for (vault::BoundCredential& slot : capture_slots) {
    if (!vault::IsSubscriptionKind(slot.credential.kind) || !slot.credential.value.empty()) {
      return Error(ErrorCode::kInvalidArgument, "not a capture slot: " + slot.credential.id);
    }
    cfg.credentials.push_back(std::move(slot));
  }
  for (size_t i = 0; i < cfg.credentials.size(); ++i) {
    vault::BoundCredential& b = cfg.credentials[i];
    const vault::Credential& c = b.credential;
    if (!vault::IsSubscriptionKind(c.kind)) continue;
    if (b.refresh_placeholder.empty() || b.placeholder.empty()) {
      return Error(ErrorCode::kInvalidArgument, "login " + c.id + " has no placeholders");
    }
    auto entry = [&](const std::string& suffix, const std::string& ph) {
      vault::BoundCredential e;
      // kHeader with no header name: detector only (no substitution, not an LLM host).
      e.credential.kind = vault::CredentialKind::kHeader;
      e.credential.id = c.id + suffix;
      e.credential.hosts = c.oauth.token_hosts;
      e.placeholder = ph;
      extra.push_back(std::move(e));
    };
    entry(":refresh", b.refresh_placeholder);
    if (c.kind == vault::CredentialKind::kChatgptSubscription) {
      if (b.id_token_placeholder.empty()) {
        return Error(ErrorCode::kInvalidArgument, "login " + c.id + " has no id token placeholder");
      }
      entry(":id", std::string(vault::JwtSignature(b.id_token_placeholder)));
    }
    logins.push_back(std::make_shared<LoginCustody>(b, persist, trace_fn, nullptr, create));
    if (c.kind == vault::CredentialKind::kChatgptSubscription) {
      b.placeholder = std::string(vault::JwtSignature(b.placeholder));
    }
    // SECURITY: the proxy's own copy of the tokens goes; the custody holds the live ones.
    vault::SecureWipe(b.credential.value);
    vault::SecureWipe(b.credential.oauth.refresh_token);
    vault::SecureWipe(b.credential.oauth.id_token);
    b.credential.value.clear();
    b.credential.oauth.refresh_token.clear();
    b.credential.oauth.id_token.clear();
  }
  for (auto& e : extra) cfg.credentials.push_back(std::move(e));
  auto filter = std::make_shared<OauthFilter>(std::move(logins), cfg.workspace);
  cfg.extension_filters.push_back(filter);
  return filter;
}

LoginCustody::PersistFn VaultPersister(vault::VaultLocation location, vault::KeyBackend backend,
                                       std::string lock_path, bool create, Env* env) {
  if (env == nullptr) env = Env::Default();
  return [location, backend, lock_path, create, env](const vault::Credential& login) -> Status {
    int fd = -1;
    if (!lock_path.empty()) {
      fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) {
        return Error(ErrorCode::kIo, "open " + lock_path + ": " + std::strerror(errno));
      }
      while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        int e = errno;
        close(fd);
        return Error(ErrorCode::kIo, "flock " + lock_path + ": " + std::strerror(e));
      }
    }
    struct Unlock {
      int fd;
      ~Unlock() {
        if (fd >= 0) close(fd);  // closing releases the flock
      }
    } unlock{fd};
    ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(location, backend));
    if (!create && v.Find(login.id) == nullptr) {
      // `cred rm` ran while the workspace was up: the login was let go, do not resurrect it.
      return Error(ErrorCode::kNotFound, "login " + login.id + " was removed from the vault");
    }
    v.Put(login);
    return v.Save([env](const std::string& path, std::string_view data, uint32_t mode) {
      return env->AtomicWriteFile(path, std::string(data), mode);
    });
  };
}

}  // namespace cloister::oauth

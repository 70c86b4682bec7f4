#include "devcontainer/env_check.h"

#include <set>

#include "base/strings.h"
#include "vault/credential.h"
#include "vault/credential_shape.h"

namespace cloister::devcontainer {
namespace {

std::string EnvUpper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return s;
}

bool ValidEnvName(const std::string& n) {
  if (n.empty() || n.size() > 256 || (n[0] >= '0' && n[0] <= '9')) return false;
  for (char c : n) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// Upper-cased names cloister sets in the guest itself.
const std::set<std::string>& ReservedEnv() {
  static const std::set<std::string> names = [] {
    std::set<std::string> s = {"HTTP_PROXY",  "HTTPS_PROXY",     "ALL_PROXY",  "NO_PROXY",
                               "FTP_PROXY",   "PIP_PROXY",       "SSL_CERT_FILE", "SSL_CERT_DIR",
                               "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                               "GIT_SSL_CAINFO", "HOME", "USER", "LOGNAME", "SHELL", "TERM"};
    for (vault::CredentialKind k : vault::AllCredentialKinds()) {
      for (const std::string& v : vault::InfoFor(k).env_vars) s.insert(EnvUpper(v));
    }
    return s;
  }();
  return names;
}

}  // namespace

Status CheckContainerEnv(const std::map<std::string, std::string>& env, const std::string& where) {
  for (const auto& [name, value] : env) {
    std::string what = where + " \"" + name + "\"";
    if (!ValidEnvName(name)) {
      return Error(ErrorCode::kInvalidArgument, what + ": not a variable name",
                   "names are letters, digits and '_', not starting with a digit");
    }
    std::string upper = EnvUpper(name);
    if (ReservedEnv().count(upper) || StartsWith(upper, "NPM_CONFIG_")) {
      return Error(ErrorCode::kInvalidArgument,
                   what + ": cloister sets this variable in the workspace itself (its egress "
                          "proxy, CA, user or credential placeholders)",
                   "remove it from containerEnv; credentials go in with `cloister cred add`");
    }
    if (value.find('\0') != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument, what + ": a NUL byte in the value");
    }
    if (value.find("${localEnv:") != std::string::npos ||
        value.find("${localWorkspaceFolder") != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument,
                   what + ": takes a value from the host (${localEnv:...} or "
                          "${localWorkspaceFolder}); cloister never copies the host's environment "
                          "into the guest",
                   "write the value out; for a credential, `cloister cred add NAME KIND` gives "
                   "the guest a placeholder and keeps the real value on the host");
    }
    if (value.find("${") != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument,
                   what + ": a ${...} variable, which cloister does not substitute",
                   "write the value out");
    }
    if (auto shape = vault::CredentialShape(name, value)) {
      // SECURITY: the message names the shape, never the value.
      return Error(ErrorCode::kPermissionDenied,
                   what + " looks like a credential (" + *shape +
                       "): a real key never goes into the guest",
                   "remove it and run `cloister cred add NAME KIND` (the guest then gets a "
                   "placeholder, and the proxy puts the real value in on the way out)");
    }
  }
  return OkStatus();
}

}  // namespace cloister::devcontainer

#include "vault/guest_files.h"

namespace cloister::vault {

GuestCredentials BuildGuestCredentials(const std::vector<BoundCredential>& creds) {
  GuestCredentials out;
  std::string git_credentials;
  std::string gh_hosts;
  for (const BoundCredential& b : creds) {
    const Credential& c = b.credential;
    for (const std::string& var : InfoFor(c.kind).env_vars) out.env[var] = b.placeholder;
    if (c.kind == CredentialKind::kGithub) {
      for (const std::string& host : c.hosts) {
        if (host == "githubusercontent.com") continue;
        // git sends Basic x-access-token:<token>; the proxy swaps the password part.
        git_credentials += "https://x-access-token:" + b.placeholder + "@" + host + "\n";
        gh_hosts += host + ":\n    oauth_token: " + b.placeholder +
                    "\n    user: x-access-token\n    git_protocol: https\n";
      }
    } else if (c.kind == CredentialKind::kAws && c.id != "aws:session-token") {
      // The real key id (not secret; it must match what the proxy re-signs for) with the
      // placeholder secret and token: every AWS SDK and the CLI read these.
      out.env["AWS_ACCESS_KEY_ID"] = c.aws_access_key_id;
      out.env["AWS_SECRET_ACCESS_KEY"] = b.placeholder;
      if (!b.aws_token_placeholder.empty()) out.env["AWS_SESSION_TOKEN"] = b.aws_token_placeholder;
      if (!c.aws_region.empty()) {
        out.env["AWS_REGION"] = c.aws_region;
        out.env["AWS_DEFAULT_REGION"] = c.aws_region;
      }
    } else if (c.kind == CredentialKind::kGitlab) {
      for (const std::string& host : c.hosts) {
        git_credentials += "https://oauth2:" + b.placeholder + "@" + host + "\n";
      }
    }
  }
  if (!git_credentials.empty()) {
    out.files.push_back({".git-credentials", git_credentials, 0600});
    // git reads ~/.git-credentials only through the "store" helper: enable it for every git in
    // the guest without writing a config file the user owns (git >= 2.31 reads these).
    out.env["GIT_CONFIG_COUNT"] = "1";
    out.env["GIT_CONFIG_KEY_0"] = "credential.helper";
    out.env["GIT_CONFIG_VALUE_0"] = "store";
  }
  if (!gh_hosts.empty()) out.files.push_back({".config/gh/hosts.yml", gh_hosts, 0600});
  return out;
}

}  // namespace cloister::vault

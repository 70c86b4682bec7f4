// `cloister cred ls NAME [--json]`: the workspace's credentials, never their values (placeholders,
// scopes, policies; a login's account, plan, expiry and refresh record).
#include <termios.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <optional>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/cred_verbs.h"
#include "cli/vault_access.h"
#include "oauth/host_login.h"
#include "store/layout.h"
#include "store/store.h"
#include "supervisor/consent.h"
#include "supervisor/control.h"
#include "vault/crypto.h"
#include "vault/vault.h"


namespace cloister::cli {

std::string CredTime(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}


void AddCredLsVerb(CLI::App& cred, Cli& cli) {
  auto name = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* ls = cred.add_subcommand("ls", "List a workspace's credentials (never their values)");
  ls->add_option("NAME", *name, "Workspace")->required();
  ls->add_flag("--json", *json, "Print as JSON");
  ls->callback([&cli, name, json] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(VaultAccess access, OpenVaultAccess(cli, *name, /*mutate=*/false));
      ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(access.location));
      nlohmann::json arr = nlohmann::json::array();
      // Bind: the guest's placeholders as the proxy uses them (a ChatGPT login's are JWTs).
      ASSIGN_OR_RETURN(std::vector<vault::BoundCredential> bound, v.Bind());
      for (const vault::BoundCredential& b : bound) {
        const vault::Credential& c = b.credential;
        const std::string& ph = b.placeholder;
        arr.push_back({{"id", c.id}, {"kind", vault::KindName(c.kind)}, {"hosts", c.hosts},
                       {"header", c.header}, {"body", c.body_substitution},
                       {"ask", vault::ConsentAskName(c.ask)}, {"placeholder", ph}});
        if (c.kind == vault::CredentialKind::kAws) {
          arr.back()["aws_access_key_id"] = c.aws_access_key_id;  // not secret
          arr.back()["aws_region"] = c.aws_region;
          arr.back()["aws_session_token"] = !c.aws_session_token.empty();
        }
        if (vault::IsSubscriptionKind(c.kind)) {
          // Not secret: what the login is, whose, until when, and when it was last refreshed
          // (the running workspace's refreshes are saved here).
          const vault::OauthLogin& l = c.oauth;
          // The paths of its API host the token is used on besides its client's own.
          arr.back()["allow_paths"] = c.allow_paths;
          arr.back()["login"] = {{"account", l.account},
                                 {"plan", l.plan},
                                 {"scopes", l.scopes},
                                 {"token_hosts", l.token_hosts},
                                 {"expires_at", CredTime(l.expires_at_ms / 1000)},
                                 {"last_refresh", CredTime(l.last_refresh)},
                                 {"source", l.source.empty() ? "import" : l.source}};
          // The refresh record (oauth/custody.h): the last failure, and a refresh sent whose
          // answer was never saved (a crash: the stored refresh token may be retired).
          if (!l.refresh_error.empty()) {
            arr.back()["login"]["refresh_error"] = l.refresh_error;
            arr.back()["login"]["refresh_error_at"] = CredTime(l.refresh_error_at);
          }
          if (l.refresh_started_at != 0) {
            arr.back()["login"]["refresh_pending_since"] = CredTime(l.refresh_started_at);
          }
        }
      }
      if (*json) {
        // "vault_key": where the master key lives, "secret-service" or "file" (vault/keys.h).
        cli.PrintJson({{"workspace", *name}, {"credentials", arr},
                       {"llm_body", vault::LlmBodyPolicyName(v.llm_body_policy())},
                       {"vault_key", v.key_backend()}});
        return OkStatus();
      }
      if (arr.empty()) {
        cli.out() << "No credentials in " << *name << "\n";
        return OkStatus();
      }
      for (const auto& c : arr) {
        std::string hosts = Join(c["hosts"].get<std::vector<std::string>>(), ",");
        if (c.contains("login")) {
          const auto& l = c["login"];
          std::string account = l["account"].get<std::string>();
          cli.out() << c["id"].get<std::string>() << "\t" << hosts << "\tlogin "
                    << (account.empty() ? "-" : account) << " "
                    << (l["plan"].get<std::string>().empty() ? "-" : l["plan"].get<std::string>())
                    << " expires " << l["expires_at"].get<std::string>() << " refreshed "
                    << l["last_refresh"].get<std::string>() << "\t"
                    << c["placeholder"].get<std::string>() << "\n";
          if (l.contains("refresh_error")) {
            cli.out() << "  refresh failed " << l["refresh_error_at"].get<std::string>() << ": "
                      << l["refresh_error"].get<std::string>() << "\n";
          }
          if (l.contains("refresh_pending_since")) {
            cli.out() << "  refresh sent " << l["refresh_pending_since"].get<std::string>()
                      << " and not saved (in flight, or interrupted: if the workspace is not "
                         "running, the login may be lost; log in again in the workspace or "
                         "`cloister cred import`)\n";
          }
          if (c["ask"] != "off") cli.out() << "  ask: " << c["ask"].get<std::string>() << "\n";
          for (const auto& p : c["allow_paths"]) {
            cli.out() << "  also used on: " << p.get<std::string>() << "\n";
          }
          continue;
        }
        cli.out() << c["id"].get<std::string>() << "\t" << hosts << "\t"
                  << (c["kind"] == "aws"      ? "re-sign"
                      : c["body"].get<bool>() ? "headers+body"
                                              : "headers")
                  << "\t"
                  << c["placeholder"].get<std::string>();
        if (c["ask"] != "off") cli.out() << "\task:" << c["ask"].get<std::string>();
        cli.out() << "\n";
      }
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

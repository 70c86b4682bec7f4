// `cloister cred import NAME claude|codex`: a subscription login of the host taken into the
// workspace's custody (src/oauth). SECURITY: tokens are read from the client's own file, never
// argv; nothing here prints one.
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
namespace {

// Two workspaces never share one login: the provider rotates the refresh token at every refresh,
// so the first workspace to refresh would log the other out (and a reuse of the retired token
// can make the provider revoke the login altogether). Returns the other workspace holding the
// same refresh token, or "".
// SECURITY: compares tokens in memory only; each vault is wiped when it goes out of scope.
Result<std::string> WorkspaceHoldingLogin(Cli& cli, const std::string& self,
                                          const vault::Credential& login) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
  ASSIGN_OR_RETURN(std::vector<WorkspaceSummary> all, store->List());
  for (const WorkspaceSummary& w : all) {
    if (w.name == self) continue;
    vault::VaultLocation loc{JoinPath(store->root(), layout::kKeysDir), store->Paths(w.name).secrets,
                             w.name};
    auto v = vault::Vault::Open(loc);
    if (!v.ok()) {
      // Fail closed: a vault we cannot read might hold this login.
      return Error(ErrorCode::kFailedPrecondition,
                   "cannot check workspace " + w.name + " for this login: " + v.error().message(),
                   "fix or remove that workspace's secrets file, then import again");
    }
    for (const vault::Credential& c : v->credentials()) {
      if (c.kind == login.kind && (c.oauth.refresh_token == login.oauth.refresh_token ||
                                   c.value == login.value)) {
        return w.name;
      }
    }
  }
  return std::string();
}

}  // namespace

void AddCredImportVerb(CLI::App& cred, Cli& cli) {
  struct Opts {
    std::string name, provider, from;
    std::vector<std::string> hosts;
  };
  auto o = std::make_shared<Opts>();
  auto* imp = cred.add_subcommand(
      "import",
      "Take a subscription login of the host into the workspace's custody: `claude` reads "
      "Claude Code's ~/.claude/.credentials.json ($CLAUDE_CONFIG_DIR), `codex` reads Codex's "
      "~/.codex/auth.json ($CODEX_HOME). The real tokens go into the encrypted vault; the guest "
      "gets the same file with placeholders from the next start on, and the workspace refreshes "
      "the login on the host. The host's own client then has to log in again once the "
      "workspace refreshes (the provider rotates refresh tokens). One login serves one "
      "workspace: importing it into a second one is refused.");
  imp->add_option("NAME", o->name, "Workspace")->required();
  imp->add_option("PROVIDER", o->provider, "claude or codex")->required();
  imp->add_option("--from", o->from, "Read this credentials file instead of the client's own");
  imp->add_option("--host", o->hosts,
                  "API host the access token belongs to (exact or subdomain); repeatable; "
                  "replaces the default (claude: api.anthropic.com, codex: chatgpt.com)");
  imp->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(oauth::Provider provider, oauth::ParseProvider(o->provider));
      std::string path = o->from;
      if (path.empty()) {
        ASSIGN_OR_RETURN(path, oauth::HostLoginPath(provider));
      }
      auto text = vault::ReadSmallFile(path, 1 << 20);
      if (!text.ok()) {
        return text.error().WithContext(path).WithHint(
            provider == oauth::Provider::kClaude
                ? "log in on the host first (`claude`, then /login), or pass --from FILE"
                : "log in on the host first (`codex login`), or pass --from FILE");
      }
      int64_t now = static_cast<int64_t>(time(nullptr));
      Result<vault::Credential> made = Error(ErrorCode::kInternal, "unset");
      if (provider == oauth::Provider::kClaude) {
        std::string claude_json;
        if (const char* home = std::getenv("HOME"); home && o->from.empty()) {
          auto cj = vault::ReadSmallFile(std::string(home) + "/.claude.json", 8 << 20);
          if (cj.ok()) claude_json = std::move(cj).value();
        }
        made = oauth::LoginFromClaudeFile(*text, claude_json, now);
      } else {
        made = oauth::LoginFromCodexFile(*text, now);
      }
      vault::SecureWipe(text.value());
      if (!made.ok()) return made.error().WithContext(path);
      vault::Credential c = std::move(made).value();
      if (!o->hosts.empty()) {
        c.hosts.clear();
        for (const std::string& h : o->hosts) {
          ASSIGN_OR_RETURN(std::string n, vault::NormalizeScopeHost(h));
          c.hosts.push_back(n);
        }
      }
      ASSIGN_OR_RETURN(VaultAccess access, OpenVaultAccess(cli, o->name, /*mutate=*/true));
      ASSIGN_OR_RETURN(std::string other, WorkspaceHoldingLogin(cli, o->name, c));
      if (!other.empty()) {
        return Error(ErrorCode::kAlreadyExists,
                     "this login is already in the custody of workspace " + other +
                         "; two workspaces never share one refresh token (the first refresh "
                         "would log the other out)",
                     "log in again on the host and import that new login, or first `cloister "
                     "cred rm " + other + " " + vault::KindName(c.kind) + "`");
      }
      ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(access.location));
      std::string id = c.id, account = c.oauth.account, plan = c.oauth.plan;
      int64_t expires = c.oauth.expires_at_ms / 1000;
      v.Put(std::move(c));
      RETURN_IF_ERROR(v.Save());
      cli.out() << "Imported " << id << " (" << (account.empty() ? "account unknown" : account)
                << (plan.empty() ? "" : ", " + plan) << ", access token expires "
                << CredTime(expires) << ") into " << o->name << "\n"
                << "The guest gets placeholders in "
                << (provider == oauth::Provider::kClaude ? "~/.claude/.credentials.json"
                                                         : "~/.codex/auth.json")
                << " from its next start; the workspace refreshes the login on the host.\n"
                << "Note: once the workspace refreshes it, the provider retires this refresh "
                   "token, and the host's own "
                << (provider == oauth::Provider::kClaude ? "Claude Code" : "Codex")
                << " will have to log in again ("
                << (provider == oauth::Provider::kClaude ? "`claude`, then /login"
                                                         : "`codex login`")
                << ").\n";
      NoteRunning(cli, access, o->name);
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

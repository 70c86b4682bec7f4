// `cloister cred policy NAME [CRED] [--ask ...] [--llm-body ...]` and `cloister cred revoke NAME
// CRED`: a workspace's credential policies (kept in the vault) and the running supervisor's
// consent grants (supervisor/consent.h).
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/cred_verbs.h"
#include "cli/vault_access.h"
#include "oauth/api_paths.h"
#include "oauth/host_login.h"
#include "store/layout.h"
#include "store/store.h"
#include "supervisor/consent.h"
#include "supervisor/control.h"
#include "vault/crypto.h"
#include "vault/vault.h"


namespace cloister::cli {

void AddCredPolicyVerb(CLI::App& cred, Cli& cli) {
  struct Opts {
    std::string name, cred, llm_body, ask;
    std::vector<std::string> allow_paths, remove_paths;
  };
  auto o = std::make_shared<Opts>();
  auto* pol = cred.add_subcommand(
      "policy",
      "Show or set a workspace's credential policies: --llm-body, what the proxy does with a "
      "placeholder found in a request body sent to an LLM provider ('flag': forward, record in "
      "the trace; default; 'block': refuse, pause the VM and mark the workspace compromised); "
      "and, for one credential CRED, --ask: 'once' (its first use waits for `cloister approve "
      "NAME`, the grant's length decides after that), 'always' (every use asks) or 'off'; for a "
      "subscription login (claude-subscription, chatgpt-subscription), --allow-path: a path of "
      "its API host its token is also used on (by default only the paths its pinned client needs "
      "for inference and its login; a path that mints a credential is never allowed). A policy "
      "is changed only here: adding or importing a credential again, and a login captured in the "
      "workspace or refreshed, keep it");
  pol->add_option("NAME", o->name, "Workspace")->required();
  pol->add_option("CRED", o->cred,
                  "Credential id for --ask (`cloister cred ls NAME`: anthropic, github, "
                  "header:x-api-key, ...)");
  pol->add_option("--llm-body", o->llm_body, "flag or block");
  pol->add_option("--ask", o->ask, "With CRED: once, always or off");
  pol->add_option("--allow-path", o->allow_paths,
                  "With a login CRED: also use its token on this path of its API host, exact "
                  "(/v1/files) or everything below (/v1/files/*); repeatable");
  pol->add_option("--remove-path", o->remove_paths,
                  "With a login CRED: stop using its token on a path --allow-path added");
  pol->callback([&cli, o] {
    auto run = [&]() -> Status {
      std::optional<vault::LlmBodyPolicy> set;
      if (!o->llm_body.empty()) {
        ASSIGN_OR_RETURN(vault::LlmBodyPolicy p, vault::ParseLlmBodyPolicy(o->llm_body));
        set = p;
      }
      std::optional<vault::ConsentAsk> ask;
      if (!o->ask.empty()) {
        if (o->cred.empty()) {
          return Error(ErrorCode::kInvalidArgument, "--ask needs the credential it is for",
                       "`cloister cred policy " + o->name + " CRED --ask " + o->ask +
                           "` (CRED from `cloister cred ls " + o->name + "`)");
        }
        ASSIGN_OR_RETURN(vault::ConsentAsk a, vault::ParseConsentAsk(o->ask));
        ask = a;
      }
      const bool paths = !o->allow_paths.empty() || !o->remove_paths.empty();
      if (paths && o->cred.empty()) {
        return Error(ErrorCode::kInvalidArgument, "--allow-path needs the login it is for",
                     "`cloister cred policy " + o->name + " claude-subscription --allow-path PATH`");
      }
      ASSIGN_OR_RETURN(VaultAccess access,
                       OpenVaultAccess(cli, o->name, set.has_value() || ask.has_value() || paths));
      ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(access.location));
      const vault::Credential* target = nullptr;
      if (!o->cred.empty()) {
        target = v.Find(ToLower(o->cred));
        if (!target) {
          return Error(ErrorCode::kNotFound,
                       "no credential " + o->cred + " in workspace " + o->name,
                       "see `cloister cred ls " + o->name + "` (ids: anthropic, github, "
                       "header:x-api-key, ...)");
        }
      }
      if (set) v.set_llm_body_policy(*set);
      if (ask || paths) {
        std::vector<std::string> allowed = target->allow_paths;
        if (paths && !vault::IsSubscriptionKind(target->kind)) {
          return Error(ErrorCode::kInvalidArgument,
                       "--allow-path is for subscription logins; " + target->id +
                           " is used wherever its hosts are",
                       "narrow its hosts instead (`cloister cred add " + o->name + " KIND --host`)");
        }
        for (const std::string& p : o->allow_paths) {
          ASSIGN_OR_RETURN(std::string path, oauth::ParseAllowedPath(target->kind, p));
          if (std::find(allowed.begin(), allowed.end(), path) == allowed.end()) {
            allowed.push_back(path);
          }
        }
        for (const std::string& p : o->remove_paths) {
          auto it = std::find(allowed.begin(), allowed.end(), p);
          if (it == allowed.end()) {
            return Error(ErrorCode::kNotFound, target->id + " has no allowed path " + p,
                         "see `cloister cred policy " + o->name + " " + target->id + "`");
          }
          allowed.erase(it);
        }
        std::string id = target->id;
        RETURN_IF_ERROR(v.SetPolicy(id, ask ? *ask : target->ask, std::move(allowed)));
        target = v.Find(id);
      }
      if (set || ask || paths) RETURN_IF_ERROR(v.Save());
      if (target) {
        cli.out() << target->id << " ask: " << vault::ConsentAskName(target->ask) << "\n";
        for (const std::string& p : target->allow_paths) {
          cli.out() << target->id << " allowed path: " << p << "\n";
        }
        if (ask && *ask != vault::ConsentAsk::kOff) {
          cli.err() << "cloister: uses of " << target->id << " wait for `cloister approve "
                    << o->name << "` (refused when nobody answers)\n";
        }
      } else {
        cli.out() << "llm-body: " << vault::LlmBodyPolicyName(v.llm_body_policy()) << "\n";
        for (const vault::Credential& c : v.credentials()) {
          if (c.ask != vault::ConsentAsk::kOff) {
            cli.out() << c.id << " ask: " << vault::ConsentAskName(c.ask) << "\n";
          }
        }
      }
      NoteRunning(cli, access, o->name);
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

void AddCredRevokeVerb(CLI::App& cred, Cli& cli) {
  struct Opts {
    std::string name, cred;
  };
  auto o = std::make_shared<Opts>();
  auto* rev = cred.add_subcommand(
      "revoke",
      "End the running workspace's consent grants of CRED now (the next use asks again). "
      "Grants live only in the supervisor's memory; a stopped workspace holds none");
  rev->add_option("NAME", o->name, "Workspace")->required();
  rev->add_option("CRED", o->cred, "Credential id (`cloister cred ls NAME`), or '*' for all")
      ->required();
  rev->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
      ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(o->name));
      (void)config;
      std::string cred = o->cred == "*" ? "*" : ToLower(o->cred);
      Result<nlohmann::json> r = vm::ControlRequest(store->Paths(o->name).supervisor_socket,
                                                    {{"op", vm::kConsentRevokeOp}, {"cred", cred}},
                                                    std::chrono::seconds(10));
      if (!r.ok()) {
        if (r.error().code() == ErrorCode::kUnavailable ||
            r.error().message().find("connect") != std::string::npos) {
          cli.out() << o->name << " is not running: it holds no grants\n";
          return OkStatus();
        }
        return r.error();
      }
      uint64_t n = r->value("revoked", uint64_t{0});
      cli.out() << "Revoked " << n << " grant" << (n == 1 ? "" : "s") << " of "
                << (cred == "*" ? std::string("every credential") : cred) << " in " << o->name
                << "\n";
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

// cloister cred add|ls|rm|policy: the workspace's credentials (src/vault).
//
// SECURITY: values come from stdin or --from-env VAR, never from argv (argv is visible to every
// user through /proc). Nothing here prints a real value; `ls` shows placeholders.
#include <termios.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "vault/crypto.h"
#include "vault/vault.h"

namespace cloister::cli {
namespace {

// TODO(store): switch to store/layout.h names and the store's workspace lookup + lock once they
// land on main; these mirror the layout the vm and store engineers agreed on.
Result<vault::VaultLocation> Locate(Cli& cli, const std::string& name) {
  if (name.empty() || name.size() > 64 || name.find('/') != std::string::npos || name[0] == '.') {
    return Error(ErrorCode::kInvalidArgument, "invalid workspace name: " + name);
  }
  std::string root = cli.StoreRoot();
  std::string ws = root + "/workspaces/" + name;
  std::error_code ec;
  if (!std::filesystem::is_directory(ws, ec)) {
    return Error(ErrorCode::kNotFound, "no workspace named " + name,
                 "see `cloister ls`, or create it first");
  }
  return vault::VaultLocation{root + "/keys", ws + "/" + vault::kSecretsFile, name};
}

// Reads one line from stdin without echo when it is a terminal.
Result<std::string> ReadSecret(Cli& cli, const std::string& from_env) {
  if (!from_env.empty()) {
    const char* v = std::getenv(from_env.c_str());
    if (!v || !*v) {
      return Error(ErrorCode::kInvalidArgument, "environment variable " + from_env + " is empty");
    }
    return std::string(v);
  }
  bool tty = cli.stdin_is_tty ? cli.stdin_is_tty() : isatty(STDIN_FILENO) == 1;
  termios saved{};
  bool echo_off = false;
  if (tty) {
    cli.err() << "Value (input hidden): " << std::flush;
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
      termios t = saved;
      t.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      echo_off = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    }
  }
  std::string line;
  bool got = static_cast<bool>(std::getline(cli.in(), line));
  if (echo_off) {
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    cli.err() << "\n";
  }
  if (!got || Trim(line).empty()) {
    return Error(ErrorCode::kInvalidArgument, "no credential value on stdin",
                 "pipe the value in (`cloister cred add NAME KIND < file`) or use --from-env VAR");
  }
  return line;
}

}  // namespace

void AddCredCommand(CLI::App& app, Cli& cli) {
  auto* cred = app.add_subcommand("cred", "Manage a workspace's credentials (kept on the host)");
  cred->require_subcommand(1);

  {
    struct Opts {
      std::string name, kind, header, from_env;
      std::vector<std::string> hosts;
      bool body = false;
    };
    auto o = std::make_shared<Opts>();
    auto* add = cred->add_subcommand(
        "add",
        "Add or replace a credential. The value is read from stdin (or --from-env VAR), never "
        "from the command line. The guest only ever sees a placeholder.");
    add->add_option("NAME", o->name, "Workspace")->required();
    add->add_option("KIND", o->kind, "anthropic, openai, github, gitlab or header")->required();
    add->add_option("--host", o->hosts,
                    "Host the credential belongs to (exact or subdomain); repeatable; replaces "
                    "the kind's default hosts");
    add->add_option("--header", o->header, "Header name (kind 'header' only)");
    add->add_option("--from-env", o->from_env, "Read the value from this environment variable");
    add->add_flag("--body", o->body,
                  "Also substitute the placeholder inside request bodies (e.g. OAuth refresh)");
    add->callback([&cli, o] {
      auto run = [&]() -> Status {
        ASSIGN_OR_RETURN(vault::CredentialKind kind, vault::ParseKind(o->kind));
        ASSIGN_OR_RETURN(vault::VaultLocation loc, Locate(cli, o->name));
        ASSIGN_OR_RETURN(std::string value, ReadSecret(cli, o->from_env));
        auto made = vault::MakeCredential(kind, std::move(value), o->hosts, o->header, o->body);
        if (!made.ok()) return made.error();
        ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(loc));
        vault::Credential c = std::move(made).value();
        ASSIGN_OR_RETURN(std::string ph, v.PlaceholderFor(c));
        std::string id = c.id;
        std::string hosts = Join(c.hosts, ", ");
        v.Put(std::move(c));
        RETURN_IF_ERROR(v.Save());
        cli.out() << "Added " << id << " for " << hosts << " to " << o->name << "\n"
                  << "The guest sees: " << ph << "\n";
        return OkStatus();
      };
      if (Status st = run(); !st.ok()) cli.Fail(st.error());
    });
  }

  {
    auto name = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    auto* ls = cred->add_subcommand("ls", "List a workspace's credentials (never their values)");
    ls->add_option("NAME", *name, "Workspace")->required();
    ls->add_flag("--json", *json, "Print as JSON");
    ls->callback([&cli, name, json] {
      auto run = [&]() -> Status {
        ASSIGN_OR_RETURN(vault::VaultLocation loc, Locate(cli, *name));
        ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(loc));
        nlohmann::json arr = nlohmann::json::array();
        for (const vault::Credential& c : v.credentials()) {
          ASSIGN_OR_RETURN(std::string ph, v.PlaceholderFor(c));
          arr.push_back({{"id", c.id}, {"kind", vault::KindName(c.kind)}, {"hosts", c.hosts},
                         {"header", c.header}, {"body", c.body_substitution},
                         {"placeholder", ph}});
        }
        if (*json) {
          cli.PrintJson({{"workspace", *name}, {"credentials", arr},
                         {"llm_body", vault::LlmBodyPolicyName(v.llm_body_policy())}});
          return OkStatus();
        }
        if (arr.empty()) {
          cli.out() << "No credentials in " << *name << "\n";
          return OkStatus();
        }
        for (const auto& c : arr) {
          std::string hosts = Join(c["hosts"].get<std::vector<std::string>>(), ",");
          cli.out() << c["id"].get<std::string>() << "\t" << hosts << "\t"
                    << (c["body"].get<bool>() ? "headers+body" : "headers") << "\t"
                    << c["placeholder"].get<std::string>() << "\n";
        }
        return OkStatus();
      };
      if (Status st = run(); !st.ok()) cli.Fail(st.error());
    });
  }

  {
    struct Opts {
      std::string name, kind, header;
      bool yes = false;
    };
    auto o = std::make_shared<Opts>();
    auto* rm = cred->add_subcommand("rm", "Remove a credential from a workspace");
    rm->add_option("NAME", o->name, "Workspace")->required();
    rm->add_option("KIND", o->kind, "anthropic, openai, github, gitlab or header")->required();
    rm->add_option("--header", o->header, "Header name (kind 'header' only)");
    rm->add_flag("-f,--yes", o->yes, "Do not ask for confirmation");
    rm->callback([&cli, o] {
      auto run = [&]() -> Status {
        ASSIGN_OR_RETURN(vault::CredentialKind kind, vault::ParseKind(o->kind));
        if (kind == vault::CredentialKind::kHeader && o->header.empty()) {
          return Error(ErrorCode::kInvalidArgument, "kind 'header' needs --header NAME");
        }
        ASSIGN_OR_RETURN(vault::VaultLocation loc, Locate(cli, o->name));
        ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(loc));
        std::string id = vault::CredentialId(kind, o->header);
        if (!v.Find(id)) RETURN_IF_ERROR(v.Remove(id));  // the kNotFound error with its hint
        RETURN_IF_ERROR(cli.Confirm("Remove credential " + id + " from " + o->name + "?", o->yes));
        RETURN_IF_ERROR(v.Remove(id));
        RETURN_IF_ERROR(v.Save());
        cli.out() << "Removed " << id << " from " << o->name << "\n";
        return OkStatus();
      };
      if (Status st = run(); !st.ok()) cli.Fail(st.error());
    });
  }

  {
    auto name = std::make_shared<std::string>();
    auto llm_body = std::make_shared<std::string>();
    auto* pol = cred->add_subcommand(
        "policy",
        "Show or set what the proxy does with a placeholder found in a request body sent to an "
        "LLM provider: 'flag' (forward, record in the trace; default) or 'block' (refuse, pause "
        "the VM and mark the workspace compromised)");
    pol->add_option("NAME", *name, "Workspace")->required();
    pol->add_option("--llm-body", *llm_body, "flag or block");
    pol->callback([&cli, name, llm_body] {
      auto run = [&]() -> Status {
        ASSIGN_OR_RETURN(vault::VaultLocation loc, Locate(cli, *name));
        ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(loc));
        if (!llm_body->empty()) {
          ASSIGN_OR_RETURN(vault::LlmBodyPolicy p, vault::ParseLlmBodyPolicy(*llm_body));
          v.set_llm_body_policy(p);
          RETURN_IF_ERROR(v.Save());
        }
        cli.out() << "llm-body: " << vault::LlmBodyPolicyName(v.llm_body_policy()) << "\n";
        return OkStatus();
      };
      if (Status st = run(); !st.ok()) cli.Fail(st.error());
    });
  }
}

}  // namespace cloister::cli

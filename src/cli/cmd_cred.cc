// cloister cred add|import|ls|rm|policy|revoke: the workspace's credentials (src/vault;
// subscription logins: src/oauth). `policy NAME CRED --ask once|always|off` sets ask-before-use
// consent (proxy/consent_filter.h); `revoke NAME CRED` ends the running supervisor's grants of
// CRED (supervisor/consent.h).
//
// SECURITY: values come from stdin or --from-env VAR, never from argv (argv is visible to every
// user through /proc). Nothing here prints a real value; `ls` shows placeholders.
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

// What `cred add NAME aws` reads. SECURITY: secret and token; the caller wipes them.
struct AwsInput {
  std::string key_id, secret, token, region;
};

// Standard AWS_* assignments on stdin (`KEY=VALUE` lines, optional `export ` and quotes: what
// `aws configure export-credentials --format env` prints), or credential_process JSON
// ({"AccessKeyId","SecretAccessKey","SessionToken"}). Or, with --from-env PREFIX, the variables
// PREFIX_ACCESS_KEY_ID, PREFIX_SECRET_ACCESS_KEY, PREFIX_SESSION_TOKEN, PREFIX_REGION (or
// PREFIX_DEFAULT_REGION); `--from-env AWS` reads the standard ones. Never argv.
Result<AwsInput> ReadAwsInput(Cli& cli, const std::string& prefix) {
  AwsInput in;
  if (!prefix.empty()) {
    auto get = [&](const char* suffix) {
      const char* v = std::getenv((prefix + "_" + suffix).c_str());
      return std::string(v ? v : "");
    };
    in.key_id = get("ACCESS_KEY_ID");
    in.secret = get("SECRET_ACCESS_KEY");
    in.token = get("SESSION_TOKEN");
    in.region = get("REGION");
    if (in.region.empty()) in.region = get("DEFAULT_REGION");
    if (in.key_id.empty() || in.secret.empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   prefix + "_ACCESS_KEY_ID and " + prefix + "_SECRET_ACCESS_KEY must be set",
                   "`--from-env AWS` reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                   "AWS_SESSION_TOKEN and AWS_REGION");
    }
    return in;
  }
  constexpr size_t kMaxInput = 64 * 1024;
  std::string text;
  char buf[4096];
  while (cli.in().read(buf, sizeof buf) || cli.in().gcount() > 0) {
    text.append(buf, static_cast<size_t>(cli.in().gcount()));
    if (text.size() > kMaxInput) {
      vault::SecureWipe(text);
      return Error(ErrorCode::kInvalidArgument, "AWS credential input over 64 KiB");
    }
  }
  std::string trimmed = Trim(text);
  if (!trimmed.empty() && trimmed[0] == '{') {
    nlohmann::json j = nlohmann::json::parse(trimmed, nullptr, false);
    vault::SecureWipe(trimmed);
    vault::SecureWipe(text);
    if (j.is_discarded() || !j.is_object()) {
      return Error(ErrorCode::kInvalidArgument, "AWS credential JSON on stdin does not parse");
    }
    auto str = [&](const char* k) {
      return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
    };
    in.key_id = str("AccessKeyId");
    in.secret = str("SecretAccessKey");
    in.token = str("SessionToken");
    in.region = str("Region");
  } else {
    vault::SecureWipe(trimmed);
    for (std::string line : Split(text, '\n')) {
      line = Trim(line);
      if (line.rfind("export ", 0) == 0) line = Trim(line.substr(7));
      size_t eq = line.find('=');
      if (line.empty() || line[0] == '#' || eq == std::string::npos) {
        vault::SecureWipe(line);
        continue;
      }
      std::string key = Trim(line.substr(0, eq));
      std::string value = Trim(line.substr(eq + 1));
      if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
          value.back() == value.front()) {
        value = value.substr(1, value.size() - 2);
      }
      if (key == "AWS_ACCESS_KEY_ID") in.key_id = value;
      else if (key == "AWS_SECRET_ACCESS_KEY") in.secret = value;
      else if (key == "AWS_SESSION_TOKEN") in.token = value;
      else if (key == "AWS_REGION" || (key == "AWS_DEFAULT_REGION" && in.region.empty())) in.region = value;
      vault::SecureWipe(value);
      vault::SecureWipe(line);
    }
    vault::SecureWipe(text);
  }
  if (in.key_id.empty() || in.secret.empty()) {
    return Error(ErrorCode::kInvalidArgument, "no AWS access key id and secret on stdin",
                 "pipe `AWS_ACCESS_KEY_ID=...` and `AWS_SECRET_ACCESS_KEY=...` lines (optional "
                 "AWS_SESSION_TOKEN, AWS_REGION), or use --from-env AWS");
  }
  return in;
}

}  // namespace

void AddCredAddVerb(CLI::App& cred, Cli& cli) {
  struct Opts {
    std::string name, kind, header, from_env, region;
    std::vector<std::string> hosts;
    bool body = false;
    bool allow_llm_body = false;
  };
  auto o = std::make_shared<Opts>();
  auto* add = cred.add_subcommand(
      "add",
      "Add or replace a credential. The value is read from stdin (or --from-env VAR), never "
      "from the command line. The guest only ever sees a placeholder.");
  add->add_option("NAME", o->name, "Workspace")->required();
  add->add_option("KIND", o->kind, "anthropic, openai, github, gitlab, header or aws")->required();
  add->add_option("--host", o->hosts,
                  "Host the credential belongs to (exact or subdomain); repeatable; replaces "
                  "the kind's default hosts");
  add->add_option("--header", o->header, "Header name (kind 'header' only)");
  add->add_option("--from-env", o->from_env,
                  "Read the value from this environment variable (kind 'aws': a prefix; "
                  "`--from-env AWS` reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                  "AWS_SESSION_TOKEN and AWS_REGION)");
  add->add_option("--region", o->region, "Kind 'aws': the default region the guest gets");
  add->add_flag("--body", o->body,
                "Also substitute the placeholder inside request bodies (e.g. OAuth refresh). "
                "Refused for LLM-provider kinds (anthropic, openai) without --allow-llm-body");
  add->add_flag("--allow-llm-body", o->allow_llm_body,
                "With --body on an LLM-provider kind: substitute in request bodies anyway. The "
                "real value then enters the conversation, and a model that transforms it "
                "(spells, translates, encrypts it) can hand it to the guest in a form the "
                "proxy's response redaction does not know (docs/threat-model.md)");
  add->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(vault::CredentialKind kind, vault::ParseKind(o->kind));
      if (o->body && vault::InfoFor(kind).llm_provider && !o->allow_llm_body) {
        // SECURITY: in an LLM conversation the real value reaches a model that can return it
        // transformed past the response redaction (issue 15 item 4).
        return Error(ErrorCode::kInvalidArgument,
                     std::string("--body on an LLM-provider kind ('") + vault::InfoFor(kind).name +
                         "') puts the real key into conversations a model can echo back "
                         "transformed",
                     "drop --body (the key is substituted in its headers), or pass "
                     "--allow-llm-body if you accept that risk");
      }
      ASSIGN_OR_RETURN(VaultAccess access, OpenVaultAccess(cli, o->name, /*mutate=*/true));
      Result<vault::Credential> made = Error(ErrorCode::kInternal, "unset");
      if (kind == vault::CredentialKind::kAws) {
        if (!o->header.empty() || o->body) {
          return Error(ErrorCode::kInvalidArgument, "--header and --body do not apply to kind 'aws'");
        }
        ASSIGN_OR_RETURN(AwsInput in, ReadAwsInput(cli, o->from_env));
        if (!o->region.empty()) in.region = o->region;
        made = vault::MakeAwsCredential(std::move(in.key_id), std::move(in.secret),
                                        std::move(in.token), std::move(in.region), o->hosts);
        vault::SecureWipe(in.secret);
        vault::SecureWipe(in.token);
      } else {
        if (!o->region.empty()) {
          return Error(ErrorCode::kInvalidArgument, "--region is only for kind 'aws'");
        }
        ASSIGN_OR_RETURN(std::string value, ReadSecret(cli, o->from_env));
        made = vault::MakeCredential(kind, std::move(value), o->hosts, o->header, o->body);
      }
      if (!made.ok()) return made.error();
      ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(access.location));
      vault::Credential c = std::move(made).value();
      // SECURITY: replacing a credential (a new value) keeps its ask policy: rotating a key
      // must not silently turn consent off.
      if (const vault::Credential* old = v.Find(c.id)) c.ask = old->ask;
      const vault::ConsentAsk ask = c.ask;
      ASSIGN_OR_RETURN(std::string ph, v.PlaceholderFor(c));
      std::string id = c.id;
      std::string hosts = Join(c.hosts, ", ");
      v.Put(std::move(c));
      RETURN_IF_ERROR(v.Save());
      cli.out() << "Added " << id << " for " << hosts << " to " << o->name << "\n"
                << "The guest sees: " << ph << "\n";
      if (ask != vault::ConsentAsk::kOff) {
        cli.out() << "It asks before use (" << vault::ConsentAskName(ask) << ")\n";
      }
      NoteRunning(cli, access, o->name);
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

void AddCredRmVerb(CLI::App& cred, Cli& cli) {
  struct Opts {
    std::string name, kind, header;
    bool yes = false;
  };
  auto o = std::make_shared<Opts>();
  auto* rm = cred.add_subcommand("rm", "Remove a credential from a workspace");
  rm->add_option("NAME", o->name, "Workspace")->required();
  rm->add_option("KIND", o->kind,
                 "anthropic, openai, github, gitlab, header, aws, claude-subscription or "
                 "chatgpt-subscription (a login: both its tokens are forgotten)")
      ->required();
  rm->add_option("--header", o->header, "Header name (kind 'header' only)");
  rm->add_flag("-f,--yes", o->yes, "Do not ask for confirmation");
  rm->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(vault::CredentialKind kind, vault::ParseKind(o->kind));
      if (kind == vault::CredentialKind::kHeader && o->header.empty()) {
        return Error(ErrorCode::kInvalidArgument, "kind 'header' needs --header NAME");
      }
      ASSIGN_OR_RETURN(VaultAccess access, OpenVaultAccess(cli, o->name, /*mutate=*/true));
      ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(access.location));
      std::string id = vault::CredentialId(kind, o->header);
      if (!v.Find(id)) RETURN_IF_ERROR(v.Remove(id));  // the kNotFound error with its hint
      RETURN_IF_ERROR(cli.Confirm("Remove credential " + id + " from " + o->name + "?", o->yes));
      RETURN_IF_ERROR(v.Remove(id));
      RETURN_IF_ERROR(v.Save());
      cli.out() << "Removed " << id << " from " << o->name << "\n";
      NoteRunning(cli, access, o->name);
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

void AddCredCommand(CLI::App& app, Cli& cli) {
  auto* cred = app.add_subcommand("cred", "Manage a workspace's credentials (kept on the host)");
  cred->require_subcommand(1);
  AddCredAddVerb(*cred, cli);
  AddCredImportVerb(*cred, cli);
  AddCredLsVerb(*cred, cli);
  AddCredRmVerb(*cred, cli);
  AddCredPolicyVerb(*cred, cli);
  AddCredRevokeVerb(*cred, cli);
}

}  // namespace cloister::cli

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

std::string IsoUtc(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

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

void AddCredCommand(CLI::App& app, Cli& cli) {
  auto* cred = app.add_subcommand("cred", "Manage a workspace's credentials (kept on the host)");
  cred->require_subcommand(1);

  {
    struct Opts {
      std::string name, kind, header, from_env, region;
      std::vector<std::string> hosts;
      bool body = false;
      bool allow_llm_body = false;
    };
    auto o = std::make_shared<Opts>();
    auto* add = cred->add_subcommand(
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

  {
    struct Opts {
      std::string name, provider, from;
      std::vector<std::string> hosts;
    };
    auto o = std::make_shared<Opts>();
    auto* imp = cred->add_subcommand(
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
                  << IsoUtc(expires) << ") into " << o->name << "\n"
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

  {
    auto name = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    auto* ls = cred->add_subcommand("ls", "List a workspace's credentials (never their values)");
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
            arr.back()["login"] = {{"account", l.account},
                                   {"plan", l.plan},
                                   {"scopes", l.scopes},
                                   {"token_hosts", l.token_hosts},
                                   {"expires_at", IsoUtc(l.expires_at_ms / 1000)},
                                   {"last_refresh", IsoUtc(l.last_refresh)},
                                   {"source", l.source.empty() ? "import" : l.source}};
            // The refresh record (oauth/custody.h): the last failure, and a refresh sent whose
            // answer was never saved (a crash: the stored refresh token may be retired).
            if (!l.refresh_error.empty()) {
              arr.back()["login"]["refresh_error"] = l.refresh_error;
              arr.back()["login"]["refresh_error_at"] = IsoUtc(l.refresh_error_at);
            }
            if (l.refresh_started_at != 0) {
              arr.back()["login"]["refresh_pending_since"] = IsoUtc(l.refresh_started_at);
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

  {
    struct Opts {
      std::string name, kind, header;
      bool yes = false;
    };
    auto o = std::make_shared<Opts>();
    auto* rm = cred->add_subcommand("rm", "Remove a credential from a workspace");
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

  {
    struct Opts {
      std::string name, cred, llm_body, ask;
    };
    auto o = std::make_shared<Opts>();
    auto* pol = cred->add_subcommand(
        "policy",
        "Show or set a workspace's credential policies: --llm-body, what the proxy does with a "
        "placeholder found in a request body sent to an LLM provider ('flag': forward, record in "
        "the trace; default; 'block': refuse, pause the VM and mark the workspace compromised); "
        "and, for one credential CRED, --ask: 'once' (its first use waits for `cloister approve "
        "NAME`, the grant's length decides after that), 'always' (every use asks) or 'off'");
    pol->add_option("NAME", o->name, "Workspace")->required();
    pol->add_option("CRED", o->cred,
                    "Credential id for --ask (`cloister cred ls NAME`: anthropic, github, "
                    "header:x-api-key, ...)");
    pol->add_option("--llm-body", o->llm_body, "flag or block");
    pol->add_option("--ask", o->ask, "With CRED: once, always or off");
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
        ASSIGN_OR_RETURN(VaultAccess access,
                         OpenVaultAccess(cli, o->name, set.has_value() || ask.has_value()));
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
        if (ask) {
          vault::Credential c = *target;
          c.ask = *ask;
          v.Put(std::move(c));
          target = v.Find(ToLower(o->cred));
        }
        if (set || ask) RETURN_IF_ERROR(v.Save());
        if (target) {
          cli.out() << target->id << " ask: " << vault::ConsentAskName(target->ask) << "\n";
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

  {
    struct Opts {
      std::string name, cred;
    };
    auto o = std::make_shared<Opts>();
    auto* rev = cred->add_subcommand(
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
}

}  // namespace cloister::cli

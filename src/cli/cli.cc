#include "cli/cli.h"

#include <unistd.h>

#include <cstdlib>

#include "base/strings.h"
#include "base/terminal_text.h"
#include "cli/commands.h"
#include "cli/version.h"

namespace cloister::cli {

std::string Cli::StoreRoot() const {
  if (!store_flag_.empty()) return store_flag_;
  if (const char* h = std::getenv("CLOISTER_HOME"); h && *h) return h;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/cloister";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/root") + "/.local/share/cloister";
}

int Cli::Fail(const Error& error) {
  // SECURITY: a message may quote guest-chosen text (a path, a host, an agent's error).
  err_ << "cloister: error: " << TerminalSafe(error.message(), true) << "\n";
  if (!error.hint().empty()) err_ << "Hint: " << TerminalSafe(error.hint(), true) << "\n";
  exit_code = error.code() == ErrorCode::kInvalidArgument ? kExitUsage : kExitError;
  return exit_code;
}

Status Cli::Confirm(const std::string& prompt, bool assume_yes) {
  if (assume_yes) return OkStatus();
  bool tty = stdin_is_tty ? stdin_is_tty() : isatty(STDIN_FILENO) == 1;
  if (!tty) {
    return Error(ErrorCode::kCancelled, "confirmation needed but stdin is not a terminal",
                 "pass -f/--yes to confirm from a script");
  }
  err_ << prompt << " [y/N] " << std::flush;
  std::string answer;
  if (!std::getline(in_, answer)) answer.clear();
  answer = ToLower(Trim(answer));
  if (answer == "y" || answer == "yes") return OkStatus();
  return Error(ErrorCode::kCancelled, "cancelled; nothing was changed");
}

void Cli::PrintJson(const nlohmann::json& doc) { out_ << doc.dump(2) << "\n"; }

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
           std::istream& in) {
  Cli cli(out, err, in);
  CLI::App app{"cloister: one persistent, disposable VM per AI coding agent", "cloister"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("cloister ") + kCloisterVersion);
  app.add_option("--store", cli.store_flag(),
                 "Store root (default: $CLOISTER_HOME, else $XDG_DATA_HOME/cloister, else "
                 "~/.local/share/cloister)");
  // Read by main() before this parse (cli/remote.h): here they are only documented, and set
  // in-process they are an error, since only the binary's main drives a remote.
  std::string host_flag, context_flag;
  app.add_option("--host", host_flag,
                 "Run the verb on the cloister of another machine: ssh://[USER@]HOST[:PORT] "
                 "(also $CLOISTER_HOST); through your own ssh");
  app.add_option("--context", context_flag,
                 "Run the verb on a named context (cloister context ls; also $CLOISTER_CONTEXT)");
  AddAllCommands(app, cli);
  // A bare "--" ends cloister's own arguments: the rest is a guest command, kept verbatim.
  int own = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      own = i;
      cli.after_dashes.emplace(argv + i + 1, argv + argc);
      break;
    }
  }
  try {
    app.parse(own, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports --help and --version as ParseErrors with exit code 0.
    std::ostringstream o, er;
    int code = app.exit(e, o, er);
    out << o.str();
    err << er.str();
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (!host_flag.empty() || !context_flag.empty()) {
    err << "cloister: error: --host/--context are read by the cloister binary before the verb\n";
    return kExitUsage;
  }
  return cli.exit_code;
}

}  // namespace cloister::cli

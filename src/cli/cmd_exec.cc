// `cloister exec NAME [-i] [-t] [-u USER] [-e K=V]... [-w DIR] [--wait S] -- CMD...`: runs CMD in
// the workspace's VM through the guest agent; stdin/stdout/stderr stream both ways and the
// guest's exit code becomes ours (128+signal if it was killed). A booting workspace is waited for
// (lifecycle kWaitReady); a paused one refuses, and a session it was in ends naming the wipe.
#include <unistd.h>

#include <chrono>

#include "channel/exec_client.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "protocol/contract.h"
#include "store/store.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

void AddExecCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("exec", "Run a command in a running workspace's VM");
  struct Opts {
    std::string name;
    bool interactive = false;
    bool tty = false;
    std::string user = protocol::kGuestUser;
    std::vector<std::string> env;
    std::string cwd;
    std::vector<std::string> argv;
    unsigned wait = 600;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_flag("-i,--interactive", o->interactive, "Forward stdin to the command");
  cmd->add_flag("-t,--tty", o->tty, "Give the command a pseudo-terminal (window size follows)");
  cmd->add_option("-u,--user", o->user, "Guest user: dev (default) or root");
  cmd->add_option("-e,--env", o->env, "KEY=VALUE added to the command's environment");
  cmd->add_option("-w,--workdir", o->cwd, "Working directory in the guest (default: home)");
  cmd->add_option("--wait", o->wait,
                  "Seconds to wait for a booting workspace to be ready (default 600)");
  cmd->add_option("CMD", o->argv, "Command and arguments (after --)");
  cmd->footer(
      "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the command; a second one closes the "
      "session at once, and after SIGTERM or SIGHUP it closes by itself if the command has not "
      "exited within 5 s.");
  cmd->callback([&cli, o] {
    if (cli.after_dashes) o->argv.insert(o->argv.end(), cli.after_dashes->begin(), cli.after_dashes->end());
    if (o->argv.empty()) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "no command given",
                                  "cloister exec " + o->name + " -- CMD [ARGS...]"));
    }
    channel::ExecRequest req;
    req.argv = o->argv;
    req.user = o->user;
    req.cwd = o->cwd;
    req.tty = o->tty;
    for (const std::string& kv : o->env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "bad -e '" + kv + "'",
                                    "use -e KEY=VALUE"));
      }
      req.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    vm::ReadyWait wait;
    wait.action = lifecycle::Action::kExec;
    wait.timeout = std::chrono::seconds(o->wait);
    if (isatty(STDERR_FILENO)) wait.progress = &cli.err();  // boot stages, on a terminal only
    auto fd = vm::OpenExecStream(**store, o->name, {}, wait);
    if (!fd.ok()) return (void)cli.Fail(fd.error());
    cli.out() << std::flush;
    auto code = channel::RunExecInTerminal(*fd, req, o->interactive);
    close(*fd);
    if (!code.ok()) {
      return (void)cli.Fail(
          vm::ExplainEndedSession(**store, o->name, lifecycle::Action::kExec, code.error()));
    }
    cli.exit_code = *code;
  });
}

}  // namespace cloister::cli

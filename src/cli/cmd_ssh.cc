// `cloister ssh NAME [-t] [-- CMD...]`: OpenSSH's `ssh` to the workspace as dev, with the options
// `cloister ssh-config` writes (cli/ssh_config.h) given on its command line, so it works without
// any ssh config; the exit code is ssh's (the command's, or 255 for ssh's own errors).
// `cloister _ssh-stdio NAME` (hidden): the ProxyCommand of those blocks; joins stdin/stdout to a
// channel stream to the guest's `sshd` service (guest/sshd.h), opened through the supervisor
// (vm::OpenGuestStream: a booting workspace is waited for, a stopped or paused one refused).
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/file_util.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/ssh_access.h"
#include "protocol/contract.h"
#include "sshagent/ide_keys.h"
#include "store/store.h"
#include "supervisor/launcher.h"

extern char** environ;

namespace cloister::cli {
namespace {

// Copies stdin to `fd` and `fd` to stdout until the stream ends (half-close both ways: stdin's
// EOF becomes a shutdown of the stream's write side; the stream's EOF ends the relay).
//
// SECURITY: the stream's first bytes are the guest's. A refusal line (protocol's
// kSshdRefusedPrefix, an image without sshd) is read up to 512 bytes and becomes an error whose
// text is shown through TerminalSafe by the caller; anything else goes to ssh untouched.
Status Relay(int fd) {
  bool in_open = true;
  char buf[32 << 10];
  {
    const std::string_view prefix = protocol::kSshdRefusedPrefix;
    std::string head;
    while (head.size() < 512 && head.find('\n') == std::string::npos &&
           prefix.substr(0, std::min(head.size(), prefix.size())) ==
               std::string_view(head).substr(0, std::min(head.size(), prefix.size()))) {
      ssize_t n = read(fd, buf, std::min(sizeof buf, 512 - head.size()));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    if (head.size() >= prefix.size() && StartsWith(head, prefix)) {
      std::string why = head.substr(prefix.size());
      return Error(ErrorCode::kFailedPrecondition, why.substr(0, why.find('\n')));
    }
    RETURN_IF_ERROR(WriteAll(STDOUT_FILENO, head, "stdout"));
  }
  while (true) {
    pollfd p[2] = {{fd, POLLIN, 0}, {in_open ? STDIN_FILENO : -1, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll", errno);
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return OkStatus();  // sshd in the guest is done
      Status w = WriteAll(STDOUT_FILENO, std::string_view(buf, static_cast<size_t>(n)), "stdout");
      if (!w.ok()) return OkStatus();  // ssh went away
    }
    if (in_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        in_open = false;
        shutdown(fd, SHUT_WR);
        continue;
      }
      RETURN_IF_ERROR(WriteAll(fd, std::string_view(buf, static_cast<size_t>(n)), "the sshd stream"));
    }
  }
}

// Runs argv with our stdio, ignoring SIGINT/SIGQUIT meanwhile (they reach ssh through the
// terminal, as with system(3)); returns its exit code (128+signal if killed).
Result<int> RunInForeground(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  struct sigaction ign{}, old_int{}, old_quit{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t dfl;
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGINT);
  sigaddset(&dfl, SIGQUIT);
  sigaddset(&dfl, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);  // nothing of ours but stdio reaches ssh
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  int status = 0;
  if (rc == 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  if (rc != 0) {
    return Error(ErrorCode::kNotFound, "cannot run " + args[0] + ": " + std::strerror(rc),
                 "install OpenSSH's client (Debian: openssh-client)");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace

void AddSshCommand(CLI::App& app, Cli& cli) {
  struct Opts {
    std::string name;
    bool tty = false;
    std::vector<std::string> argv;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("ssh", "Log in to a running workspace over SSH (OpenSSH's ssh, as dev)");
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_flag("-t,--tty", o->tty, "Give CMD a terminal (ssh -t); a login without CMD always has one");
  cmd->add_option("CMD", o->argv, "Command and arguments (after --); default: a login shell");
  cmd->footer(
      "Runs `ssh NAME.cloister` with the options `cloister ssh-config NAME` prints (the store's "
      "client key, the workspace's pinned host key, ProxyCommand `cloister _ssh-stdio NAME`); no "
      "ssh config is needed. After `cloister wipe NAME` it refuses until `cloister ssh-config "
      "NAME` pins the new host key. Your own ssh-agent is not forwarded; in the session "
      "SSH_AUTH_SOCK is the workspace's sign-only agent.");
  cmd->callback([&cli, o] {
    if (cli.after_dashes) o->argv.insert(o->argv.end(), cli.after_dashes->begin(), cli.after_dashes->end());
    auto run = [&]() -> Result<int> {
      if (!ProgramExists("ssh")) {
        return Error(ErrorCode::kNotFound, "ssh is not installed",
                     "install OpenSSH's client (Debian: openssh-client)");
      }
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
      ASSIGN_OR_RETURN(SshAccess access, PrepareSshAccess(cli, *store, {o->name}, /*repin=*/false));
      ASSIGN_OR_RETURN(auto options, SshHostOptions(access.specs[0]));
      std::vector<std::string> argv = {"ssh"};
      for (const auto& [k, v] : options) {
        argv.push_back("-o");
        argv.push_back(k + "=" + v);
      }
      if (o->tty) argv.push_back("-t");
      argv.push_back(o->name + sshagent::kSshHostSuffix);
      if (!o->argv.empty()) {
        argv.push_back("--");
        argv.insert(argv.end(), o->argv.begin(), o->argv.end());
      }
      cli.out() << std::flush;
      cli.err() << std::flush;
      return RunInForeground(argv);
    };
    auto code = run();
    if (!code.ok()) return (void)cli.Fail(code.error());
    cli.exit_code = *code;
  });
}

void AddSshStdioCommand(CLI::App& app, Cli& cli) {
  auto name = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("_ssh-stdio", "ssh's ProxyCommand: stdin/stdout to the guest's sshd");
  cmd->group("");  // hidden: ssh runs it, people do not
  cmd->add_option("NAME", *name, "Workspace name")->required();
  cmd->callback([&cli, name] {
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    vm::ReadyWait wait;
    wait.action = lifecycle::Action::kExec;
    auto fd = vm::OpenGuestStream(**store, *name, protocol::kSshdService, {}, wait);
    if (!fd.ok()) return (void)cli.Fail(fd.error());
    signal(SIGPIPE, SIG_IGN);
    Status st = Relay(*fd);
    close(*fd);
    if (!st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

// `cloister run [NAME] [--rm] [-d] [--tool T] [-v HOSTDIR[:GUEST][:ro]]... [-- CMD...]`: creates the
// workspace if needed (a fresh generated name without NAME; with --tool its coding agent, whose key
// it takes from this environment), starts it if needed, then runs CMD in it (or attaches to its
// tmux session, whose first window runs the agent). With --rm the workspace (directory and MAC) is deleted when the
// VM stops: after CMD ends, after Ctrl-C or SIGTERM, after a QEMU crash or a killed supervisor.
// The config is marked ephemeral, so a workspace left behind by a killed `run` is collected by
// the next lifecycle verb.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "base/agent_tools.h"
#include "base/strings.h"
#include "channel/exec_client.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/port_flags.h"
#include "cli/port_watch.h"
#include "cli/store_verbs.h"
#include "cli/vault_access.h"
#include "store/store.h"
#include "supervisor/browser_vm.h"
#include "supervisor/control.h"
#include "supervisor/launcher.h"
#include "supervisor/supervisor.h"
#include "supervisor/workspace.h"

namespace cloister::cli {

namespace {

int g_signal_pipe[2] = {-1, -1};
void OnStartSignal(int) { (void)!write(g_signal_pipe[1], "x", 1); }

std::string GeneratedName() {
  std::random_device rd;
  std::string raw(3, '\0');
  for (char& c : raw) c = static_cast<char>(rd() & 0xff);
  return "run-" + HexEncode(raw);
}

}  // namespace

void AddRunCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "run", "Create (if needed) and start a workspace, then run CMD in it or attach to it");
  struct Opts {
    std::string name;
    bool rm = false;
    bool detach = false;
    std::vector<std::string> volumes;
    std::string image;
    std::string tool;
    std::string accel = "auto";
    bool tty = false;
    std::vector<std::string> publish;
    bool auto_ports = false;
    std::vector<std::string> argv;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name (default: a fresh workspace)");
  cmd->add_flag("--rm", o->rm, "Delete the workspace when its VM stops");
  cmd->add_flag("-d,--detach", o->detach,
                "Start it and return once QEMU runs, printing NAME (no command, no attach; the "
                "boot goes on in the background)");
  cmd->add_option("-v,--volume", o->volumes,
                  "Share a host folder: HOSTDIR[:GUESTDIR][:ro] (only when the workspace is created). "
                  "The guest's user acts there as the folder's owner and what it creates is that "
                  "owner's; it cannot change a repository's .git/config, hooks, info, modules or "
                  "worktrees, nor create a .git, a HEAD or a set-user-ID file there (see `create --help`)");
  cmd->add_option("--image", o->image, "Base image for a new workspace");
  cmd->add_option("--tool", o->tool,
                  "The coding agent of a new workspace: " + AgentToolNames() +
                      " (default shell). Without CMD, `run` attaches to the tmux session whose "
                      "first window runs it (installed at the first boot). A workspace `run` "
                      "creates gets the agent's key from ANTHROPIC_API_KEY / OPENAI_API_KEY when "
                      "set here (the guest sees a placeholder)");
  cmd->add_option("-p,--publish", o->publish,
                  "Publish a guest TCP port on the host: [HOST_IP:]HOST_PORT:GUEST_PORT "
                  "(repeatable; only when the workspace is created; kept in its config). 127.0.0.1 "
                  "unless HOST_IP is given. For a running workspace: `cloister port NAME add`");
  cmd->add_flag("--auto-ports", o->auto_ports,
                "Forward every TCP port the guest listens on from 127.0.0.1, on a host port the "
                "host picks (announced on this terminal; only when the workspace is created)");
  cmd->add_option("--accel", o->accel, "auto, kvm or tcg")->default_str("auto");
  cmd->add_flag("-t,--tty", o->tty, "Give CMD a pseudo-terminal (default when stdin is a terminal)");
  cmd->add_option("CMD", o->argv, "Command to run (after --)");
  cmd->callback([&cli, o] {
    if (cli.after_dashes) o->argv.insert(o->argv.end(), cli.after_dashes->begin(), cli.after_dashes->end());
    auto mode = vm::ParseAccelMode(o->accel);
    if (!mode.ok()) return (void)cli.Fail(mode.error());
    if (o->detach && !o->argv.empty()) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "-d and a command conflict"));
    }
    // OpenStore: a workspace `run` creates gets its SSH key and a catalog-resolved image.
    auto opened = OpenStore(cli);
    if (!opened.ok()) return (void)cli.Fail(opened.error());
    Store& store = **opened;
    vm::CollectDeadEphemeral(store);
    vm::CollectStaleBrowserDirs(store.root());  // browser VM disks a crash left

    auto ports = ParsePublishFlags(o->publish, o->auto_ports, cli.err());
    if (!ports.ok()) return (void)cli.Fail(ports.error());
    bool created = false;
    if (o->name.empty() || !store.LoadConfig(o->name).ok()) {
      CreateRequest req;
      req.name = o->name.empty() ? GeneratedName() : o->name;
      req.image = o->image;
      if (!o->tool.empty()) req.tool = o->tool;
      for (const std::string& spec : o->volumes) {
        auto v = ParseVolumeSpec(AbsoluteVolumeHost(spec));
        if (!v.ok()) return (void)cli.Fail(v.error());
        req.volumes.push_back(*v);
      }
      auto cfg = store.Create(req);
      if (!cfg.ok()) return (void)cli.Fail(cfg.error());
      o->name = req.name;
      created = true;
      if (Status st = StorePublishFlags(store, o->name, *ports); !st.ok()) {
        (void)store.Remove(o->name);
        return (void)cli.Fail(st.error());
      }
      if (o->rm) {
        Status st = store.UpdateConfig(o->name, [](WorkspaceConfig& c) {
          c.extra[vm::kEphemeralKey] = true;
          return OkStatus();
        });
        if (!st.ok()) {
          (void)store.Remove(o->name);
          return (void)cli.Fail(st.error());
        }
      }
      cli.err() << "cloister: created workspace " << o->name << (o->rm ? " (--rm)" : "") << "\n";
      // The one-liner (`run --rm --tool claude -v .`): the agent's key from this environment.
      if (auto imported = ImportToolKeyFromEnv(cli, o->name, cfg->tool); !imported.ok()) {
        if (o->rm) (void)store.Remove(o->name);
        return (void)cli.Fail(imported.error());
      }
    } else {
      if (o->rm) {
        return (void)cli.Fail(Error(ErrorCode::kInvalidArgument,
                                    "--rm would delete the existing workspace " + o->name,
                                    "use --rm only for a workspace `run` creates (omit NAME)"));
      }
      if (!o->volumes.empty()) {
        return (void)cli.Fail(Error(ErrorCode::kInvalidArgument,
                                    "volumes are set when a workspace is created",
                                    "omit -v for an existing workspace"));
      }
      if (!o->publish.empty() || o->auto_ports) {
        return (void)cli.Fail(Error(ErrorCode::kInvalidArgument,
                                    "-p and --auto-ports are set when a workspace is created",
                                    "publish a port of the running workspace with `cloister port " +
                                        o->name + " add HOST_PORT:GUEST_PORT`"));
      }
      if (!o->tool.empty()) {
        auto existing = store.LoadConfig(o->name);
        if (existing.ok() && existing->tool != o->tool) {
          return (void)cli.Fail(Error(
              ErrorCode::kInvalidArgument,
              "workspace " + o->name + " runs " + existing->tool + ", not " + o->tool,
              "change it with `cloister config " + o->name + " --tool " + o->tool +
                  "` (applies at its next start), or omit --tool"));
        }
      }
    }
    vm::RunPaths paths = vm::RunPathsFor(store, o->name);
    auto cleanup = [&] {
      if (!o->rm) return;
      vm::StopOptions so;
      so.force = true;
      std::ostringstream quiet;
      (void)vm::StopWorkspace(store, o->name, so, quiet);
      // The exiting supervisor deletes an ephemeral workspace too. Wait for it to let go of its
      // pid file first (bounded: a loaded machine can take long to kill QEMU and clean up; a fixed
      // 30 s left the workspace behind there), then, while it holds the lock (busy) or its pid
      // file (running), retry, bounded.
      auto gone = std::chrono::steady_clock::now() + std::chrono::minutes(2);
      while (vm::LivePid(paths.supervisor_pid) != 0 && std::chrono::steady_clock::now() < gone) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // bounded wait
      }
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      Status st = store.Remove(o->name);
      while (!st.ok() && (st.error().code() == ErrorCode::kBusy ||
                          st.error().code() == ErrorCode::kFailedPrecondition) &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // bounded retry
        st = store.Remove(o->name);
      }
      if (st.ok() || st.error().code() == ErrorCode::kNotFound) {
        cli.err() << "cloister: deleted workspace " << o->name << "\n";
      } else {
        cli.err() << "cloister: could not delete " << o->name << ": " << st.error().ToString() << "\n";
      }
    };

    // Ctrl-C / SIGTERM while booting: stop the VM at once (and --rm deletes it).
    if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) return (void)cli.Fail(ErrnoError("pipe", errno));
    std::atomic<bool> interrupted{false};
    std::thread watcher([&] {
      char c;
      while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
      }
      if (c != 'x') return;
      interrupted = true;
      (void)vm::ControlRequest(paths.supervisor_socket, {{"op", "stop"}, {"force", true}},
                               std::chrono::seconds(30));
    });
    struct sigaction sa{}, old_int{}, old_term{}, old_hup{};
    sa.sa_handler = OnStartSignal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    vm::StartOptions start;
    start.accel = *mode;
    start.detach = o->detach;
    Status st = vm::StartWorkspace(store, o->name, start, cli.err());
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    (void)!write(g_signal_pipe[1], "q", 1);
    watcher.join();
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
    if (!st.ok() || interrupted) {
      cleanup();
      return (void)cli.Fail(st.ok() ? Error(ErrorCode::kCancelled, "interrupted") : st.error());
    }
    if (o->detach) {
      cli.out() << o->name << "\n";
      return;
    }
    auto fd = vm::OpenExecStream(store, o->name);
    if (!fd.ok()) {
      cleanup();
      return (void)cli.Fail(fd.error());
    }
    Result<int> code = 0;
    // --auto-ports: each automatic forward's host port (the host's pick) on a line.
    std::unique_ptr<AutoPortAnnouncer> announcer = AnnounceAutoPorts(store, o->name, cli.err());
    if (o->argv.empty()) {
      code = channel::RunAttach(*fd);
    } else {
      channel::ExecRequest req;
      req.argv = o->argv;
      req.tty = o->tty || isatty(STDIN_FILENO);
      code = channel::RunExecInTerminal(*fd, req, /*interactive=*/true);
      if (!code.ok()) {
        code = vm::ExplainEndedSession(store, o->name, lifecycle::Action::kExec, code.error());
      }
    }
    announcer.reset();
    close(*fd);
    cleanup();
    if (!code.ok()) return (void)cli.Fail(code.error());
    cli.exit_code = *code;
    (void)created;
  });
}

}  // namespace cloister::cli

// The agent's boot sequence: RunAgent (guest/agent.h) and the steps it takes, in order, with the
// threads some of them run on. The pieces it uses (the setup, the probe, the tmux session, the
// listeners) are guest/agent.cc's; the order and why is docs/design.md, "Guest agent".
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/file_util.h"
#include "base/strings.h"
#include "channel/exec_proto.h"
#include "channel/mux.h"
#include "guest/agent.h"
#include "guest/agent_log.h"
#include "guest/browser.h"
#include "guest/devcontainer.h"
#include "guest/exec_server.h"
#include "guest/forward.h"
#include "guest/listeners.h"
#include "guest/spawn.h"
#include "guest/sshd.h"
#include "guest/tcp_connect.h"
#include "guest/tool.h"
#include "guest/transparent.h"
#include "protocol/contract.h"

namespace cloister::guest {
namespace {

constexpr char kVersion[] = "cloister-agent 1";

// Milliseconds since the guest kernel started (CLOCK_BOOTTIME), for the READY timings.
int64_t BootMs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// When PID 1 (the initramfs's init, which execs the system's) started, in ms since boot: the
// kernel's part of the boot. 0 if /proc/1/stat cannot be read.
int64_t InitStartMs() {
  std::ifstream f("/proc/1/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(paren + 1));
  std::string field;
  // Fields after the command: state is field 3; starttime is field 22.
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) {
      long ticks = sysconf(_SC_CLK_TCK);
      return ticks > 0 ? std::strtoll(field.c_str(), nullptr, 10) * 1000 / ticks : 0;
    }
  }
  return 0;
}

// The READY text's timings (the format supervisor/boot_timings.h parses): marks in ms since the
// guest kernel started.
std::string TimingsSuffix(int64_t init, int64_t agent, int64_t setup, int64_t probe,
                          int64_t ready) {
  return " timings init=" + std::to_string(init) + " agent=" + std::to_string(agent) +
         " setup=" + std::to_string(setup) + " probe=" + std::to_string(probe) +
         " ready=" + std::to_string(ready);
}

// "1.2 s", for the agent's log.
std::string Seconds(std::chrono::steady_clock::duration d) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(d).count());
  return b;
}

// The current channel session, shared with the forwarders' accept threads, and the READY text
// once the boot has earned it (sent on the session current then and on every later one).
struct Shared {
  std::mutex mu;
  channel::Mux* mux = nullptr;
  std::optional<std::string> ready;
};

void AcceptLoop(int listen_fd, std::string service, Shared* shared, Logger log) {
  while (true) {
    int conn = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      log("accept for " + service + ": " + std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // EMFILE: back off, not a test
      continue;
    }
    std::lock_guard<std::mutex> l(shared->mu);
    ForwardConnection(shared->mux, service, conn, [log](const std::string& line) { log(line); });
  }
}

// The terminal probe's outcome and when it ended (ms since the guest kernel started).
struct ProbeResult {
  Status status = OkStatus();
  int64_t done_ms = 0;
};

// One boot of the agent: the steps RunAgent takes, in order, and the state the threads they start
// share. Several steps run on threads of their own beside the rest (the egress's setup, the tmux
// session, the terminal probe, READY, the forwarders, every stream's handler); those are detached
// and use this object for as long as the process lives, so it is made once and never destroyed.
class Boot {
 public:
  Boot(const AgentOptions& o, AgentConfig config, int64_t agent_ms)
      : o_(o), config_(std::move(config)), log_(o.log), agent_ms_(agent_ms),
        tool_(FindAgentTool(config_.tool)) {
    exec_opts_.base_env = config_.env;
    exec_opts_.passwd_path = o_.passwd_path;
    exec_opts_.group_path = o_.group_path;
    exec_opts_.switch_user = o_.switch_user;
    sshd_opts_.user = config_.user;
    sshd_opts_.env = config_.env;
    sshd_opts_.log = o_.log;
  }

  // Returns only on a fatal channel error (the process's exit code).
  int Run() {
    StartEgressSetup();
    if (o_.setup) ApplySystemSetup(config_, o_);
    // The user the session and the probe run as, looked up once the mounts are there.
    user_ = LookupUser(config_.user, o_.passwd_path, o_.group_path);
    if (user_.ok()) user_env_ = CommandEnv(*user_, config_.env, {}, "xterm-256color");
    StartSession();
    StartProbe();
    if (o_.setup) ApplyFiles(config_, o_);
    StartForwards();
    if (egress_setup_.joinable()) egress_setup_.join();
    StartBrowser();
    setup_ms_ = BootMs();
    log_("setup done in " + std::to_string(setup_ms_ - agent_ms_) + " ms (guest clock " +
         std::to_string(setup_ms_) + " ms)");
    StartPortWatcher();
    StartReady();
    return ServeChannels();
  }

 private:
  // Transparent egress: DNS, redirect rules and the listener, for the whole boot. Its setup
  // (modprobe and the rules, most of the agent's setup on the default image) runs on a thread of
  // its own beside the mounts, the files, the tmux session and the terminal probe, and is joined
  // before the tool's installer or a browser starts and before READY (nothing that runs before
  // then can send anything out: the guest has no route but through the host's channel,
  // docs/threat-model.md).
  void StartEgressSetup() {
    if (!config_.transparent.enabled) return;
    egress_setup_ = std::thread([this] {
      TransparentOptions to;
      to.service = config_.transparent.service;
      to.port = static_cast<uint16_t>(config_.transparent.port);
      to.dns_port = static_cast<uint16_t>(config_.transparent.dns_port);
      to.hostname = config_.hostname;
      to.system_setup = o_.egress_system_setup;
      to.resolv_conf = o_.resolv_conf;
      auto t = TransparentEgress::Start(
          to,
          [this](const std::string& service, int fd) {
            std::lock_guard<std::mutex> l(shared_.mu);
            if (!shared_.mux) {
              close(fd);  // no host connected: the client's connection is reset
              return;
            }
            shared_.mux->OpenAsync(service, {}, fd, [this, service](Status st) {
              if (!st.ok()) {
                log_("egress stream to host service " + service + ": " + st.error().message());
              }
            });
          },
          [this](const std::string& line) { log_(line); });
      if (t.ok()) {
        egress_ = std::move(*t);
      } else {
        log_("egress: transparent mode not started: " + t.error().message());
      }
    });
  }

  // The tmux session that `attach` joins, started as soon as what a login shell needs is there
  // (the mounts and the profile), beside the files, the forwarders, the egress's setup and the
  // terminal probe: a tmux client's start alone is ~0.15 s of guest time under TCG, the session
  // ~0.4 s. READY does not wait for it (the probe is what proves a working terminal); every
  // exec (attach is one) and ssh stream waits for it instead before its command runs, so nothing
  // the host starts can find the session missing or type into it half made. Its first window
  // runs the tool's window script, which waits for the installer (started after the probe and
  // the egress, in StartReady), so the tool never starts before the files (its credentials) are
  // written. A browser VM has no session.
  void StartSession() {
    auto started = std::make_shared<std::promise<void>>();
    session_ = started->get_future().share();
    if (config_.browser.enabled) {
      started->set_value();
      return;
    }
    std::thread([this, started] {
      struct Done {
        std::promise<void>& p;
        ~Done() { p.set_value(); }
      } done{*started};
      auto s0 = std::chrono::steady_clock::now();
      if (!user_.ok()) {
        log_("tmux session: " + user_.error().message());
        return;
      }
      std::vector<std::string> window;
      std::string window_name;
      if (tool_ && !tool_->package.empty()) {
        if (auto st = WriteToolWindowScript(*tool_, o_.tool_paths, config_.workdir); !st.ok()) {
          log_("tool " + config_.tool + ": " + st.error().message());
        }
        window = ToolWindowCommand(*tool_, o_.tool_paths);
        window_name = std::string(tool_->name);
      }
      // A devcontainer's lifecycle window: the first one when there is no coding agent.
      std::vector<TmuxWindow> more;
      if (HasLifecycle()) {
        if (auto st = WriteLifecycleWindowScript(o_.lifecycle_paths); !st.ok()) {
          log_("devcontainer: " + st.error().message());
        }
        TmuxWindow w{"devcontainer", {"/bin/sh", o_.lifecycle_paths.WindowScript()}};
        if (window.empty()) {
          window = w.command;
          window_name = w.name;
        } else {
          more.push_back(std::move(w));
        }
      }
      if (auto t = EnsureTmuxSession(*user_, user_env_, o_.switch_user, config_.workdir, window,
                                     window_name, more);
          !t.ok()) {
        log_(t.error().message());
      }
      log_("tmux session " + Seconds(std::chrono::steady_clock::now() - s0));
    }).detach();
  }

  // The terminal probe (a login shell in a pty computing a nonce), beside the egress's setup, the
  // session and the files (the proxy CA, config.json's files: credentials, apt's and ssh's
  // settings, nothing a login shell reads): it sends nothing out. Its result and when it ended go
  // to the READY thread.
  void StartProbe() {
    if (config_.browser.enabled) return;
    auto done = std::make_shared<std::promise<ProbeResult>>();
    probe_ = done->get_future().share();
    std::thread([this, done] {
      ProbeResult r;
      if (!user_.ok()) {
        r.status = Error(ErrorCode::kNotFound, "ready check: " + user_.error().message());
      } else {
        auto t0 = std::chrono::steady_clock::now();
        auto deadline = t0 + std::chrono::seconds(config_.ready_timeout_s);
        do {
          r.status = CheckTerminal(*user_, user_env_, o_.switch_user, std::chrono::seconds(20));
          if (r.status.ok()) break;
          log_("ready check: " + r.status.error().message() + " (retrying)");
        } while (std::chrono::steady_clock::now() < deadline);
        log_("terminal probe " + Seconds(std::chrono::steady_clock::now() - t0));
      }
      r.done_ms = BootMs();
      done->set_value(std::move(r));
    }).detach();
  }

  // Forwarded listeners live for the whole boot; connections go to the current channel session.
  void StartForwards() {
    for (const auto& f : config_.forwards) {
      auto fd = ListenOn(f.listen);
      if (!fd.ok()) {
        log_("forward " + f.listen + " -> " + f.service + ": " + fd.error().message());
        continue;
      }
      std::thread(AcceptLoop, *fd, f.service, &shared_, log_).detach();
      log_("forwarding " + f.listen + " to host service " + f.service);
    }
  }

  // A browser VM (guest/browser.h): Chromium instead of the terminal and tmux; READY once its
  // DevTools port accepts. If the profile cannot be mounted, no Chromium and no READY.
  void StartBrowser() {
    if (!config_.browser.enabled) return;
    if (!user_.ok()) {
      log_("browser: " + user_.error().message());
      return;
    }
    BrowserOptions bo;
    bo.config = config_.browser;
    bo.user = *user_;
    bo.env = CommandEnv(*user_, config_.env, {}, "");
    bo.proxy = BrowserProxy(config_);
    bo.ca_file = config_.ca_certificate.empty() ? "" : o_.ca_file;
    bo.switch_user = o_.switch_user;
    bo.log = [this](const std::string& line) { log_(line); };
    browser_ = std::make_unique<BrowserSupervisor>(std::move(bo));
    if (auto st = browser_->Start(); !st.ok()) {
      log_("browser: not started: " + st.error().message() + " (" + st.error().hint() + ")");
      browser_.reset();
    }
  }

  // Automatic port forwarding (--auto-ports): the guest's listening TCP ports, reported to the
  // host on a stream of its own per channel session; the agent's own listeners are left out.
  void StartPortWatcher() {
    if (!config_.auto_ports) return;
    ListenerWatcherOptions wo;
    for (const auto& f : config_.forwards) {
      if (!StartsWith(f.listen, "tcp:")) continue;
      size_t colon = f.listen.rfind(':');
      int port = std::atoi(f.listen.c_str() + colon + 1);
      if (port > 0 && port <= 65535) wo.exclude.insert(static_cast<uint16_t>(port));
    }
    if (config_.transparent.enabled) {
      wo.exclude.insert(static_cast<uint16_t>(config_.transparent.port));
      wo.exclude.insert(static_cast<uint16_t>(config_.transparent.dns_port));
    }
    wo.open_stream = [this]() -> int {
      std::lock_guard<std::mutex> l(shared_.mu);
      if (!shared_.mux) return -1;
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
      shared_.mux->OpenAsync(protocol::kPortsReportService, {}, sv[1], [this](Status st) {
        if (!st.ok()) log_("auto-ports: report stream refused: " + st.error().message());
      });
      return sv[0];
    };
    wo.log = [this](const std::string& line) { log_(line); };
    watcher_ = std::make_unique<ListenerWatcher>(std::move(wo));
    watcher_->Start();
    log_("auto-ports: reporting listening TCP ports to the host");
  }

  // READY, now and in every later channel session: a browser VM's once DevTools accepts; a
  // workspace's once the terminal probe (it ran beside the egress's setup) answered, after the
  // tool's installer started. The tmux session may still be starting.
  void StartReady() {
    std::thread([this] {
      int64_t probe_ms = 0;
      if (config_.browser.enabled) {
        if (!browser_) {
          log_("browser: Chromium is not running: not sending READY");
          return;
        }
        // Chromium's first start under TCG takes tens of seconds: at least five minutes.
        auto st = browser_->WaitUntilAccepting(
            std::chrono::seconds(std::max(config_.ready_timeout_s, 300)));
        if (!st.ok()) {
          log_("browser: " + st.error().message() + ": not sending READY");
          return;
        }
        probe_ms = BootMs();
      } else {
        const ProbeResult& pr = probe_.get();
        if (!user_.ok()) {
          log_(pr.status.error().message());
          return;
        }
        // The marks follow the path READY waited on: the probe's mark is when it ended or, if it
        // ended during the setup, the setup's (what it added after the setup; the timings'
        // format wants them in order).
        probe_ms = std::max(pr.done_ms, setup_ms_);
        if (!pr.status.ok()) {
          log_("ready check failed for good: not sending READY");
          return;
        }
        StartToolInstaller();
        StartLifecycle();
      }
      std::lock_guard<std::mutex> l(shared_.mu);
      const int64_t init_ms = std::min(InitStartMs(), agent_ms_);
      std::string marks = TimingsSuffix(init_ms, agent_ms_, setup_ms_, probe_ms, BootMs());
      log_("timings (ms since the kernel started):" + marks.substr(8));
      shared_.ready = std::string(kVersion) + " boot " + config_.boot_id + marks;
      if (config_.browser.enabled) {
        log_("browser: DevTools accepts on 127.0.0.1:" + std::to_string(config_.browser.cdp_port) +
             ": READY");
      } else {
        log_("terminal works: READY");
      }
      if (shared_.mux) shared_.mux->SendReady(*shared_.ready);
    }).detach();
  }

  // The coding agent's installer (guest/tool.h), as root, once the terminal is proven and the
  // egress is up: its window in the tmux session waits for it.
  void StartToolInstaller() {
    if (!tool_ || tool_->package.empty()) return;
    std::map<std::string, std::string> root_env = {
        {"HOME", "/root"}, {"USER", "root"}, {"LOGNAME", "root"}, {"PATH", kDefaultPath}};
    for (const auto& [k, v] : config_.env) root_env[k] = v;
    std::vector<std::string> install_env;
    for (const auto& [k, v] : root_env) install_env.push_back(k + "=" + v);
    if (auto is = StartToolInstall(*tool_, o_.tool_paths, install_env); !is.ok()) {
      log_("tool " + config_.tool + ": " + is.error().message());
    } else {
      log_("tool " + config_.tool + ": installer started (log " + o_.tool_paths.log + ")");
    }
  }

  bool HasLifecycle() const {
    return config_.devcontainer.enabled &&
           !(config_.devcontainer.create.empty() && config_.devcontainer.start.empty());
  }

  // A devcontainer's lifecycle commands (guest/devcontainer.h), as its remoteUser, once the
  // terminal is proven and the egress is up, beside the tool's installer.
  void StartLifecycle() {
    if (!HasLifecycle()) return;
    std::thread([this] {
      const DevcontainerLifecycle& l = config_.devcontainer;
      auto user = LookupUser(l.user, o_.passwd_path, o_.group_path);
      if (!user.ok()) {
        (void)WriteFileAtomic(o_.lifecycle_paths.Status(),
                              "failed: remoteUser " + l.user + " is not a user of this image\n", 0644);
        log_("devcontainer: " + user.error().message());
        return;
      }
      LifecycleRun run;
      run.user = *user;
      run.switch_user = o_.switch_user;
      run.env = CommandEnv(*user, config_.env, {}, "");
      run.cwd = config_.workdir;
      run.paths = o_.lifecycle_paths;
      log_("devcontainer: lifecycle commands started as " + l.user + " (log " + run.paths.log + ")");
      Status st = RunDevcontainerLifecycle(l, run);
      log_(st.ok() ? "devcontainer: lifecycle commands done"
                   : "devcontainer: " + st.error().message());
    }).detach();
  }

  // An exec or ssh stream's handler: its command runs, on a thread of its own, once the tmux
  // session is there (the session's thread resolves session_ however it ended), so `attach` or
  // `exec tmux ...` right after READY finds it. Bounded: a tmux that hangs must not take exec
  // (how one looks into it) too.
  channel::ServiceHandler AfterSession(const char* what, std::function<void(int)> serve) {
    return [this, what, serve](int sfd, const std::vector<std::string>&) {
      std::thread([this, what, serve, sfd] {
        if (session_.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
          log_(std::string(what) + ": the tmux session is not up after 30 s; running it anyway");
        }
        serve(sfd);
      }).detach();
    };
  }

  // The channel port, or the test's socket; -1 while there is no host side to talk to.
  int OpenChannel(bool* logged_wait) {
    if (!o_.channel_path.empty()) {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, o_.channel_path.c_str(), sizeof addr.sun_path - 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        return -1;
      }
      return fd;
    }
    auto dev = FindVirtioPort(config_.channel_port);
    int fd = dev.ok() ? open(dev->c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK) : -1;
    if (fd >= 0) {
      // The port reports POLLHUP until the host side connects.
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 0) >= 0 && (p.revents & POLLHUP)) {
        close(fd);
        return -1;
      }
    } else if (!*logged_wait) {
      log_("waiting for the channel port: " +
           (dev.ok() ? std::string(std::strerror(errno)) : dev.error().message()));
      *logged_wait = true;
    }
    return fd;
  }

  // Channel sessions: one Mux per opening of the port; the host side may come and go.
  int ServeChannels() {
    bool logged_wait = false;
    while (true) {
      int fd = OpenChannel(&logged_wait);
      if (fd < 0) {
        // Waiting for a device or a host connection that gives no event: a short back-off.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      logged_wait = false;
      channel::MuxOptions mo;
      mo.role = channel::MuxRole::kGuest;
      mo.max_streams = protocol::kGuestChannelStreams;
      mo.log = [this](std::string_view line) { log_("channel: " + std::string(line)); };
      auto mux = channel::Mux::Create(fd, mo);
      if (!mux.ok()) {
        log_(mux.error().message());
        return 1;
      }
      (*mux)->RegisterService(channel::kExecService, AfterSession("exec", [this](int sfd) {
                                ServeExec(sfd, exec_opts_);
                              }));
      (*mux)->RegisterService(protocol::kTcpService,
                              [](int sfd, const std::vector<std::string>& args) {
                                std::thread([sfd, args] { ServeTcpConnect(sfd, args); }).detach();
                              });
      // IDE access (guest/sshd.h): each host-opened stream is one `sshd -i`.
      (*mux)->RegisterService(protocol::kSshdService, AfterSession("ssh", [this](int sfd) {
                                ServeSshd(sfd, sshd_opts_);
                              }));
      {
        std::lock_guard<std::mutex> l(shared_.mu);
        shared_.mux = mux->get();
        if (shared_.ready) (*mux)->SendReady(*shared_.ready);
      }
      if (auto st = (*mux)->Start(); !st.ok()) {
        log_(st.error().message());
        return 1;
      }
      log_("channel open");
      Error why = (*mux)->Wait();
      log_("channel closed: " + why.message());
      {
        std::lock_guard<std::mutex> l(shared_.mu);
        shared_.mux = nullptr;
      }
      mux->reset();
    }
  }

  const AgentOptions o_;
  const AgentConfig config_;
  const Logger log_;
  const int64_t agent_ms_;  // when the agent started (ms since the guest kernel started)
  const AgentTool* const tool_;  // the coding agent (guest/tool.h), or null
  ExecServerOptions exec_opts_;
  SshdOptions sshd_opts_;
  Shared shared_;
  std::thread egress_setup_;
  std::unique_ptr<TransparentEgress> egress_;
  // Set before the session's and the probe's threads start, read-only after.
  Result<UserInfo> user_ = Error(ErrorCode::kNotFound, "the user is not looked up yet");
  std::vector<std::string> user_env_;
  std::shared_future<void> session_;
  std::shared_future<ProbeResult> probe_;
  std::unique_ptr<BrowserSupervisor> browser_;
  std::unique_ptr<ListenerWatcher> watcher_;
  int64_t setup_ms_ = 0;  // set before the READY thread starts
};

}  // namespace

int RunAgent(const AgentOptions& o) {
  const int64_t agent_ms = BootMs();
  Logger log(o.log);
  signal(SIGPIPE, SIG_IGN);
  std::string config_path = o.config_path.empty() ? o.meta_dir + "/config.json" : o.config_path;
  auto config = LoadAgentConfig(config_path);
  if (!config.ok()) {
    log("fatal: " + config.error().message());
    return 1;
  }
  log(std::string(kVersion) + " starting for workspace '" + config->workspace + "' boot " +
      config->boot_id);
  // Never deleted: its detached threads use it for the life of the process (see Boot).
  auto* boot = new Boot(o, std::move(*config), agent_ms);
  return boot->Run();
}

}  // namespace cloister::guest

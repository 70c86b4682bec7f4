#include "guest/agent.h"

#include "base/file_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "base/strings.h"
#include "channel/exec_proto.h"
#include "channel/mux.h"
#include "guest/browser.h"
#include "guest/exec_server.h"
#include "guest/listeners.h"
#include "guest/tcp_connect.h"
#include "protocol/contract.h"
#include "guest/spawn.h"
#include "guest/sshd.h"
#include "guest/transparent.h"

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

class Logger {
 public:
  explicit Logger(std::function<void(std::string_view)> sink) : sink_(std::move(sink)) {}
  void operator()(const std::string& line) const {
    if (sink_) {
      sink_(line);
    } else {
      std::cerr << "cloister-agent: " << line << std::endl;
    }
  }

 private:
  std::function<void(std::string_view)> sink_;
};

void MkdirP(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
}

bool IsMountPoint(const std::string& path) {
  std::ifstream m("/proc/self/mounts");
  std::string dev, mnt;
  std::string rest;
  while (m >> dev >> mnt && std::getline(m, rest)) {
    if (mnt == path) return true;
  }
  return false;
}

Status WriteFileWithParents(const std::string& path, const std::string& content, mode_t mode) {
  MkdirP(std::filesystem::path(path).parent_path().string());
  return WriteFileAtomic(path, content, mode);
}

}  // namespace

Status InstallCaCertificate(const std::string& pem, const std::string& ca_file,
                            const std::string& bundle) {
  std::string cert = pem;
  if (cert.empty() || cert.back() != '\n') cert += '\n';
  RETURN_IF_ERROR(WriteFileWithParents(ca_file, cert, 0644));
  std::string existing;
  {
    std::ifstream in(bundle);
    std::stringstream ss;
    ss << in.rdbuf();
    existing = ss.str();
  }
  // The bundle lives on the system disk and survives reboots: append only once.
  if (existing.find(cert) != std::string::npos) return OkStatus();
  if (!existing.empty() && existing.back() != '\n') existing += '\n';
  return WriteFileWithParents(bundle, existing + cert, 0644);
}

void ApplySystemSetup(const AgentConfig& c, const AgentOptions& o) {
  Logger log(o.log);
  if (!c.hostname.empty() && sethostname(c.hostname.data(), c.hostname.size()) != 0) {
    log("sethostname: " + std::string(std::strerror(errno)));
  }
  auto user = LookupUser(c.user, o.passwd_path, o.group_path);
  // Home disk: ext4 with discard, so freed blocks shrink the image on the host.
  if (!c.home_device.empty() && !c.home.empty()) {
    MkdirP(c.home);
    if (IsMountPoint(c.home)) {
      log("home already mounted at " + c.home);
    } else if (mount(c.home_device.c_str(), c.home.c_str(), "ext4", MS_NOATIME, "discard") != 0) {
      log("mount " + c.home_device + " at " + c.home + ": " + std::strerror(errno));
    } else {
      log("mounted " + c.home_device + " at " + c.home);
    }
    if (user.ok()) {
      struct stat st;
      if (stat(c.home.c_str(), &st) == 0 && st.st_uid != user->uid) {
        if (chown(c.home.c_str(), user->uid, user->gid) != 0) log("chown home failed");
        chmod(c.home.c_str(), 0755);
      }
    }
  }
  for (const auto& s : c.shares) {
    MkdirP(s.path);
    if (user.ok() && StartsWith(s.path, c.home + "/")) {
      // Parents created inside home belong to the user.
      for (auto p = std::filesystem::path(s.path); p.string().size() > c.home.size();
           p = p.parent_path()) {
        if (chown(p.c_str(), user->uid, user->gid) != 0) break;
      }
    }
    std::string opts = "trans=virtio,version=9p2000.L,msize=262144";
    unsigned long flags = s.readonly ? MS_RDONLY : 0;
    if (mount(s.tag.c_str(), s.path.c_str(), "9p", flags, opts.c_str()) != 0) {
      log("mount 9p " + s.tag + " at " + s.path + ": " + std::strerror(errno));
    } else {
      log("mounted share " + s.tag + " at " + s.path);
    }
  }
  if (auto st = WriteFileWithParents(o.profile_path, ProfileScript(c.env), 0644); !st.ok()) {
    log(st.error().message());
  }
}

void ApplyFiles(const AgentConfig& c, const AgentOptions& o) {
  Logger log(o.log);
  if (!c.ca_certificate.empty()) {
    if (auto st = InstallCaCertificate(c.ca_certificate, o.ca_file, o.ca_bundle); !st.ok()) {
      log("proxy CA: " + st.error().message());
    } else {
      log("proxy CA installed in " + o.ca_bundle);
    }
  }
  for (const auto& f : c.files) {
    if (auto st = WriteFileWithParents(f.path, f.content, f.mode); !st.ok()) {
      log(st.error().message());
      continue;
    }
    if (f.owner != "root") {
      auto owner = LookupUser(f.owner, o.passwd_path, o.group_path);
      if (owner.ok() && chown(f.path.c_str(), owner->uid, owner->gid) != 0) {
        log("chown " + f.path + " failed");
      }
      // Its parents inside home belong to the owner too (a client rewrites its credentials
      // file with a temporary file beside it: ~/.claude, ~/.codex). lchown: never through a link.
      if (owner.ok() && StartsWith(f.path, c.home + "/")) {
        for (auto p = std::filesystem::path(f.path).parent_path();
             p.string().size() > c.home.size(); p = p.parent_path()) {
          if (lchown(p.c_str(), owner->uid, owner->gid) != 0) break;
        }
      }
    }
  }
}

void ApplySetup(const AgentConfig& c, const AgentOptions& o) {
  ApplySystemSetup(c, o);
  ApplyFiles(c, o);
}

Result<std::string> FindVirtioPort(const std::string& name, const std::string& sys_dir,
                                   const std::string& dev_dir) {
  DIR* d = opendir(sys_dir.c_str());
  if (!d) return Error(ErrorCode::kNotFound, "no " + sys_dir + " (virtio_console not loaded?)");
  std::string found;
  while (dirent* e = readdir(d)) {
    std::string entry = e->d_name;
    if (entry == "." || entry == "..") continue;
    std::ifstream f(sys_dir + "/" + entry + "/name");
    std::string n;
    std::getline(f, n);
    if (Trim(n) == name) {
      found = entry;
      break;
    }
  }
  closedir(d);
  if (found.empty()) return Error(ErrorCode::kNotFound, "no virtio port named " + name);
  std::string dev = dev_dir + "/" + found;
  struct stat st;
  if (stat(dev.c_str(), &st) != 0) {
    std::ifstream f(sys_dir + "/" + found + "/dev");
    std::string mm;
    std::getline(f, mm);
    auto parts = Split(Trim(mm), ':');
    if (parts.size() != 2) return Error(ErrorCode::kNotFound, "no dev numbers for " + found);
    dev_t num = makedev(std::stoul(parts[0]), std::stoul(parts[1]));
    if (mknod(dev.c_str(), S_IFCHR | 0600, num) != 0) return ErrnoError("mknod " + dev, errno);
  }
  return dev;
}

Status CheckTerminal(const UserInfo& user, const std::vector<std::string>& env, bool switch_user,
                     std::chrono::milliseconds timeout) {
  SpawnSpec spec;
  spec.argv = {user.shell};
  spec.argv0 = "-" + user.shell.substr(user.shell.rfind('/') + 1);
  spec.env = env;
  spec.cwd = user.home;
  if (switch_user) spec.user = user;
  spec.tty = true;
  ASSIGN_OR_RETURN(Spawned child, Spawn(spec));
  std::random_device rd;
  unsigned a = rd() % 100000 + 1000, b = rd() % 100000 + 1000;
  // The shell must compute the answer: the terminal's echo of this line does not contain it.
  std::string probe = "echo cloister-ready-$((" + std::to_string(a) + "+" + std::to_string(b) + "))\n";
  std::string want = "cloister-ready-" + std::to_string(a + b);
  std::string seen;
  bool sent = false, ok = false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!sent) {
      sent = write(child.master, probe.data(), probe.size()) == static_cast<ssize_t>(probe.size());
    }
    pollfd p{child.master, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    if (poll(&p, 1, std::max(1, std::min(left, 200))) <= 0) continue;
    char buf[4096];
    ssize_t n = read(child.master, buf, sizeof buf);
    if (n <= 0 && errno != EAGAIN) break;
    if (n > 0) seen.append(buf, static_cast<size_t>(n));
    if (seen.find(want) != std::string::npos) {
      ok = true;
      break;
    }
    if (seen.size() > (1 << 20)) seen.erase(0, seen.size() - 4096);
  }
  ssize_t r = write(child.master, "exit\n", 5);
  (void)r;
  // Give the shell a moment to exit, then make sure it is gone.
  for (int i = 0; i < 50; ++i) {
    int status;
    if (waitpid(child.pid, &status, WNOHANG) == child.pid) {
      child.pid = -1;
      break;
    }
    pollfd p{child.pidfd, POLLIN, 0};
    if (child.pidfd >= 0) poll(&p, 1, 20);
  }
  if (child.pid > 0) {
    kill(-child.pid, SIGKILL);
    int status;
    waitpid(child.pid, &status, 0);
  }
  close(child.master);
  if (child.pidfd >= 0) close(child.pidfd);
  if (!ok) {
    return Error(ErrorCode::kUnavailable, "login shell " + user.shell + " did not answer in a pty");
  }
  return OkStatus();
}

Status EnsureTmuxSession(const UserInfo& user, const std::vector<std::string>& env, bool switch_user,
                         const std::string& cwd, const std::vector<std::string>& window_command,
                         const std::string& window_name) {
  SpawnSpec spec;
  spec.argv = {"tmux", "new-session", "-d", "-s", "cloister"};
  if (!cwd.empty()) spec.argv.insert(spec.argv.end(), {"-c", cwd});
  if (!window_name.empty()) spec.argv.insert(spec.argv.end(), {"-n", window_name});
  // tmux runs a command given as several arguments directly (no shell re-parsing).
  spec.argv.insert(spec.argv.end(), window_command.begin(), window_command.end());
  spec.env = env;
  bool has_term = false;
  for (const auto& e : env) has_term |= StartsWith(e, "TERM=");
  if (!has_term) spec.env.push_back("TERM=xterm-256color");
  spec.cwd = cwd.empty() ? user.home : cwd;
  if (switch_user) spec.user = user;
  spec.stdin_null = true;
  // One tmux process, not `has-session` and then `new-session` (each is a tmux client's start,
  // ~0.15 s of guest time under TCG): an existing session is kept, since tmux refuses a second
  // one of that name with "duplicate session: cloister" and changes nothing.
  ASSIGN_OR_RETURN(Spawned child, Spawn(spec));
  std::string err;
  char buf[4096];
  while (true) {
    ssize_t n = read(child.err, buf, sizeof buf);
    if (n > 0) {
      if (err.size() < 4096) err.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      pollfd p{child.err, POLLIN, 0};
      poll(&p, 1, 1000);
      continue;
    }
    break;
  }
  int status = 0;
  waitpid(child.pid, &status, 0);
  for (int fd : {child.in, child.out, child.err, child.pidfd}) {
    if (fd >= 0) close(fd);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return OkStatus();
  if (err.find("duplicate session") != std::string::npos) return OkStatus();  // already running
  return Error(ErrorCode::kUnavailable, "tmux new-session failed: " + Trim(err));
}

Result<int> ListenOn(const std::string& spec, int* bound_port) {
  if (StartsWith(spec, "unix:")) {
    std::string path = spec.substr(5);
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) return Error(ErrorCode::kInvalidArgument, "path too long");
    MkdirP(std::filesystem::path(path).parent_path().string());
    unlink(path.c_str());
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoError("socket", errno);
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 64) != 0) {
      int e = errno;
      close(fd);
      return ErrnoError("listen on " + path, e);
    }
    chmod(path.c_str(), 0666);  // any guest user may reach the host service; the host decides
    return fd;
  }
  if (StartsWith(spec, "tcp:")) {
    std::string rest = spec.substr(4);
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return Error(ErrorCode::kInvalidArgument, "tcp:HOST:PORT expected");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, rest.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
      return Error(ErrorCode::kInvalidArgument, "bad IPv4 address in " + spec);
    }
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(rest.substr(colon + 1))));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoError("socket", errno);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 64) != 0) {
      int e = errno;
      close(fd);
      return ErrnoError("listen on " + spec, e);
    }
    if (bound_port) {
      socklen_t len = sizeof addr;
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      *bound_port = ntohs(addr.sin_port);
    }
    return fd;
  }
  return Error(ErrorCode::kInvalidArgument, "listen spec must be tcp:HOST:PORT or unix:PATH");
}

namespace {

// The current channel session, shared with the forwarders' accept threads.
struct Shared {
  std::mutex mu;
  channel::Mux* mux = nullptr;
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
    if (!shared->mux) {
      close(conn);  // no host connected: the client sees the connection close
      continue;
    }
    shared->mux->OpenAsync(service, {}, conn, [log, service](Status st) {
      if (!st.ok()) log("forward to host service " + service + ": " + st.error().message());
    });
  }
}

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

  // The coding agent (guest/tool.h): its installer starts once the terminal is proven (the proxy
  // forwarder listens by then); its window script is what the tmux session's first window runs.
  const AgentTool* tool = FindAgentTool(config->tool);

  ExecServerOptions exec_opts;
  exec_opts.base_env = config->env;
  exec_opts.passwd_path = o.passwd_path;
  exec_opts.group_path = o.group_path;
  exec_opts.switch_user = o.switch_user;

  SshdOptions sshd_opts;
  sshd_opts.user = config->user;
  sshd_opts.env = config->env;
  sshd_opts.log = o.log;

  Shared shared;
  std::atomic<bool> ready{false};
  std::string ready_info;

  // Transparent egress: DNS, redirect rules and the listener, for the whole boot. Its setup
  // (modprobe and the rules, most of the agent's setup on the default image) runs on a thread of
  // its own beside the mounts, the files, the tmux session and the terminal probe below, and is
  // joined before the tool's installer or a browser starts and before READY (nothing that runs
  // before then can send anything out: the guest has no route but through the host's channel,
  // docs/threat-model.md).
  std::unique_ptr<TransparentEgress> transparent;
  std::thread transparent_setup;
  if (config->transparent.enabled) transparent_setup = std::thread([&] {
    TransparentOptions to;
    to.service = config->transparent.service;
    to.port = static_cast<uint16_t>(config->transparent.port);
    to.dns_port = static_cast<uint16_t>(config->transparent.dns_port);
    to.hostname = config->hostname;
    to.system_setup = o.egress_system_setup;
    to.resolv_conf = o.resolv_conf;
    auto t = TransparentEgress::Start(
        to,
        [&shared, log](const std::string& service, int fd) {
          std::lock_guard<std::mutex> l(shared.mu);
          if (!shared.mux) {
            close(fd);  // no host connected: the client's connection is reset
            return;
          }
          shared.mux->OpenAsync(service, {}, fd, [log, service](Status st) {
            if (!st.ok()) log("egress stream to host service " + service + ": " + st.error().message());
          });
        },
        [log](const std::string& line) { log(line); });
    if (t.ok()) {
      transparent = std::move(*t);
    } else {
      log("egress: transparent mode not started: " + t.error().message());
    }
  });

  if (o.setup) ApplySystemSetup(*config, o);
  // The user the session and the probe run as, looked up once the mounts are there.
  const Result<UserInfo> user = LookupUser(config->user, o.passwd_path, o.group_path);
  const std::vector<std::string> user_env =
      user.ok() ? CommandEnv(*user, config->env, {}, "xterm-256color") : std::vector<std::string>{};

  // The tmux session that `attach` joins, started as soon as what a login shell needs is there
  // (the mounts and the profile), beside the files, the forwarders, the egress's setup and the
  // terminal probe: a tmux client's start alone is ~0.15 s of guest time under TCG, the session
  // ~0.4 s. READY does not wait for it (the probe is what proves a working terminal); every
  // exec (attach is one) and ssh stream waits for it instead before its command runs, so nothing
  // the host starts can find the session missing or type into it half made. Its first window
  // runs the tool's window script, which waits for the installer (started after the probe and
  // the egress, below), so the tool never starts before the files (its credentials) are written.
  // A browser VM has no session.
  auto session_started = std::make_shared<std::promise<void>>();
  std::shared_future<void> session = session_started->get_future().share();
  if (config->browser.enabled) {
    session_started->set_value();
  } else {
    std::thread([&, session_started] {
      struct Done {
        std::promise<void>& p;
        ~Done() { p.set_value(); }
      } done{*session_started};
      auto s0 = std::chrono::steady_clock::now();
      if (!user.ok()) {
        log("tmux session: " + user.error().message());
        return;
      }
      std::vector<std::string> window;
      std::string window_name;
      if (tool && !tool->package.empty()) {
        if (auto st = WriteToolWindowScript(*tool, o.tool_paths, config->workdir); !st.ok()) {
          log("tool " + config->tool + ": " + st.error().message());
        }
        window = ToolWindowCommand(*tool, o.tool_paths);
        window_name = std::string(tool->name);
      }
      if (auto t = EnsureTmuxSession(*user, user_env, o.switch_user, config->workdir, window,
                                     window_name);
          !t.ok()) {
        log(t.error().message());
      }
      log("tmux session " + Seconds(std::chrono::steady_clock::now() - s0));
    }).detach();
  }

  // The terminal probe (a login shell in a pty computing a nonce), beside the egress's setup, the
  // session and the files below (the proxy CA, config.json's files: credentials, apt's and ssh's
  // settings, nothing a login shell reads): it sends nothing out. Its result and when it ended go
  // to the READY thread.
  struct ProbeResult {
    Status status = OkStatus();
    int64_t done_ms = 0;
  };
  std::shared_future<ProbeResult> probe;
  if (!config->browser.enabled) {
    auto probe_done = std::make_shared<std::promise<ProbeResult>>();
    probe = probe_done->get_future().share();
    std::thread([&, probe_done, timeout_s = config->ready_timeout_s] {
      ProbeResult r;
      if (!user.ok()) {
        r.status = Error(ErrorCode::kNotFound, "ready check: " + user.error().message());
      } else {
        auto t0 = std::chrono::steady_clock::now();
        auto deadline = t0 + std::chrono::seconds(timeout_s);
        do {
          r.status = CheckTerminal(*user, user_env, o.switch_user, std::chrono::seconds(20));
          if (r.status.ok()) break;
          log("ready check: " + r.status.error().message() + " (retrying)");
        } while (std::chrono::steady_clock::now() < deadline);
        log("terminal probe " + Seconds(std::chrono::steady_clock::now() - t0));
      }
      r.done_ms = BootMs();
      probe_done->set_value(std::move(r));
    }).detach();
  }

  if (o.setup) ApplyFiles(*config, o);

  // Forwarded listeners live for the whole boot; connections go to the current session.
  for (const auto& f : config->forwards) {
    auto fd = ListenOn(f.listen);
    if (!fd.ok()) {
      log("forward " + f.listen + " -> " + f.service + ": " + fd.error().message());
      continue;
    }
    std::thread(AcceptLoop, *fd, f.service, &shared, log).detach();
    log("forwarding " + f.listen + " to host service " + f.service);
  }

  if (transparent_setup.joinable()) transparent_setup.join();

  // A browser VM (guest/browser.h): Chromium instead of the terminal and tmux; READY once its
  // DevTools port accepts. If the profile cannot be mounted, no Chromium and no READY.
  std::unique_ptr<BrowserSupervisor> browser;
  if (config->browser.enabled) {
    auto user = LookupUser(config->user, o.passwd_path, o.group_path);
    if (!user.ok()) {
      log("browser: " + user.error().message());
    } else {
      BrowserOptions bo;
      bo.config = config->browser;
      bo.user = *user;
      bo.env = CommandEnv(*user, config->env, {}, "");
      bo.proxy = BrowserProxy(*config);
      bo.ca_file = config->ca_certificate.empty() ? "" : o.ca_file;
      bo.switch_user = o.switch_user;
      bo.log = [log](const std::string& line) { log(line); };
      browser = std::make_unique<BrowserSupervisor>(std::move(bo));
      if (auto st = browser->Start(); !st.ok()) {
        log("browser: not started: " + st.error().message() + " (" + st.error().hint() + ")");
        browser.reset();
      }
    }
  }

  const int64_t setup_ms = BootMs();
  log("setup done in " + std::to_string(setup_ms - agent_ms) + " ms (guest clock " +
      std::to_string(setup_ms) + " ms)");
  // Automatic port forwarding (--auto-ports): the guest's listening TCP ports, reported to the
  // host on a stream of its own per channel session; the agent's own listeners are left out.
  std::unique_ptr<ListenerWatcher> watcher;
  if (config->auto_ports) {
    ListenerWatcherOptions wo;
    for (const auto& f : config->forwards) {
      if (!StartsWith(f.listen, "tcp:")) continue;
      size_t colon = f.listen.rfind(':');
      int port = std::atoi(f.listen.c_str() + colon + 1);
      if (port > 0 && port <= 65535) wo.exclude.insert(static_cast<uint16_t>(port));
    }
    if (config->transparent.enabled) {
      wo.exclude.insert(static_cast<uint16_t>(config->transparent.port));
      wo.exclude.insert(static_cast<uint16_t>(config->transparent.dns_port));
    }
    wo.open_stream = [&shared, log]() -> int {
      std::lock_guard<std::mutex> l(shared.mu);
      if (!shared.mux) return -1;
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
      shared.mux->OpenAsync(protocol::kPortsReportService, {}, sv[1], [log](Status st) {
        if (!st.ok()) log("auto-ports: report stream refused: " + st.error().message());
      });
      return sv[0];
    };
    wo.log = [log](const std::string& line) { log(line); };
    watcher = std::make_unique<ListenerWatcher>(std::move(wo));
    watcher->Start();
    log("auto-ports: reporting listening TCP ports to the host");
  }

  // The terminal probe's result (it ran beside the egress's setup), then the tool's installer,
  // then READY (now and in every later channel session); the tmux session may still be starting.
  std::thread([&, cfg = *config, tool, probe] {
    if (cfg.browser.enabled) {
      if (!browser) {
        log("browser: Chromium is not running: not sending READY");
        return;
      }
      // Chromium's first start under TCG takes tens of seconds: at least five minutes.
      auto st = browser->WaitUntilAccepting(std::chrono::seconds(std::max(cfg.ready_timeout_s, 300)));
      if (!st.ok()) {
        log("browser: " + st.error().message() + ": not sending READY");
        return;
      }
      const int64_t probe_ms = BootMs();
      std::lock_guard<std::mutex> l(shared.mu);
      const int64_t init_ms = std::min(InitStartMs(), agent_ms);
      std::string marks = TimingsSuffix(init_ms, agent_ms, setup_ms, probe_ms, BootMs());
      log("timings (ms since the kernel started):" + marks.substr(8));
      ready_info = std::string(kVersion) + " boot " + cfg.boot_id + marks;
      ready = true;
      log("browser: DevTools accepts on 127.0.0.1:" + std::to_string(cfg.browser.cdp_port) +
          ": READY");
      if (shared.mux) shared.mux->SendReady(ready_info);
      return;
    }
    const ProbeResult& pr = probe.get();
    const Status& st = pr.status;
    if (!user.ok()) {
      log(st.error().message());
      return;
    }
    // The marks follow the path READY waited on: the probe's mark is when it ended or, if it
    // ended during the setup, the setup's (what it added after the setup; the timings' format
    // wants them in order).
    const int64_t probe_ms = std::max(pr.done_ms, setup_ms);
    if (st.ok() && tool && !tool->package.empty()) {
      std::map<std::string, std::string> root_env = {
          {"HOME", "/root"}, {"USER", "root"}, {"LOGNAME", "root"}, {"PATH", kDefaultPath}};
      for (const auto& [k, v] : cfg.env) root_env[k] = v;
      std::vector<std::string> install_env;
      for (const auto& [k, v] : root_env) install_env.push_back(k + "=" + v);
      if (auto is = StartToolInstall(*tool, o.tool_paths, install_env); !is.ok()) {
        log("tool " + cfg.tool + ": " + is.error().message());
      } else {
        log("tool " + cfg.tool + ": installer started (log " + o.tool_paths.log + ")");
      }
    }
    if (!st.ok()) {
      log("ready check failed for good: not sending READY");
      return;
    }
    std::lock_guard<std::mutex> l(shared.mu);
    const int64_t init_ms = std::min(InitStartMs(), agent_ms);
    std::string marks = TimingsSuffix(init_ms, agent_ms, setup_ms, probe_ms, BootMs());
    log("timings (ms since the kernel started):" + marks.substr(8));
    ready_info = std::string(kVersion) + " boot " + cfg.boot_id + marks;
    ready = true;
    log("terminal works: READY");
    if (shared.mux) shared.mux->SendReady(ready_info);
  }).detach();

  // An exec or ssh stream's handler: its command runs, on a thread of its own, once the tmux
  // session is there (the session's thread resolves `session` however it ended), so `attach` or
  // `exec tmux ...` right after READY finds it. Bounded: a tmux that hangs must not take exec
  // (how one looks into it) too.
  auto after_session = [session, log](const char* what, std::function<void(int)> serve) {
    return [session, log, what, serve](int sfd, const std::vector<std::string>&) {
      std::thread([session, log, what, serve, sfd] {
        if (session.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
          log(std::string(what) + ": the tmux session is not up after 30 s; running it anyway");
        }
        serve(sfd);
      }).detach();
    };
  };

  // Channel sessions: one Mux per opening of the port; the host side may come and go.
  bool logged_wait = false;
  while (true) {
    int fd = -1;
    if (!o.channel_path.empty()) {
      fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, o.channel_path.c_str(), sizeof addr.sun_path - 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        fd = -1;
      }
    } else {
      auto dev = FindVirtioPort(config->channel_port);
      if (dev.ok()) fd = open(dev->c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
      if (fd >= 0) {
        // The port reports POLLHUP until the host side connects.
        pollfd p{fd, POLLOUT, 0};
        if (poll(&p, 1, 0) >= 0 && (p.revents & POLLHUP)) {
          close(fd);
          fd = -1;
        }
      } else if (!logged_wait) {
        log("waiting for the channel port: " +
            (dev.ok() ? std::string(std::strerror(errno)) : dev.error().message()));
      }
    }
    if (fd < 0) {
      logged_wait = true;
      // Waiting for a device or a host connection that gives no event: a short back-off.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    logged_wait = false;
    channel::MuxOptions mo;
    mo.role = channel::MuxRole::kGuest;
    mo.log = [log](std::string_view line) { log("channel: " + std::string(line)); };
    auto mux = channel::Mux::Create(fd, mo);
    if (!mux.ok()) {
      log(mux.error().message());
      return 1;
    }
    (*mux)->RegisterService(channel::kExecService,
                            after_session("exec", [&exec_opts](int sfd) { ServeExec(sfd, exec_opts); }));
    (*mux)->RegisterService(protocol::kTcpService, [](int sfd, const std::vector<std::string>& args) {
      std::thread([sfd, args] { ServeTcpConnect(sfd, args); }).detach();
    });
    // IDE access (guest/sshd.h): each host-opened stream is one `sshd -i`.
    (*mux)->RegisterService(protocol::kSshdService,
                            after_session("ssh", [&sshd_opts](int sfd) { ServeSshd(sfd, sshd_opts); }));
    {
      std::lock_guard<std::mutex> l(shared.mu);
      shared.mux = mux->get();
      if (ready) (*mux)->SendReady(ready_info);
    }
    if (auto st = (*mux)->Start(); !st.ok()) {
      log(st.error().message());
      return 1;
    }
    log("channel open");
    Error why = (*mux)->Wait();
    log("channel closed: " + why.message());
    {
      std::lock_guard<std::mutex> l(shared.mu);
      shared.mux = nullptr;
    }
    mux->reset();
  }
}

}  // namespace cloister::guest

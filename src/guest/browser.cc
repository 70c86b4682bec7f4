#include "guest/browser.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/strings.h"
#include "guest/spawn.h"

namespace cloister::guest {
namespace {

using Clock = std::chrono::steady_clock;

bool IsMounted(const std::string& path) {
  std::ifstream m("/proc/self/mounts");
  std::string dev, mnt, rest;
  while (m >> dev >> mnt && std::getline(m, rest)) {
    if (mnt == path) return true;
  }
  return false;
}

// A directory owned by `user`, mode 0700.
Status OwnedDir(const std::string& path, const UserInfo& user, bool chown_it) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Error(ErrorCode::kIo, "mkdir " + path + ": " + ec.message());
  if (chown_it && chown(path.c_str(), user.uid, user.gid) != 0) {
    return ErrnoError("chown " + path, errno);
  }
  if (chmod(path.c_str(), 0700) != 0) return ErrnoError("chmod " + path, errno);
  return OkStatus();
}

// The last `max` bytes of `path` (Chromium's log), for the agent's log when it dies.
std::string Tail(const std::string& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  std::streamoff size = f.tellg();
  std::streamoff from = size > static_cast<std::streamoff>(max) ? size - static_cast<std::streamoff>(max) : 0;
  f.seekg(from);
  std::string s(static_cast<size_t>(size - from), '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

// Runs `argv` as `user` (or as is) to its end; OK on exit 0, else its stderr in the error.
Status RunTo(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const UserInfo& user, bool switch_user, const std::string& cwd) {
  SpawnSpec spec;
  spec.argv = argv;
  spec.env = env;
  spec.cwd = cwd;
  if (switch_user) spec.user = user;
  spec.stdin_null = true;
  ASSIGN_OR_RETURN(Spawned child, Spawn(spec));
  std::string err;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int fd : {child.err, child.out}) {
    char buf[4096];
    while (Clock::now() < deadline) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0) {
        if (err.size() < 4096) err.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EAGAIN) {
        pollfd p{fd, POLLIN, 0};
        poll(&p, 1, 1000);
        continue;
      }
      break;
    }
  }
  int status = 0;
  if (Clock::now() >= deadline) kill(child.pid, SIGKILL);
  waitpid(child.pid, &status, 0);
  for (int fd : {child.in, child.out, child.err, child.pidfd}) {
    if (fd >= 0) close(fd);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Error(ErrorCode::kUnavailable, argv[0] + " failed: " + Trim(err));
  }
  return OkStatus();
}

}  // namespace

MountSpec ProfileMount(const BrowserConfig& c, const UserInfo& user, const std::string& mount_point) {
  MountSpec m;
  m.target = mount_point;
  m.flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME;
  if (c.profile_device.empty()) {
    m.source = "tmpfs";
    m.fstype = "tmpfs";
    m.data = "mode=0700,uid=" + std::to_string(user.uid) + ",gid=" + std::to_string(user.gid);
  } else {
    m.source = c.profile_device;
    m.fstype = "ext4";
  }
  return m;
}

Result<std::string> ResolveProfileDevice(const std::string& device, const std::string& sys_block,
                                         const std::string& dev_dir) {
  if (device.rfind("/dev/", 0) == 0) return device;
  if (device.rfind(kProfileSerialPrefix, 0) != 0) {
    return Error(ErrorCode::kInvalidArgument, "profile device '" + device + "' is neither /dev/NAME nor serial:S");
  }
  const std::string want = device.substr(std::string(kProfileSerialPrefix).size());
  std::error_code ec;
  std::string found;
  for (const auto& e : std::filesystem::directory_iterator(sys_block, ec)) {
    std::string name = e.path().filename().string();
    std::ifstream f(e.path() / "serial");
    if (!f) continue;
    char buf[64] = {};
    f.read(buf, sizeof buf - 1);  // bounded: a serial is at most 20 bytes
    std::string serial(buf, static_cast<size_t>(f.gcount()));
    while (!serial.empty() && (serial.back() == '\n' || serial.back() == ' ' || serial.back() == '\0')) {
      serial.pop_back();
    }
    if (serial != want) continue;
    if (!found.empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   "two disks have the serial " + want + " (" + found + ", " + name + ")");
    }
    found = name;
  }
  if (found.empty()) {
    return Error(ErrorCode::kNotFound, "no disk with the serial " + want + " in " + sys_block);
  }
  return dev_dir + "/" + found;
}

BrowserPaths BrowserPathsFor(const std::string& mount_point, const std::string& log) {
  return {mount_point + "/home", mount_point + "/chromium", log};
}

std::vector<std::string> ChromiumArgv(const BrowserConfig& c, const BrowserPaths& paths,
                                      const std::string& proxy) {
  // SECURITY: DevTools gives full control of the browser: it listens on the guest's loopback
  // only, where the agent's `tcp` service (host-opened streams) is the one way in.
  std::vector<std::string> argv{"chromium",
                                "--headless",
                                "--remote-debugging-address=127.0.0.1",
                                "--remote-debugging-port=" + std::to_string(c.cdp_port),
                                "--user-data-dir=" + paths.user_data,
                                "--no-first-run",
                                "--no-default-browser-check",
                                "--disable-background-networking",
                                "--disable-component-update",
                                "--disable-sync",
                                "--disable-breakpad",
                                "--disable-quic",
                                "--lang=en-US"};
  if (!proxy.empty()) argv.push_back("--proxy-server=" + proxy);
  argv.push_back("about:blank");
  return argv;
}

std::string BrowserProxy(const AgentConfig& c) {
  for (const auto& f : c.forwards) {
    if (f.service == protocol::kProxyService && StartsWith(f.listen, "tcp:")) {
      return "http://" + f.listen.substr(4);
    }
  }
  return "";
}

bool LoopbackPortAccepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

BrowserSupervisor::BrowserSupervisor(BrowserOptions options)
    : o_(std::move(options)), paths_(BrowserPathsFor(o_.mount_point, o_.log_file)) {
  if (!o_.log) o_.log = [](const std::string&) {};
  if (!o_.mount) {
    o_.mount = [](const MountSpec& m) {
      return mount(m.source.c_str(), m.target.c_str(), m.fstype.c_str(), m.flags,
                   m.data.empty() ? nullptr : m.data.c_str()) == 0
                 ? 0
                 : errno;
    };
  }
}

BrowserSupervisor::~BrowserSupervisor() {
  {
    std::lock_guard<std::mutex> g(spawn_mu_);
    stop_ = true;
    if (pid_ > 0) kill(-pid_, SIGKILL);
  }
  if (thread_.joinable()) thread_.join();
}

Status BrowserSupervisor::PrepareProfile() {
  // SECURITY: fail closed. The profile (cookies, sessions) goes on the tmpfs or the encrypted
  // profile disk and nowhere else: if that mount fails, Chromium does not start (it would write
  // the profile to the VM's system disk, a plaintext file on the host).
  std::error_code ec;
  std::filesystem::create_directories(o_.mount_point, ec);
  if (IsMounted(o_.mount_point)) {
    o_.log("browser: profile already mounted at " + o_.mount_point);
  } else {
    MountSpec m = ProfileMount(o_.config, o_.user, o_.mount_point);
    if (!o_.config.profile_device.empty()) {
      // The host hot-added the disk before the boot; its vdX name follows PCI order, so it is
      // found by serial (bounded wait: the kernel may still be probing it).
      Result<std::string> dev = ResolveProfileDevice(o_.config.profile_device, o_.sys_block, o_.dev_dir);
      auto deadline = Clock::now() + o_.device_wait;
      while (!dev.ok() && dev.error().code() == ErrorCode::kNotFound && Clock::now() < deadline) {
        pollfd none{-1, 0, 0};
        poll(&none, 0, 200);  // no event tells when the disk appears
        dev = ResolveProfileDevice(o_.config.profile_device, o_.sys_block, o_.dev_dir);
      }
      if (!dev.ok()) {
        return Error(ErrorCode::kUnavailable,
                     "cannot find the browser profile disk: " + dev.error().message(),
                     "the host attaches it at `cloister browser NAME start --keep-profile`");
      }
      m.source = *dev;
    }
    if (int e = o_.mount(m); e != 0) {
      return Error(ErrorCode::kUnavailable,
                   "cannot mount the browser profile (" + m.source + ", " + m.fstype + ") at " +
                       m.target + ": " + std::strerror(e),
                   o_.config.profile_device.empty()
                       ? "the guest kernel needs tmpfs"
                       : "the host attaches the profile disk as " + o_.config.profile_device +
                             "; `cloister browser NAME forget` drops a damaged one");
    }
    o_.log("browser: profile on " + m.fstype + " at " + m.target);
  }
  RETURN_IF_ERROR(OwnedDir(o_.mount_point, o_.user, o_.switch_user));
  RETURN_IF_ERROR(OwnedDir(paths_.home, o_.user, o_.switch_user));
  RETURN_IF_ERROR(OwnedDir(paths_.user_data, o_.user, o_.switch_user));
  return OkStatus();
}

static std::vector<std::string> BrowserEnv(const std::vector<std::string>& base, const std::string& home) {
  std::vector<std::string> env;
  for (const auto& e : base) {
    if (StartsWith(e, "HOME=") || StartsWith(e, "DISPLAY=") || StartsWith(e, "WAYLAND_DISPLAY=") ||
        StartsWith(e, "XDG_")) {
      continue;
    }
    env.push_back(e);
  }
  env.push_back("HOME=" + home);
  bool has_path = false;
  for (const auto& e : env) has_path |= StartsWith(e, "PATH=");
  if (!has_path) env.push_back(std::string("PATH=") + kDefaultPath);
  return env;
}

Status BrowserSupervisor::TrustCa() {
  if (o_.ca_file.empty()) return OkStatus();
  // Debian 12's Chromium takes added roots from the user's NSS database, HOME/.pki/nssdb (its
  // Chrome Root Store honours locally trusted roots from there); the system bundle is not read.
  std::string db = paths_.home + "/.pki/nssdb";
  RETURN_IF_ERROR(OwnedDir(paths_.home + "/.pki", o_.user, o_.switch_user));
  RETURN_IF_ERROR(OwnedDir(db, o_.user, o_.switch_user));
  std::vector<std::string> env = BrowserEnv(o_.env, paths_.home);
  if (access((db + "/cert9.db").c_str(), F_OK) != 0) {
    RETURN_IF_ERROR(RunTo({"certutil", "-N", "-d", "sql:" + db, "--empty-password"}, env, o_.user,
                          o_.switch_user, paths_.home));
  }
  // -A replaces a certificate of the same nickname: a kept profile gets this boot's CA.
  return RunTo({"certutil", "-A", "-d", "sql:" + db, "-n", "cloister-proxy-ca", "-t", "C,,", "-i",
                o_.ca_file},
               env, o_.user, o_.switch_user, paths_.home);
}

Status BrowserSupervisor::Start() {
  RETURN_IF_ERROR(PrepareProfile());
  if (auto st = TrustCa(); !st.ok()) {
    // Not fatal: without the CA Chromium's TLS through the proxy fails (closed), nothing leaks.
    o_.log("browser: proxy CA not added to Chromium's NSS db: " + st.error().message());
  } else if (!o_.ca_file.empty()) {
    o_.log("browser: proxy CA trusted in " + paths_.home + "/.pki/nssdb");
  }
  thread_ = std::thread([this] { Loop(); });
  return OkStatus();
}

Result<pid_t> BrowserSupervisor::SpawnChromium() {
  int fd = open(paths_.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open " + paths_.log, errno);
  if (o_.switch_user && fchown(fd, o_.user.uid, o_.user.gid) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError("chown " + paths_.log, e);
  }
  close(fd);
  SpawnSpec spec;
  // The shell only redirects: Chromium's argv reaches it as "$@", never re-parsed.
  spec.argv = {"/bin/sh", "-c", "log=$1; shift; exec \"$@\" >>\"$log\" 2>&1", "sh", paths_.log};
  for (auto& a : ChromiumArgv(o_.config, paths_, o_.proxy)) spec.argv.push_back(a);
  spec.env = BrowserEnv(o_.env, paths_.home);
  spec.cwd = paths_.home;
  if (o_.switch_user) spec.user = o_.user;
  spec.stdin_null = true;
  ASSIGN_OR_RETURN(Spawned child, Spawn(spec));
  for (int f : {child.in, child.out, child.err, child.pidfd}) {
    if (f >= 0) close(f);
  }
  return child.pid;
}

void BrowserSupervisor::Loop() {
  int quick_deaths = 0;
  while (!stop_) {
    auto t0 = Clock::now();
    Result<pid_t> pid = Error(ErrorCode::kInternal, "not started");
    {
      std::lock_guard<std::mutex> g(spawn_mu_);
      if (stop_) break;
      pid = SpawnChromium();
      if (pid.ok()) pid_ = *pid;
    }
    if (!pid.ok()) {
      o_.log("browser: cannot start chromium: " + pid.error().message());
    } else {
      ++starts_;
      o_.log("browser: chromium started (pid " + std::to_string(*pid) + ", DevTools on 127.0.0.1:" +
             std::to_string(o_.config.cdp_port) + ")");
      int status = 0;
      while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
      }
      {
        // The rest of its process group (zygote, renderers) goes with it; the group id stays
        // Chromium's while any member lives, so this kill cannot reach a reused pid.
        std::lock_guard<std::mutex> g(spawn_mu_);
        pid_ = -1;
        kill(-*pid, SIGKILL);
      }
      if (stop_) break;
      std::string how = WIFEXITED(status) ? "exited " + std::to_string(WEXITSTATUS(status))
                                          : "killed by signal " + std::to_string(WTERMSIG(status));
      o_.log("browser: chromium " + how + "; its log ends: " + Trim(Tail(paths_.log, 600)));
    }
    // A run of a minute or more counts as healthy: the restart budget is for crash loops.
    if (Clock::now() - t0 >= std::chrono::seconds(60)) quick_deaths = 0;
    if (++quick_deaths > o_.max_restarts) {
      o_.log("browser: chromium died " + std::to_string(quick_deaths) +
             " times in a row; not restarting it");
      gave_up_ = true;
      return;
    }
    auto delay = std::chrono::milliseconds(250) * (1 << std::min(quick_deaths, 6));
    auto until = Clock::now() + delay;
    while (!stop_ && Clock::now() < until) {
      pollfd none{-1, 0, 0};
      poll(&none, 0, 50);  // a back-off: nothing to wait on
    }
  }
}

Status BrowserSupervisor::WaitUntilAccepting(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (gave_up_) {
      return Error(ErrorCode::kUnavailable, "chromium keeps dying; see " + paths_.log);
    }
    if (starts_ > 0 && LoopbackPortAccepts(o_.config.cdp_port)) return OkStatus();
    pollfd none{-1, 0, 0};
    poll(&none, 0, 200);  // DevTools gives no event before it listens
  }
  return Error(ErrorCode::kUnavailable,
               "chromium's DevTools did not accept on 127.0.0.1:" +
                   std::to_string(o_.config.cdp_port) + " in time");
}

}  // namespace cloister::guest

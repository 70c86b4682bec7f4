// The guest agent's pieces (guest/agent.h): the per-boot setup, the proxy CA, the channel port,
// the terminal probe, the tmux session and the listeners. guest/boot.cc runs them in order.
#include "guest/agent.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "base/file_util.h"
#include "base/strings.h"
#include "guest/agent_log.h"
#include "guest/config.h"
#include "guest/spawn.h"

namespace cloister::guest {
namespace {

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
                         const std::string& window_name, const std::vector<TmuxWindow>& more) {
  SpawnSpec spec;
  spec.argv = {"tmux", "new-session", "-d", "-s", "cloister"};
  if (!cwd.empty()) spec.argv.insert(spec.argv.end(), {"-c", cwd});
  if (!window_name.empty()) spec.argv.insert(spec.argv.end(), {"-n", window_name});
  // tmux runs a command given as several arguments directly (no shell re-parsing).
  spec.argv.insert(spec.argv.end(), window_command.begin(), window_command.end());
  // Further windows in the same tmux process: an argument ";" separates tmux commands.
  for (const TmuxWindow& w : more) {
    spec.argv.insert(spec.argv.end(), {";", "new-window", "-d", "-t", "cloister"});
    if (!cwd.empty()) spec.argv.insert(spec.argv.end(), {"-c", cwd});
    if (!w.name.empty()) spec.argv.insert(spec.argv.end(), {"-n", w.name});
    spec.argv.insert(spec.argv.end(), w.command.begin(), w.command.end());
  }
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

}  // namespace cloister::guest

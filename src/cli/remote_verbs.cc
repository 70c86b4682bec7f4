// The verbs that need a local end when they run against a remote (cli/remote.h RunRemoteVerb):
//   cp          -> cmd_cp.cc RemoteCopy (a tar stream over the ssh channel)
//   port add    -> the remote publishes on ITS loopback (127.0.0.1:0:GUEST, a free port there);
//                  this machine starts `ssh -N -L LOCAL_IP:LOCAL_PORT:127.0.0.1:REMOTE_PORT HOST`
//                  and tracks it in a tunnel file (below); `port rm`, `stop` and `rm` end it
//   port ls     -> the remote's list with each tunnel's local end beside it
//   ssh-config  -> a block whose ProxyCommand is ssh to the remote running `_ssh-stdio NAME`
//                  there, with the remote workspace's host key pinned in a local file
//   create -p   -> the remote creates without -p; the specs are kept here and every `start`
//                  through this machine publishes them as `port add` does (PublishFile below)
//   run -p, --auto-ports -> the remote's run publishes on its loopback; this machine polls its
//                  `port NAME ls --json` while the run lives and tunnels those (RunWithLocalPorts)
//   ssh-config --install -> the blocks in remotes/TARGET/ssh_config, Included from ~/.ssh/config
//   ssh NAME    -> this machine's ssh with the block's options (RemoteSsh)
// Everything else is RunRemote as it is.
//
// Tunnel files: $XDG_RUNTIME_DIR/cloister/tunnels (else /tmp/cloister-UID/tunnels; 0700, ours)
// /TARGET.NAME.LOCAL_PORT.json = {"url","name","local_ip","local_port","remote_port",
// "guest_port","pid","start"}: `start` is the ssh process's start time (/proc/PID/stat field 22),
// so a reused pid is never signalled. A tunnel lives until `port rm`, `stop`/`rm` of its
// workspace through this machine, its ssh connection dropping, or this user's logout (the runtime
// directory goes); the remote's forward lives until the remote workspace stops or `port rm`.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json_util.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "cli/cli.h"
#include "cli/remote.h"
#include "cli/ssh_access.h"
#include "cli/ssh_config.h"
#include "sshagent/ide_keys.h"
#include "supervisor/control.h"
#include "supervisor/ports.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int Fail(const Error& e) {
  Cli cli(std::cout, std::cerr, std::cin);
  return cli.Fail(e);
}

// Workspace names as they appear in file names here (the remote's are checked there too).
bool SafeName(const std::string& n) {
  if (n.empty() || n.size() > 64 || n[0] == '.' || n[0] == '-') return false;
  for (char c : n) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Result<std::string> TunnelDir() {
  std::string base;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) {
    base = std::string(x) + "/cloister";
  } else {
    base = "/tmp/cloister-" + std::to_string(getuid());
  }
  std::string dir = base + "/tunnels";
  for (const std::string& d : {base, dir}) {
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + d, errno);
    struct stat st;
    // SECURITY: /tmp is shared: a directory made by another user is not ours to trust.
    if (lstat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
        (st.st_mode & 077) != 0) {
      return Error(ErrorCode::kFailedPrecondition, d + " is not a private directory of this user",
                   "remove it, or set XDG_RUNTIME_DIR to a directory of your own");
    }
  }
  return dir;
}

// Field 22 of /proc/PID/stat (the process's start time), "" when it is gone.
std::string StartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream ss(stat.substr(close + 2));
  std::string state, f;
  ss >> state;
  if (state == "Z") return "";  // exited, not reaped yet: not running
  for (int i = 4; i <= 22 && (ss >> f); ++i) {
  }
  return f;
}

struct Tunnel {
  std::string file;
  json doc;
  bool alive() const {
    pid_t pid = doc.value("pid", 0);
    return pid > 0 && StartTime(pid) == doc.value("start", std::string("-"));
  }
};

std::vector<Tunnel> Tunnels(const RemoteTarget& t, const std::string& name) {
  std::vector<Tunnel> out;
  auto dir = TunnelDir();
  if (!dir.ok()) return out;
  std::string prefix = TargetId(t) + "." + name + ".";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(*dir, ec)) {
    std::string f = e.path().filename().string();
    if (f.rfind(prefix, 0) != 0 || e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json doc = json::parse(text, nullptr, false);
    if (!doc.is_object() || doc.value("url", "") != t.url() || doc.value("name", "") != name) continue;
    out.push_back({e.path().string(), doc});
  }
  return out;
}

void EndTunnel(const Tunnel& tun) {
  if (tun.alive()) {
    pid_t pid = tun.doc.value("pid", 0);
    kill(pid, SIGTERM);
    // ssh is the child of an earlier cloister: it cannot be waited for here; wait for it to go.
    for (int i = 0; i < 50 && tun.alive(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // bounded
    }
  }
  unlink(tun.file.c_str());
  std::string log = tun.file.substr(0, tun.file.size() - 5) + ".log";  // ".json" -> ".log"
  unlink(log.c_str());
}

// Whether something listens on ip:port (a connect test would open a stream to the guest).
bool Listening(const std::string& ip, int port) {
  int fd = socket(ip.find(':') != std::string::npos ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  bool taken;
  if (ip.find(':') != std::string::npos) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip.c_str(), &a.sin6_addr);
    a.sin6_port = htons(static_cast<uint16_t>(port));
    taken = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EADDRINUSE;
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    a.sin_port = htons(static_cast<uint16_t>(port));
    taken = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EADDRINUSE;
  }
  close(fd);
  return taken;
}

// Whether process `pid` holds a listening TCP socket on `port` (/proc/net/tcp{,6} LISTEN rows
// whose inode is one of the process's fds): the tunnel's own ssh, not whoever else took the port.
bool PidListensOn(pid_t pid, int port) {
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ss(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      if (!(ss >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
      size_t colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;
      if (std::strtol(local.substr(colon + 1).c_str(), nullptr, 16) == port) inodes.insert(inode);
    }
  }
  if (inodes.empty()) return false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::string target = fs::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0 && inodes.count(target.substr(8, target.size() - 9))) return true;
  }
  return false;
}

int FreePort(const std::string& ip) {
  bool v6 = ip.find(':') != std::string::npos;
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int port = -1;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip.c_str(), &a.sin6_addr);
    socklen_t len = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin6_port);
    }
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    socklen_t len = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
  }
  close(fd);
  return port;
}

std::vector<std::string> With(std::vector<std::string> prefix, std::initializer_list<std::string> more) {
  prefix.insert(prefix.end(), more);
  return prefix;
}

// The remote's JSON answer to `args` (its stderr shown here); a failure keeps its exit code.
Result<json> RemoteJson(const RemoteTarget& t, const std::vector<std::string>& args, int* code) {
  ASSIGN_OR_RETURN(std::string out, RemoteOutput(t, args, code));
  if (*code != 0) return Error(ErrorCode::kFailedPrecondition, "");
  // SECURITY: the remote's answer is parsed, bounded (RemoteOutput) and checked field by field.
  json doc = json::parse(out, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    *code = kExitError;
    return Error(ErrorCode::kCorrupt, "the remote's answer to `" + args.back() + "` is not JSON",
                 "check that both machines run the same cloister (`cloister version`)");
  }
  return doc;
}

// Starts the local end of one forward; the remote's forward is already up on REMOTE_PORT.
Result<Tunnel> StartTunnel(const RemoteTarget& t, const std::string& name, const std::string& ip,
                           int local_port, int remote_port, int guest_port) {
  ASSIGN_OR_RETURN(std::string dir, TunnelDir());
  std::string bind_ip = ip.find(':') != std::string::npos ? "[" + ip + "]" : ip;
  std::vector<std::string> argv = SshCommand();
  argv.insert(argv.end(), {"-N", "-T", "-o", "ExitOnForwardFailure=yes", "-o", "ForwardAgent=no",
                           "-o", "ForwardX11=no", "-o", "ServerAliveInterval=30", "-L",
                           bind_ip + ":" + std::to_string(local_port) + ":127.0.0.1:" +
                               std::to_string(remote_port)});
  if (!t.port.empty()) argv.insert(argv.end(), {"-p", t.port});
  if (!t.user.empty()) argv.insert(argv.end(), {"-l", t.user});
  argv.insert(argv.end(), {"--", t.host});
  // ssh's messages go to a log beside the tunnel file: its stderr must not be ours, or whoever
  // reads our stderr to its end (a script, a pipe) would wait for the tunnel to end too.
  std::string log = dir + "/" + TargetId(t) + "." + name + "." + std::to_string(local_port) + ".log";
  int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log_fd < 0) return ErrnoError("open " + log, errno);
  auto say_log = [&] {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > 4096) text.resize(4096);
    if (!text.empty()) std::cerr << text << (text.back() == '\n' ? "" : "\n");
    unlink(log.c_str());
  };
  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return ErrnoError("fork", errno);
  }
  if (pid == 0) {
    setsid();  // outlives this cloister, never gets the terminal's signals
    int null_fd = open("/dev/null", O_RDWR);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    CloexecFrom(3);
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  // Up when ssh listens on the local port (bounded: 60 s); ssh exiting first is a failure.
  for (int i = 0; i < 600; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      close(log_fd);
      say_log();
      return Error(ErrorCode::kUnavailable,
                   "the tunnel for " + bind_ip + ":" + std::to_string(local_port) + " failed (ssh exited " +
                       std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) + ")",
                   "is the local port free? see ssh's message above");
    }
    if (PidListensOn(pid, local_port)) {
      close(log_fd);
      json doc = {{"url", t.url()},           {"name", name},
                  {"local_ip", ip},           {"local_port", local_port},
                  {"remote_port", remote_port}, {"guest_port", guest_port},
                  {"pid", pid},               {"start", StartTime(pid)}};
      std::string file = dir + "/" + TargetId(t) + "." + name + "." + std::to_string(local_port) + ".json";
      if (Status st = WriteFileAtomic(file, doc.dump() + "\n", 0600); !st.ok()) {
        kill(pid, SIGTERM);
        return st.error();
      }
      return Tunnel{file, doc};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // bounded poll of a listener
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  close(log_fd);
  say_log();
  return Error(ErrorCode::kUnavailable, "the tunnel's ssh did not listen within 60 s",
               "check `ssh " + t.host + " true`");
}

// `port NAME add SPEC...` against a remote.
int PortAdd(const RemoteTarget& t, const std::vector<std::string>& prefix, const std::string& name,
            const std::vector<std::string>& specs, bool as_json) {
  json added = json::array();
  for (const std::string& text : specs) {
    auto spec = vm::ParsePortSpec(text);
    if (!spec.ok()) return Fail(spec.error());
    if (!vm::IsLoopbackAddress(spec->host_ip)) {
      std::cerr << "cloister: warning: " << spec->ToString()
                << " listens beyond loopback on this machine: every host that reaches "
                << spec->host_ip << " can connect to the guest's port " << spec->guest_port << "\n";
    }
    int local_port = spec->host_port ? spec->host_port : FreePort(spec->host_ip);
    if (local_port <= 0 || Listening(spec->host_ip, local_port)) {
      return Fail(Error(ErrorCode::kAlreadyExists,
                        "port " + std::to_string(local_port) + " on " + spec->host_ip +
                            " is taken on this machine",
                        "pick another (HOST_PORT 0 picks a free one)"));
    }
    // The remote's forward: on its own loopback, any free port there.
    int code = 0;
    auto reply = RemoteJson(t, With(prefix, {"port", name, "add",
                                             "127.0.0.1:0:" + std::to_string(spec->guest_port), "--json"}),
                            &code);
    if (!reply.ok()) return code ? code : Fail(reply.error());
    const json& a = (*reply)["added"];
    // SECURITY: an integer port in range only (JsonInt: never a float cast to int).
    int remote_port = a.is_array() && a.size() == 1 ? JsonInt<int>(a[0], "host_port", 0) : 0;
    if (remote_port < 1 || remote_port > 65535) {
      return Fail(Error(ErrorCode::kCorrupt, "the remote's port add answer names no port",
                        "check that both machines run the same cloister"));
    }
    auto tun = StartTunnel(t, name, spec->host_ip, local_port, remote_port, spec->guest_port);
    if (!tun.ok()) {
      int ignored = 0;
      (void)RemoteOutput(t, With(prefix, {"port", name, "rm", std::to_string(remote_port)}), &ignored);
      return Fail(tun.error());
    }
    added.push_back(tun->doc);
    if (!as_json) {
      std::string ip = spec->host_ip.find(':') != std::string::npos ? "[" + spec->host_ip + "]" : spec->host_ip;
      std::cerr << "cloister: " << name << ": published " << ip << ":" << local_port
                << " on this machine -> 127.0.0.1:" << remote_port << " on " << t.url() << " -> guest port "
                << spec->guest_port << " (until `port rm`, the workspace stops, or the connection drops)\n";
    }
  }
  if (as_json) std::cout << json{{"name", name}, {"added", added}}.dump(2) << "\n";
  return kExitOk;
}

int PortRm(const RemoteTarget& t, const std::vector<std::string>& prefix, const std::string& name,
           const std::vector<std::string>& targets) {
  std::vector<Tunnel> tunnels = Tunnels(t, name);
  for (const std::string& text : targets) {
    int port = -1;
    if (!text.empty() && text.size() <= 5 && text.find_first_not_of("0123456789") == std::string::npos) {
      port = std::stoi(text);
    } else if (auto spec = vm::ParsePortSpec(text); spec.ok()) {
      port = spec->host_port;
    }
    const Tunnel* found = nullptr;
    for (const Tunnel& tun : tunnels) {
      if (tun.doc.value("local_port", -1) == port) found = &tun;
    }
    std::string remote_target = text;
    if (found) {
      EndTunnel(*found);
      remote_target = std::to_string(found->doc.value("remote_port", 0));
    }
    int code = RunRemote(t, With(prefix, {"port", name, "rm", remote_target}));
    if (code != 0) return code;
  }
  return kExitOk;
}

int PortLs(const RemoteTarget& t, const std::vector<std::string>& prefix, const std::string& name,
           bool as_json) {
  int code = 0;
  auto reply = RemoteJson(t, With(prefix, {"port", name, "ls", "--json"}), &code);
  if (!reply.ok()) return code ? code : Fail(reply.error());
  json local = json::array();
  std::map<int, json> by_remote;
  for (const Tunnel& tun : Tunnels(t, name)) {
    if (!tun.alive()) {  // its ssh is gone (connection lost, logout): the file goes too
      unlink(tun.file.c_str());
      continue;
    }
    local.push_back(tun.doc);
    by_remote[tun.doc.value("remote_port", 0)] = tun.doc;
  }
  if (as_json) {
    (*reply)["local"] = local;
    (*reply)["host"] = t.url();
    std::cout << reply->dump(2) << "\n";
    return kExitOk;
  }
  const json& ports = (*reply)["ports"];
  if (!ports.is_array() || ports.empty()) {
    std::cout << "no published ports\n";
    return kExitOk;
  }
  std::cout << std::left << std::setw(24) << "LOCAL" << std::setw(24) << "REMOTE" << std::setw(8)
            << "GUEST" << std::setw(8) << "ORIGIN" << "CONNECTIONS\n";
  for (const json& p : ports) {
    if (!p.is_object()) continue;
    int rp = JsonInt<int>(p, "host_port", 0);  // SECURITY: the remote's answer, integers only
    std::string lend = "-";
    if (auto it = by_remote.find(rp); it != by_remote.end()) {
      lend = it->second.value("local_ip", "") + ":" + std::to_string(it->second.value("local_port", 0));
    }
    std::string rend = vm::JsonString(p, "host_ip") + ":" + std::to_string(rp);
    std::cout << std::setw(24) << lend << std::setw(24) << rend << std::setw(8) << JsonInt<int>(p, "guest_port", 0)
              << std::setw(8) << vm::JsonString(p, "origin") << JsonInt<int64_t>(p, "connections", 0) << "\n";
  }
  return kExitOk;
}

int RemotePort(const RemoteTarget& t, const std::vector<std::string>& prefix,
               const std::vector<std::string>& args) {
  std::vector<std::string> all = prefix;
  all.push_back("port");
  all.insert(all.end(), args.begin(), args.end());
  std::vector<std::string> pos;
  bool as_json = false;
  for (const std::string& a : args) {
    if (a == "--json") {
      as_json = true;
    } else if (a.size() > 1 && a[0] == '-') {
      return RunRemote(t, all);  // unknown flags: the remote's answer
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty() || !SafeName(pos[0])) return RunRemote(t, all);
  std::string action = pos.size() > 1 ? pos[1] : "ls";
  std::vector<std::string> specs(pos.begin() + std::min<size_t>(2, pos.size()), pos.end());
  if (action == "add" && !specs.empty()) return PortAdd(t, prefix, pos[0], specs, as_json);
  if (action == "rm" && !specs.empty()) return PortRm(t, prefix, pos[0], specs);
  if (action == "ls" && specs.empty()) return PortLs(t, prefix, pos[0], as_json);
  return RunRemote(t, all);  // usage errors: the remote's
}

// This machine's files about a remote: $XDG_CONFIG_HOME/cloister/remotes/TARGET (docs/layout.md).
std::string RemoteConfigDir(const RemoteTarget& t) {
  return fs::path(ContextsPath()).parent_path().string() + "/remotes/" + TargetId(t);
}

// What `ssh-config` and `ssh` against a remote share: the remote's `_ssh-material` answer, checked
// and written here under $XDG_CONFIG_HOME/cloister/remotes/TARGET/ (the client key, a pin per
// workspace), as one SshHostSpec per workspace whose ProxyCommand goes through the remote.
// `keep_pin` (ssh): the remote does not re-pin, so after a wipe there it refuses as `ssh` does
// locally. *code is the remote's exit code when it failed (0 otherwise).
Result<std::vector<SshHostSpec>> FetchSshMaterial(const RemoteTarget& t, const std::vector<std::string>& prefix,
                                                  const std::vector<std::string>& names, bool keep_pin,
                                                  int* code) {
  std::vector<std::string> req = With(prefix, {"_ssh-material"});
  if (keep_pin) req.push_back("--keep-pin");
  req.insert(req.end(), names.begin(), names.end());
  *code = 0;
  ASSIGN_OR_RETURN(json doc, RemoteJson(t, req, code));
  // The remote store's IDE client key (see threat-model.md: it opens only the guests' sshd, which
  // is reachable only through `_ssh-stdio` on the remote, i.e. with SSH access to that host).
  // SECURITY: parsed and re-written here, never copied as sent.
  auto key = sshagent::ParseOpenSshPrivateKey(doc.value("identity", ""));
  if (!key.ok()) {
    return Error(ErrorCode::kCorrupt, "the remote sent no usable client key: " + key.error().message(),
                 "check that both machines run the same cloister");
  }
  const json& list = doc["workspaces"];
  if (!list.is_array()) return Error(ErrorCode::kCorrupt, "the remote's answer lists no workspaces");
  // Everything is checked before anything is written.
  std::vector<std::pair<std::string, std::string>> pins;  // name, line
  for (const json& w : list) {
    std::string name = w.is_object() && w.contains("name") && w["name"].is_string() ? w["name"].get<std::string>() : "";
    if (!SafeName(name)) return Error(ErrorCode::kCorrupt, "the remote named a bad workspace");
    std::string pin = w.is_object() && w.contains("known_hosts") && w["known_hosts"].is_string()
                          ? w["known_hosts"].get<std::string>()
                          : "";
    ASSIGN_OR_RETURN(std::string line, CheckRemotePinLine(name, pin));
    pins.emplace_back(name, line);
  }
  ASSIGN_OR_RETURN(auto pem, sshagent::OpenSshPrivateKey(*key, "cloister IDE key of " + t.url()));
  std::string dir = RemoteConfigDir(t);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error(ErrorCode::kIo, "cannot create " + dir + ": " + ec.message());
  chmod(fs::path(dir).parent_path().c_str(), 0700);
  chmod(dir.c_str(), 0700);
  std::string identity = dir + "/ssh-client";
  RETURN_IF_ERROR(WriteFileAtomic(identity, pem.view(), 0600));
  std::vector<SshHostSpec> specs;
  for (const auto& [name, line] : pins) {
    std::string pin = dir + "/" + name + ".known_hosts";
    RETURN_IF_ERROR(WriteFileAtomic(pin, line + "\n", 0644));
    SshHostSpec spec;
    spec.name = name;
    spec.identity = identity;
    spec.known_hosts = pin;
    // ssh to the remote (the user's own ssh, as every remote verb), running `_ssh-stdio NAME` there.
    spec.proxy_argv = RemoteSshArgv(t, With(prefix, {"_ssh-stdio", name}), /*tty=*/false);
    specs.push_back(spec);
  }
  return specs;
}

// `ssh-config --install` against a remote: the blocks go to remotes/TARGET/ssh_config (rewritten
// by each run; a block installed before stays while the remote still has that workspace), which
// ~/.ssh/config Includes (one line at its top, as the local --install does for <store>/ssh_config;
// a separate file, so neither --install drops the other's blocks).
int InstallRemoteSshConfig(const RemoteTarget& t, const std::vector<std::string>& prefix,
                           std::vector<std::string> names) {
  std::string file = RemoteConfigDir(t) + "/" + kSshConfigFile;
  if (!names.empty()) {
    auto old = ReadFileBounded(file, 1 << 20);
    std::set<std::string> have(names.begin(), names.end());
    std::vector<std::string> before;
    for (const std::string& n : old.ok() ? SshConfigHosts(*old) : std::vector<std::string>()) {
      if (!have.count(n) && SafeName(n)) before.push_back(n);
    }
    if (!before.empty()) {
      int code = 0;
      auto out = RemoteOutput(t, With(prefix, {"ls", "--json"}), &code);
      if (!out.ok()) return Fail(out.error());
      if (code != 0) return code;
      json all = json::parse(*out, nullptr, false);
      std::set<std::string> there;
      for (const json& w : all.is_array() ? all : json::array()) {
        if (w.is_object() && w.contains("name") && w["name"].is_string()) there.insert(w["name"].get<std::string>());
      }
      for (const std::string& n : before) {
        if (there.count(n)) names.push_back(n);  // removed there since: its block goes
      }
    }
  }
  int code = 0;
  auto specs = FetchSshMaterial(t, prefix, names, /*keep_pin=*/false, &code);
  if (!specs.ok()) return code ? code : Fail(specs.error());
  std::string text = "# Written by `cloister --host " + t.url() + " ssh-config --install`; rewritten by each run.\n\n";
  for (const SshHostSpec& spec : *specs) {
    auto block = SshHostBlock(spec);
    if (!block.ok()) return Fail(block.error());
    text += "# on " + t.url() + "\n" + *block + "\n";
  }
  if (Status st = WriteFileAtomic(file, text, 0600); !st.ok()) return Fail(st.error());
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    return Fail(Error(ErrorCode::kFailedPrecondition, "HOME is not set: no ~/.ssh/config to add to",
                      "add `" + SshIncludeLine(file) + "` to your ssh config yourself"));
  }
  std::string user_config = std::string(home) + "/.ssh/config";
  auto changed = InstallSshInclude(user_config, file);
  if (!changed.ok()) return Fail(changed.error());
  std::cout << "cloister: wrote " << specs->size() << " host" << (specs->size() == 1 ? "" : "s") << " of "
            << t.url() << " to " << file << "\n";
  std::cout << "cloister: " << user_config << (*changed ? " now includes it (first line)" : " already includes it")
            << "\n";
  for (const SshHostSpec& spec : *specs) std::cout << "  ssh " << spec.name << sshagent::kSshHostSuffix << "\n";
  return kExitOk;
}

int RemoteSshConfig(const RemoteTarget& t, const std::vector<std::string>& prefix,
                    const std::vector<std::string>& args) {
  std::vector<std::string> names;
  bool install = false;
  for (const std::string& a : args) {
    if (a == "--install") {
      install = true;
      continue;
    }
    if (a.size() > 1 && a[0] == '-') {
      std::vector<std::string> all = With(prefix, {"ssh-config"});
      all.insert(all.end(), args.begin(), args.end());
      return RunRemote(t, all);
    }
    if (!SafeName(a)) return Fail(Error(ErrorCode::kInvalidArgument, "bad workspace name '" + a + "'"));
    names.push_back(a);
  }
  if (install) return InstallRemoteSshConfig(t, prefix, names);
  int code = 0;
  auto specs = FetchSshMaterial(t, prefix, names, /*keep_pin=*/false, &code);
  if (!specs.ok()) return code ? code : Fail(specs.error());
  std::string text;
  for (const SshHostSpec& spec : *specs) {
    auto block = SshHostBlock(spec);
    if (!block.ok()) return Fail(block.error());
    text += "# on " + t.url() + "\n" + *block + "\n";
  }
  std::cout << text;
  return kExitOk;
}

// `ssh NAME [-t] [-- CMD...]` against a remote, as the local verb (cmd_ssh.cc): this machine's
// `ssh NAME.cloister` with the block's options on its command line (no ssh config needed), the
// ProxyCommand through the remote; the exit code is ssh's. Unknown flags: the remote's answer.
int RemoteSsh(const RemoteTarget& t, const std::vector<std::string>& prefix, const std::vector<std::string>& args) {
  std::string name;
  bool tty = false;
  std::vector<std::string> cmd;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      cmd.insert(cmd.end(), args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (a == "-t" || a == "--tty") {
      tty = true;
    } else if (a.size() > 1 && a[0] == '-') {
      std::vector<std::string> all = With(prefix, {"ssh"});
      all.insert(all.end(), args.begin(), args.end());
      return RunRemote(t, all);
    } else if (name.empty()) {
      name = a;
    } else {
      cmd.push_back(a);
    }
  }
  if (!SafeName(name)) {
    return Fail(Error(ErrorCode::kInvalidArgument, name.empty() ? "ssh: NAME is required" : "bad workspace name '" + name + "'",
                      "cloister --host " + t.url() + " ssh NAME [-- CMD...]"));
  }
  if (!ProgramExists("ssh")) {
    return Fail(Error(ErrorCode::kNotFound, "ssh is not installed", "install OpenSSH's client (Debian: openssh-client)"));
  }
  int code = 0;
  auto specs = FetchSshMaterial(t, prefix, {name}, /*keep_pin=*/true, &code);
  if (!specs.ok()) return code ? code : Fail(specs.error());
  if (specs->size() != 1 || (*specs)[0].name != name) {
    return Fail(Error(ErrorCode::kCorrupt, "the remote's answer is not about " + name,
                      "check that both machines run the same cloister"));
  }
  auto options = SshHostOptions((*specs)[0]);
  if (!options.ok()) return Fail(options.error());
  std::vector<std::string> argv = {"ssh"};
  for (const auto& [k, v] : *options) {
    argv.push_back("-o");
    argv.push_back(k + "=" + v);
  }
  if (tty) argv.push_back("-t");
  argv.push_back(name + sshagent::kSshHostSuffix);
  if (!cmd.empty()) {
    argv.push_back("--");
    argv.insert(argv.end(), cmd.begin(), cmd.end());
  }
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // As the local verb: Ctrl-C and the terminal's signals are ssh's while it runs.
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  std::cout << std::flush;
  pid_t pid = fork();
  if (pid < 0) return Fail(ErrnoError("fork", errno));
  if (pid == 0) {
    CloexecFrom(3);
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// -p of `create` against a remote: the specs are this machine's, so they are kept here, in
// <config>/cloister/remotes/TARGET/NAME.publish.json = {"url","name","publish":[SPEC...]} (0600),
// and each `start NAME` through this machine publishes them as `port add` does (a tunnel per
// spec). `rm NAME` through this machine deletes the file.
std::string PublishFile(const RemoteTarget& t, const std::string& name) {
  return fs::path(ContextsPath()).parent_path().string() + "/remotes/" + TargetId(t) + "/" + name +
         ".publish.json";
}

// Splits -p/--publish values out of `create`'s arguments (before any "--").
std::vector<std::string> TakePublishSpecs(std::vector<std::string>& rest) {
  std::vector<std::string> specs, kept;
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    if (a == "--") {
      kept.insert(kept.end(), rest.begin() + static_cast<long>(i), rest.end());
      break;
    }
    if ((a == "-p" || a == "--publish") && i + 1 < rest.size()) {
      specs.push_back(rest[++i]);
    } else if (a.rfind("--publish=", 0) == 0) {
      specs.push_back(a.substr(10));
    } else if (a.size() > 2 && a.rfind("-p", 0) == 0 && a[2] != '-') {
      specs.push_back(a.substr(2));
    } else {
      kept.push_back(a);
    }
  }
  rest = std::move(kept);
  return specs;
}

// `create ... -p SPEC...` against a remote: the remote creates the workspace (without -p), this
// machine keeps the specs for every later start through it.
int CreateWithLocalPublish(const RemoteTarget& t, const std::vector<std::string>& prefix,
                           std::vector<std::string> rest, const std::vector<std::string>& specs) {
  for (const std::string& text : specs) {
    if (auto spec = vm::ParsePortSpec(text); !spec.ok()) return Fail(spec.error());
  }
  bool as_json = false;
  for (const std::string& a : rest) as_json |= a == "--json";
  std::vector<std::string> args = prefix;
  args.push_back("create");
  args.insert(args.end(), rest.begin(), rest.end());
  if (!as_json) args.push_back("--json");
  int code = 0;
  auto doc = RemoteJson(t, args, &code);
  if (!doc.ok()) return code ? code : Fail(doc.error());
  std::string name = doc->value("name", "");
  if (!SafeName(name)) {
    return Fail(Error(ErrorCode::kCorrupt, "the remote's create answer names no workspace",
                      "check that both machines run the same cloister"));
  }
  std::string file = PublishFile(t, name);
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  chmod(fs::path(file).parent_path().parent_path().c_str(), 0700);
  chmod(fs::path(file).parent_path().c_str(), 0700);
  json saved = {{"url", t.url()}, {"name", name}, {"publish", specs}};
  if (Status st = WriteFileAtomic(file, saved.dump() + "\n", 0600); !st.ok()) {
    return Fail(st.error().WithHint("the workspace was created on " + t.url() +
                                    "; publish with `port NAME add` after each start"));
  }
  if (as_json) {
    std::cout << doc->dump(2) << "\n";
  } else {
    std::cout << "Created workspace '" << name << "' on " << t.url() << "\n";
    for (const std::string& s : specs) {
      std::cout << "  publishes " << s << " on this machine at each start through it\n";
    }
  }
  return kExitOk;
}

// The specs `create -p` kept here for NAME (none when there is no file or it does not parse).
std::vector<std::string> SavedPublishSpecs(const RemoteTarget& t, const std::string& name) {
  auto text = ReadFileBounded(PublishFile(t, name), 64 << 10);
  if (!text.ok()) return {};
  json doc = json::parse(*text, nullptr, false);
  std::vector<std::string> specs;
  if (!doc.is_object() || !doc.value("publish", json()).is_array()) return specs;
  for (const json& s : doc["publish"]) {
    if (s.is_string()) specs.push_back(s.get<std::string>());
  }
  return specs;
}

// Verbs that stop a workspace: its tunnels here end after the remote verb succeeded.
bool EndsTunnels(const std::string& verb) { return verb == "stop" || verb == "rm"; }

// ---- `run -p SPEC` and `run --auto-ports` against a remote ----------------------------------
// The remote runs `run` as one verb (its stdio, exit code and signals are ssh's, as for every
// verb), with each -p rewritten to `127.0.0.1:0:GUEST` (a free port on the REMOTE's loopback,
// kept in the remote workspace's config like any -p) and --auto-ports as given (the remote's
// supervisor forwards every guest listener from its own loopback). While the run lives, this side
// polls the remote's `port NAME ls --json` (a quiet ssh each second; every 2 s once only
// --auto-ports can change anything) and starts a local tunnel (StartTunnel, as `port add`) for
// each forward it asks for: a `config` forward for each -p (matched by guest port), an `auto`
// forward under --auto-ports (a local port this machine picks, LocalPortFor; announced here).
// An auto forward the remote drops (the guest closed the port) ends its tunnel; every tunnel ends
// when the run does (ssh's exit: the command ended, Ctrl-C, a lost connection, SIGTERM/SIGHUP of
// this process, which is passed to ssh first). Without NAME a fresh name is picked here.

struct RemoteRun {
  std::vector<std::string> args;  // the remote's `run ...` (without prefix)
  std::string name;
  std::vector<vm::PortSpec> specs;
  bool auto_ports = false;
  bool detach = false;
};

// Splits `run`'s arguments: -p values come out (rewritten for the remote), NAME is found (the
// first positional before "--"), or made. nullopt when neither -p nor --auto-ports is given.
Result<std::optional<RemoteRun>> PlanRemoteRun(const std::vector<std::string>& rest) {
  static const std::set<std::string> kValued = {"-v", "--volume", "--image", "--tool", "--accel"};
  RemoteRun run;
  std::vector<std::string> kept, tail;
  std::vector<std::string> texts;
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    if (a == "--") {
      tail.assign(rest.begin() + static_cast<long>(i), rest.end());
      break;
    }
    if ((a == "-p" || a == "--publish") && i + 1 < rest.size()) {
      texts.push_back(rest[++i]);
    } else if (a.rfind("--publish=", 0) == 0) {
      texts.push_back(a.substr(10));
    } else if (a.size() > 2 && a.rfind("-p", 0) == 0 && a[2] != '-') {
      texts.push_back(a.substr(2));
    } else if (kValued.count(a) && i + 1 < rest.size()) {
      kept.push_back(a);
      kept.push_back(rest[++i]);
    } else {
      run.auto_ports |= a == "--auto-ports";
      run.detach |= a == "-d" || a == "--detach";
      if (run.name.empty() && !a.empty() && a[0] != '-') run.name = a;
      kept.push_back(a);
    }
  }
  if (texts.empty() && !run.auto_ports) return std::optional<RemoteRun>();
  for (const std::string& text : texts) {
    ASSIGN_OR_RETURN(vm::PortSpec spec, vm::ParsePortSpec(text));
    run.specs.push_back(spec);
    kept.push_back("-p");
    kept.push_back("127.0.0.1:0:" + std::to_string(spec.guest_port));
  }
  if (run.name.empty()) {
    std::random_device rd;  // as `run` names a fresh workspace (cmd_run.cc)
    std::string raw(3, '\0');
    for (char& c : raw) c = static_cast<char>(rd() & 0xff);
    run.name = "run-" + HexEncode(raw);
    kept.insert(kept.begin(), run.name);
  }
  if (!SafeName(run.name)) return Error(ErrorCode::kInvalidArgument, "bad workspace name '" + run.name + "'");
  run.args = {"run"};
  run.args.insert(run.args.end(), kept.begin(), kept.end());
  run.args.insert(run.args.end(), tail.begin(), tail.end());
  return std::optional<RemoteRun>(run);
}

// The remote's JSON answer to `args`, with stdin and stderr /dev/null (a poll: the run owns this
// terminal), BatchMode and a connect timeout; *pid is the ssh while it runs (to end it early).
Result<json> QuietRemoteJson(const RemoteTarget& t, const std::vector<std::string>& args,
                             std::atomic<pid_t>* pid_out) {
  std::vector<std::string> argv = RemoteSshArgv(t, args, /*tty=*/false);
  argv.insert(argv.begin() + static_cast<long>(SshCommand().size()),
              {"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"});
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    if (null_fd >= 0) close(null_fd);
    return ErrnoError("fork", errno);
  }
  if (pid == 0) {  // only async-signal-safe calls from here (another thread may hold locks)
    dup2(null_fd, STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    dup2(null_fd, STDERR_FILENO);
    CloexecFrom(3);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  *pid_out = pid;
  close(fds[1]);
  if (null_fd >= 0) close(null_fd);
  // SECURITY: the remote's answer is bounded here and parsed field by field below.
  std::string out = DrainFdBounded(fds[0], (1u << 20));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *pid_out = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Error(ErrorCode::kUnavailable, "the remote did not answer");
  }
  json doc = json::parse(out, nullptr, false);
  if (!doc.is_object()) return Error(ErrorCode::kCorrupt, "the remote's answer is not JSON");
  return doc;
}

// The run's tunnels here, kept up to date from the remote's `port ls --json` answers
// (UpdateRunTunnels): which -p have one, and each tunnel by its remote port.
struct RunTunnels {
  std::vector<vm::PortSpec> specs;        // -p, this machine's side
  std::vector<bool> spec_done;            // a tunnel for specs[i] exists (or failed for good)
  bool auto_ports = false;
  std::map<int, Tunnel> by_remote;        // remote port -> the tunnel here
  std::map<int, bool> auto_of;            // remote port -> whether it is an auto forward
  std::set<int> given_up;                 // remote ports whose tunnel failed: not tried again

  bool Complete() const {
    if (auto_ports) return false;
    for (bool d : spec_done) {
      if (!d) return false;
    }
    return true;
  }
};

void Say(const std::string& line) {
  // The local terminal is raw under ssh -t: a bare \n would not return the cursor.
  std::cerr << line << (isatty(STDERR_FILENO) ? "\r\n" : "\n") << std::flush;
}

void UpdateRunTunnels(const RemoteTarget& t, const std::string& name, const json& answer,
                      RunTunnels* rt) {
  std::set<int> seen;
  // SECURITY: the remote's answer is hostile input; ParseRemoteForwards keeps well-formed ports only.
  for (const RemoteForward& f : ParseRemoteForwards(answer)) {
    const int rp = f.remote_port, gp = f.guest_port;
    const std::string& origin = f.origin;
    seen.insert(rp);
    if (rt->by_remote.count(rp) || rt->given_up.count(rp)) continue;
    std::string ip;
    int lp = 0;
    int spec_index = -1;
    bool is_auto = false;
    if (origin == "config") {
      for (size_t i = 0; i < rt->specs.size(); ++i) {
        if (!rt->spec_done[i] && rt->specs[i].guest_port == gp) {
          spec_index = static_cast<int>(i);
          break;
        }
      }
      if (spec_index < 0) continue;  // a forward of the workspace's config this run did not ask for
      ip = rt->specs[spec_index].host_ip;
      lp = LocalPortFor(f, rt->specs[spec_index].host_port);
    } else if (origin == "auto" && rt->auto_ports) {
      is_auto = true;
      ip = vm::kDefaultHostIp;
      lp = LocalPortFor(f, 0);  // SECURITY: this machine's pick, never the remote's number
    } else {
      continue;
    }
    if (lp == 0) lp = FreePort(ip);
    auto tun = lp > 0 ? StartTunnel(t, name, ip, lp, rp, gp)
                      : Result<Tunnel>(Error(ErrorCode::kUnavailable, "no free local port"));
    if (spec_index >= 0) rt->spec_done[spec_index] = true;
    if (!tun.ok()) {
      rt->given_up.insert(rp);
      Say("cloister: warning: " + name + ": guest port " + std::to_string(gp) +
          " is not published on this machine: " + tun.error().message());
      continue;
    }
    rt->by_remote[rp] = *tun;
    rt->auto_of[rp] = is_auto;
    std::string shown = ip.find(':') != std::string::npos ? "[" + ip + "]" : ip;
    Say("cloister: " + name + ": published " + shown + ":" + std::to_string(lp) +
        " on this machine -> guest port " + std::to_string(gp) + (is_auto ? " (auto)" : "") +
        " (until the run ends)");
  }
  // Auto forwards the remote dropped (the guest stopped listening): their tunnels end too.
  for (auto it = rt->by_remote.begin(); it != rt->by_remote.end();) {
    if (rt->auto_of[it->first] && !seen.count(it->first)) {
      EndTunnel(it->second);
      rt->auto_of.erase(it->first);
      it = rt->by_remote.erase(it);
    } else {
      ++it;
    }
  }
}

std::atomic<pid_t> g_run_ssh{0};
void PassSignalToRun(int sig) {
  pid_t pid = g_run_ssh.load();
  if (pid > 0) kill(pid, sig);
}

int RunWithLocalPorts(const RemoteTarget& t, const std::vector<std::string>& prefix, const RemoteRun& run) {
  if (run.detach) {
    return Fail(Error(ErrorCode::kInvalidArgument,
                      "run -d with -p/--auto-ports against a remote: this machine's tunnels live as "
                      "long as the run, and -d returns at once",
                      "`cloister --host " + t.url() + " create NAME -p SPEC` (published here at each "
                      "start through this machine), then `start NAME`; or run without -d"));
  }
  for (const vm::PortSpec& s : run.specs) {
    if (!vm::IsLoopbackAddress(s.host_ip)) {
      std::cerr << "cloister: warning: " << s.ToString()
                << " listens beyond loopback on this machine: every host that reaches " << s.host_ip
                << " can connect to the guest's port " << s.guest_port << "\n";
    }
    if (s.host_port && Listening(s.host_ip, s.host_port)) {
      return Fail(Error(ErrorCode::kAlreadyExists,
                        "port " + std::to_string(s.host_port) + " on " + s.host_ip + " is taken on this machine",
                        "pick another (HOST_PORT 0 picks a free one)"));
    }
  }
  std::vector<std::string> args = prefix;
  args.insert(args.end(), run.args.begin(), run.args.end());
  bool tty = isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1;
  // As RunRemote: Ctrl-C and the terminal's signals are ssh's; SIGTERM/SIGHUP sent to this
  // process are passed to ssh (so the remote run ends, and --rm deletes there) before the
  // tunnels here end.
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  auto pid = SpawnRemote(t, args, -1, -1, tty);
  if (!pid.ok()) return Fail(pid.error());
  g_run_ssh = *pid;
  struct sigaction sa{}, old_term{}, old_hup{};
  sa.sa_handler = PassSignalToRun;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);

  RunTunnels rt;
  rt.specs = run.specs;
  rt.spec_done.assign(run.specs.size(), false);
  rt.auto_ports = run.auto_ports;
  std::mutex mu;  // guards the wait below; rt is the poller's until it is joined
  std::condition_variable cv;
  std::atomic<bool> stop{false};
  std::atomic<pid_t> poll_pid{0};
  std::thread poller([&] {
    std::vector<std::string> ls = With(prefix, {"port", run.name, "ls", "--json"});
    while (!stop) {
      auto answer = QuietRemoteJson(t, ls, &poll_pid);
      if (stop) return;
      if (answer.ok()) UpdateRunTunnels(t, run.name, *answer, &rt);
      if (rt.Complete()) return;  // every -p has its tunnel; nothing more will come
      // A bounded poll interval (a forward shows at the next poll; nothing waits on its timing).
      auto every = answer.ok() && rt.specs.empty() ? std::chrono::seconds(2) : std::chrono::seconds(1);
      std::unique_lock<std::mutex> l(mu);
      cv.wait_for(l, every, [&] { return stop.load(); });
    }
  });
  int code = WaitRemote(t, *pid);
  g_run_ssh = 0;
  {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
  }
  cv.notify_all();
  if (pid_t p = poll_pid.load(); p > 0) kill(p, SIGTERM);
  poller.join();
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  for (const auto& [rp, tun] : rt.by_remote) EndTunnel(tun);
  return code;
}

}  // namespace

int RunRemoteVerb(const RemoteTarget& t, const std::vector<std::string>& args) {
  size_t v = 0;
  while (v < args.size()) {
    if (args[v] == "--store" && v + 1 < args.size()) {
      v += 2;
      continue;
    }
    if (!args[v].empty() && args[v][0] != '-') break;
    ++v;
  }
  if (v == args.size()) return RunRemote(t, args);
  for (size_t i = v; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "-h" || args[i] == "--help") return RunRemote(t, args);
  }
  std::vector<std::string> prefix(args.begin(), args.begin() + static_cast<long>(v));
  std::vector<std::string> rest(args.begin() + static_cast<long>(v) + 1, args.end());
  const std::string& verb = args[v];
  if (verb == "create") {
    std::vector<std::string> kept = rest;
    std::vector<std::string> specs = TakePublishSpecs(kept);
    bool auto_ports = false;
    for (const std::string& a : kept) {
      if (a == "--") break;
      auto_ports |= a == "--auto-ports";
    }
    if (!specs.empty() && !auto_ports) return CreateWithLocalPublish(t, prefix, kept, specs);
  }
  if (verb == "run") {
    // -p and --auto-ports of `run`: published on this machine while the run lives (above).
    auto plan = PlanRemoteRun(rest);
    if (!plan.ok()) return Fail(plan.error());
    if (*plan) return RunWithLocalPorts(t, prefix, **plan);
  }
  if (verb == "create") {
    // -p names ports of the machine that runs the verb: over --host that would be the remote's
    // loopback, not this one's. `create -p` is published here at each start (above); `create
    // --auto-ports` is refused (fail closed: it would publish on the remote's loopback only, and
    // nothing here lives to follow it) with the way that publishes here.
    for (const std::string& a : rest) {
      if (a == "--") break;
      if (a == "-p" || a.rfind("--publish", 0) == 0 || a == "--auto-ports" ||
          (a.size() > 2 && a.rfind("-p", 0) == 0 && a[2] != '-')) {
        return Fail(Error(ErrorCode::kInvalidArgument,
                          "-p/--publish/--auto-ports of `" + verb + "` against a remote would publish on " +
                              t.host + "'s loopback, not this machine's",
                          "drop it, and after the start publish here: `cloister --host " + t.url() +
                              " port NAME add HOST_PORT:GUEST_PORT`"));
      }
    }
  }
  if (verb == "cp") return RemoteCopy(t, prefix, rest);
  if (verb == "port") return RemotePort(t, prefix, rest);
  if (verb == "ssh-config") return RemoteSshConfig(t, prefix, rest);
  if (verb == "ssh") return RemoteSsh(t, prefix, rest);
  int code = RunRemote(t, args);
  if (code == 0 && EndsTunnels(verb)) {
    for (const std::string& a : rest) {
      if (!SafeName(a)) continue;
      for (const Tunnel& tun : Tunnels(t, a)) EndTunnel(tun);
      if (verb == "rm") unlink(PublishFile(t, a).c_str());
    }
  }
  if (code == 0 && verb == "start") {
    // What `create -p` kept here is published now, as `port add` would (a tunnel per spec).
    for (const std::string& a : rest) {
      if (!SafeName(a)) continue;
      std::vector<std::string> specs = SavedPublishSpecs(t, a);
      if (specs.empty() || !Tunnels(t, a).empty()) continue;
      if (int c = PortAdd(t, prefix, a, specs, /*as_json=*/false); c != kExitOk) return c;
    }
  }
  return code;
}

}  // namespace cloister::cli

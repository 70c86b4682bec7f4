#include "guest/sshd.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>

#include "base/file_util.h"
#include "base/strings.h"
#include "protocol/contract.h"

namespace cloister::guest {
namespace {

bool SafeEnvName(const std::string& k) {
  if (k.empty() || !(std::isalpha(static_cast<unsigned char>(k[0])) || k[0] == '_')) return false;
  for (char c : k) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// sshd_config's tokenizer takes "..." as one argument; inside it, `"` and `\` would need escapes
// whose handling differs between OpenSSH versions: such values are left out rather than guessed.
bool SafeEnvValue(const std::string& v) {
  for (char c : v) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '"' || c == '\\' || c == '\'') return false;
  }
  return true;
}

Status CheckRootFile(const std::string& path, const std::string& what) {
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0) {
    return ErrnoError("no " + what + " at " + path + " (the host gives it at boot)", errno);
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != 0) {
    return Error(ErrorCode::kPermissionDenied, what + " " + path + " is not a regular file owned by root");
  }
  return OkStatus();
}

void Log(const SshdOptions& o, const std::string& line) {
  if (o.log) {
    o.log(line);
  } else {
    std::cerr << "cloister-agent: " << line << std::endl;
  }
}

std::mutex& PrepareMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::string SshdConfigText(const SshdOptions& o, std::vector<std::string>* skipped) {
  std::string c =
      "# Written by cloister-agent at each stream of the `sshd` channel service (guest/sshd.h).\n"
      "# sshd runs in inetd mode (-i) on a stream the host opened: it listens on no port.\n";
  c += "HostKey " + o.host_key + "\n";
  c += "AuthorizedKeysFile " + o.authorized_keys + "\n";
  c += "AuthorizedPrincipalsFile none\n";
  c += "AuthorizedKeysCommand none\n";
  c += "AuthenticationMethods publickey\n";
  c += "PubkeyAuthentication yes\n";
  c += "PasswordAuthentication no\n";
  c += "KbdInteractiveAuthentication no\n";
  c += "HostbasedAuthentication no\n";
  c += "PermitEmptyPasswords no\n";
  c += "UsePAM no\n";
  c += std::string("PermitRootLogin ") + (o.permit_root ? "prohibit-password" : "no") + "\n";
  c += "AllowUsers " + o.user + "\n";
  c += "StrictModes yes\n";
  // SECURITY: nothing from the guest toward the host. The user's host agent never reaches the
  // guest (`ssh -A` is refused; the guest's SSH_AUTH_SOCK is the workspace's sign-only agent,
  // SetEnv below); no remote (-R), X11, tunnel or unix-socket forwarding, no listening socket.
  // The one direction allowed is the host's client opening a stream to the GUEST'S OWN loopback
  // (-L/-D/-W to 127.0.0.1, localhost, [::1]): VS Code Remote-SSH and JetBrains Gateway reach
  // their server in the guest that way. It gives the host user nothing `cloister exec` does not,
  // and the guest nothing at all (docs/threat-model.md, "IDE access over SSH").
  c += "AllowAgentForwarding no\n";
  c += "AllowTcpForwarding local\n";
  c += "PermitOpen 127.0.0.1:* localhost:* [::1]:*\n";
  c += "AllowStreamLocalForwarding no\n";
  c += "X11Forwarding no\n";
  c += "PermitTunnel no\n";
  c += "GatewayPorts no\n";
  c += "PermitListen none\n";
  c += "PermitUserEnvironment no\n";
  c += "UseDNS no\n";
  c += "PrintMotd no\n";
  c += "PrintLastLog no\n";
  c += "LogLevel VERBOSE\n";
  c += "Subsystem sftp internal-sftp\n";
  std::map<std::string, std::string> env = o.env;
  env["SSH_AUTH_SOCK"] = o.agent_socket;
  std::string set;
  for (const auto& [k, v] : env) {
    if (!SafeEnvName(k) || !SafeEnvValue(v)) {
      if (skipped) skipped->push_back(k);
      continue;
    }
    set += " \"" + k + "=" + v + "\"";
  }
  c += "SetEnv" + set + "\n";
  return c;
}

Status PrepareSshd(const SshdOptions& o) {
  if (access(o.sshd.c_str(), X_OK) != 0) {
    return Error(ErrorCode::kNotFound,
                 "this workspace's image has no sshd (" + o.sshd + "), which `cloister ssh` needs",
                 "add openssh-server to the image (apt-get install openssh-server, apk add "
                 "openssh-server) and rebuild it, or use `cloister exec NAME -- sh`");
  }
  RETURN_IF_ERROR(CheckRootFile(o.host_key, "sshd host key"));
  RETURN_IF_ERROR(CheckRootFile(o.authorized_keys, "authorized key"));
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (mkdir(o.privsep_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError("mkdir " + o.privsep_dir, errno);
  }
  std::vector<std::string> skipped;
  std::string text = SshdConfigText(o, &skipped);
  if (!skipped.empty()) Log(o, "sshd: environment left out of sessions: " + Join(skipped, ", "));
  return WriteFileAtomic(o.dir + "/sshd_config", text, 0644);
}

void ServeSshd(int fd, const SshdOptions& o) {
  Status st;
  {
    std::lock_guard<std::mutex> l(PrepareMutex());
    st = PrepareSshd(o);
  }
  if (!st.ok()) {
    Log(o, "sshd stream refused: " + st.error().ToString());
    std::string line = std::string(protocol::kSshdRefusedPrefix) + st.error().message() +
                       (st.error().hint().empty() ? "" : " (" + st.error().hint() + ")") + "\n";
    ssize_t w = write(fd, line.data(), line.size());
    (void)w;
    close(fd);
    return;
  }
  std::string config = o.dir + "/sshd_config", logfile = o.dir + "/sshd.log";
  std::vector<std::string> args = {o.sshd, "-i", "-f", config, "-E", logfile};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 0);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);  // the agent's channel stays the agent's
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  for (int sig : {SIGPIPE, SIGHUP, SIGINT, SIGTERM, SIGCHLD}) sigaddset(&dfl, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);  // the agent ignores SIGPIPE; sshd must not
  pid_t pid = -1;
  int rc = posix_spawn(&pid, o.sshd.c_str(), &fa, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fd);  // sshd holds the stream now; when it exits the host's end sees EOF
  if (rc != 0) {
    Log(o, "sshd: cannot start " + o.sshd + ": " + std::strerror(rc));
    return;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace cloister::guest

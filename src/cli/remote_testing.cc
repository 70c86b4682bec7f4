#include "cli/remote_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::cli::testing {

namespace fs = std::filesystem;

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

bool LoopbackSshd::Available() { return ProgramExists("/usr/sbin/sshd") && geteuid() == 0; }

LoopbackSshd::~LoopbackSshd() {
  Stop();
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

void LoopbackSshd::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  // sshd removes its pid file as it exits: wait for it (bounded) before the dir goes.
  for (int i = 0; i < 250 && kill(pid_, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
}

Status LoopbackSshd::Start(const std::string& remote_store, const std::string& exe,
                           const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/cloister-sshd.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return ErrnoError("mkdtemp", errno);
  dir_ = tmpl;
  fs::create_directories("/run/sshd");
  for (const char* key : {"hostkey", "id"}) {
    auto r = RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / key).string()});
    if (!r.ok() || r->exit_code != 0) return Error(ErrorCode::kUnavailable, "ssh-keygen failed");
  }
  WriteText(dir_ / "authorized_keys", ReadText(dir_ / "id.pub"));
  for (int attempt = 0; attempt < 3 && pid_ <= 0; ++attempt) {
    port_ = FreeLoopbackPort();
    std::ostringstream cfg;
    cfg << "ListenAddress 127.0.0.1:" << port_ << "\n"
        << "HostKey " << (dir_ / "hostkey").string() << "\n"
        << "PidFile " << (dir_ / "sshd.pid").string() << "\n"
        << "AuthorizedKeysFile " << (dir_ / "authorized_keys").string() << "\n"
        << "StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
        << "PasswordAuthentication no\nKbdInteractiveAuthentication no\nLogLevel VERBOSE\n"
        << "AllowTcpForwarding local\n"
        // The remote's own store; the remote knows nothing of the local one.
        << "SetEnv CLOISTER_HOME=" << remote_store
        << " PATH=" << fs::path(exe).parent_path().string() << ":/usr/sbin:/usr/bin:/sbin:/bin";
    for (const auto& [k, v] : env) cfg << " " << k << "=" << v;
    cfg << "\n";
    WriteText(dir_ / "sshd_config", cfg.str());
    auto d = RunProcess({"/usr/sbin/sshd", "-f", (dir_ / "sshd_config").string(), "-E", (dir_ / "sshd.log").string()});
    if (!d.ok() || d->exit_code != 0) continue;
    for (int i = 0; i < 500 && pid_ <= 0; ++i) {
      std::string pid = Trim(ReadText(dir_ / "sshd.pid"));
      if (!pid.empty()) pid_ = std::stoi(pid);
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file, bounded
    }
  }
  if (pid_ <= 0) return Error(ErrorCode::kUnavailable, "sshd did not start: " + Log());
  WriteText(dir_ / "known_hosts", "[127.0.0.1]:" + std::to_string(port_) + " " + ReadText(dir_ / "hostkey.pub"));
  // The user's ssh config, as a user would have it (here a file of its own).
  WriteText(dir_ / "ssh_config", "Host *\n  IdentityFile " + (dir_ / "id").string() +
                                     "\n  IdentitiesOnly yes\n  IdentityAgent none\n  BatchMode yes\n"
                                     "  UserKnownHostsFile " + (dir_ / "known_hosts").string() +
                                     "\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n");
  fs::create_directories(dir_ / "run");
  chmod((dir_ / "run").c_str(), 0700);
  return OkStatus();
}

std::map<std::string, std::string> LoopbackSshd::ClientEnv() const {
  return {{"CLOISTER_SSH_COMMAND", "ssh -F " + ssh_config()},
          {"XDG_CONFIG_HOME", (dir_ / "config").string()},
          {"XDG_RUNTIME_DIR", (dir_ / "run").string()}};
}

std::string LoopbackSshd::Log() const { return ReadText(dir_ / "sshd.log"); }

}  // namespace cloister::cli::testing

#include "base/testing_net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/file_util.h"
#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::testnet {

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

bool TestSshd::Runnable() { return geteuid() == 0 && access("/usr/sbin/sshd", X_OK) == 0; }

Result<TestSshd> TestSshd::Start(const SshdOptions& o) {
  if (!Runnable()) return Error(ErrorCode::kUnavailable, "sshd tests need root and /usr/sbin/sshd");
  std::error_code ec;
  std::filesystem::create_directories("/run/sshd", ec);  // privilege separation directory (Debian)
  std::string host_keys;
  std::vector<std::pair<std::string, std::string>> keys = {{"ed25519", "hostkey"}};
  if (o.all_host_key_types) {
    keys.push_back({"ecdsa", "hostkey_ecdsa"});
    keys.push_back({"rsa", "hostkey_rsa"});
  }
  for (const auto& [type, name] : keys) {
    std::string path = o.dir + "/" + name;
    if (access(path.c_str(), F_OK) != 0) {
      ASSIGN_OR_RETURN(RunOutput k, RunProcess({"ssh-keygen", "-q", "-t", type, "-N", "", "-f", path}));
      if (k.exit_code != 0) return Error(ErrorCode::kIo, "ssh-keygen " + type + ": " + k.err);
    }
    host_keys += "HostKey " + path + "\n";
  }
  RETURN_IF_ERROR(WriteFile(o.dir + "/authorized_keys", o.authorized_keys + "\n", 0600));
  std::string last_error = "no free port";
  for (int attempt = 0; attempt < 3; ++attempt) {
    int port = FreeLoopbackPort();
    if (port <= 0) continue;
    std::ostringstream cfg;
    cfg << "ListenAddress 127.0.0.1:" << port << "\n" << host_keys
        << "PidFile " << o.dir << "/sshd.pid\n"
        << "AuthorizedKeysFile " << o.dir << "/authorized_keys\n"
        << "StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
        << "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        << "PubkeyAuthentication yes\nLogLevel VERBOSE\n"
        << o.extra_config;
    RETURN_IF_ERROR(WriteFile(o.dir + "/sshd_config", cfg.str(), 0600));
    unlink((o.dir + "/sshd.pid").c_str());
    // sshd binds before it daemonises: when it exits 0 it is listening.
    ASSIGN_OR_RETURN(RunOutput d, RunProcess({"/usr/sbin/sshd", "-f", o.dir + "/sshd_config", "-E",
                                              o.dir + "/sshd.log"}));
    if (d.exit_code != 0) {
      last_error = "sshd exited " + std::to_string(d.exit_code) + ": " + d.err;
      continue;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      auto pid = ReadFileBounded(o.dir + "/sshd.pid", 64);
      if (pid.ok() && !Trim(*pid).empty()) {
        TestSshd s;
        s.dir_ = o.dir;
        s.port_ = port;
        s.pid_ = std::stoi(Trim(*pid));
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file, bounded
    }
    last_error = "sshd wrote no pid file";
  }
  return Error(ErrorCode::kUnavailable, "could not start sshd: " + last_error);
}

TestSshd::TestSshd(TestSshd&& other) noexcept { *this = std::move(other); }

TestSshd& TestSshd::operator=(TestSshd&& other) noexcept {
  if (this != &other) {
    Stop();
    dir_ = std::move(other.dir_);
    port_ = other.port_;
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

TestSshd::~TestSshd() { Stop(); }

void StopDaemon(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 250 && kill(pid, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void TestSshd::Stop() {
  StopDaemon(pid_);  // sshd daemonised: not our child
  pid_ = -1;
}

std::string TestSshd::Log() const {
  auto log = ReadFileBounded(dir_ + "/sshd.log", 16 << 20);
  return log.ok() ? *log : std::string();
}

}  // namespace cloister::testnet

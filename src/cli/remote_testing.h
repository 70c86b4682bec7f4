// Tests only: a real sshd on 127.0.0.1 standing in for a remote host (its own host key, one
// authorised test key), whose sessions run cloister with another store (the "remote" store), and
// an ssh client config that reaches it the way a user's ~/.ssh/config would. Needs root (sshd's
// privilege separation) and openssh-server; Start says why it cannot run.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>

#include "base/result.h"

namespace cloister::cli::testing {

class LoopbackSshd {
 public:
  LoopbackSshd() = default;
  LoopbackSshd(const LoopbackSshd&) = delete;
  LoopbackSshd& operator=(const LoopbackSshd&) = delete;
  ~LoopbackSshd();  // stops sshd, removes dir()

  // Whether this machine can run it (root, /usr/sbin/sshd).
  static bool Available();
  // Starts sshd whose sessions get CLOISTER_HOME=remote_store, `exe`'s directory first on PATH,
  // and `env` (values without spaces or quotes).
  Status Start(const std::string& remote_store, const std::string& exe,
               const std::map<std::string, std::string>& env = {});
  void Stop();

  const std::filesystem::path& dir() const { return dir_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "ssh://root@127.0.0.1:" + std::to_string(port_); }
  // The client's config file (identity, pinned host key, BatchMode).
  std::string ssh_config() const { return (dir_ / "ssh_config").string(); }
  // The environment a local cloister needs to use it: CLOISTER_SSH_COMMAND, XDG_CONFIG_HOME,
  // XDG_RUNTIME_DIR (both under dir()).
  std::map<std::string, std::string> ClientEnv() const;
  std::string Log() const;

 private:
  std::filesystem::path dir_;
  int port_ = -1;
  pid_t pid_ = -1;
};

int FreeLoopbackPort();
std::string ReadText(const std::filesystem::path& p);
void WriteText(const std::filesystem::path& p, const std::string& s);

}  // namespace cloister::cli::testing

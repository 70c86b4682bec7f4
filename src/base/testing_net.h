// Test-only helpers for tests that talk to loopback servers (library cloister_testing_net; never
// linked into the product): a free loopback port and a real OpenSSH sshd on 127.0.0.1.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/result.h"

namespace cloister::testnet {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read, released), or -1.
// Another process can take it before the caller binds: callers that start servers retry.
int FreeLoopbackPort();

// Stops a daemon that is not the caller's child (ssh-agent, sshd after they fork away): SIGTERM,
// then waits, bounded at 5 s, until the pid is gone, so that the files it removes on exit (its
// socket, its pid file) are gone before the caller removes their directory.
void StopDaemon(pid_t pid);

struct SshdOptions {
  std::string dir;              // owned by the caller; holds hostkey*, sshd_config, sshd.pid/.log
  std::string authorized_keys;  // the text of its AuthorizedKeysFile
  bool all_host_key_types = false;  // also ECDSA (hostkey_ecdsa) and RSA (hostkey_rsa) host keys
  std::string extra_config;     // appended to sshd_config (e.g. "AcceptEnv X\n")
};

// A real sshd on 127.0.0.1 with its own ed25519 host key (`dir`/hostkey, .pub beside it), public
// key login only, root allowed (StrictModes and PAM off). Needs root and /usr/sbin/sshd
// (Runnable()); tests skip otherwise. Stopped (SIGTERM, then waited for, bounded) on destruction.
class TestSshd {
 public:
  static bool Runnable();
  // Writes the keys and config and starts sshd, trying up to three free ports; once it returns,
  // sshd is listening (it binds before it daemonises).
  static Result<TestSshd> Start(const SshdOptions& options);

  TestSshd(TestSshd&& other) noexcept;
  TestSshd& operator=(TestSshd&& other) noexcept;
  TestSshd(const TestSshd&) = delete;
  TestSshd& operator=(const TestSshd&) = delete;
  ~TestSshd();

  int port() const { return port_; }
  pid_t pid() const { return pid_; }  // the listener (its per-connection children have it as ppid)
  std::string Log() const;            // sshd.log so far
  void Stop();

 private:
  TestSshd() = default;
  std::string dir_;
  int port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace cloister::testnet

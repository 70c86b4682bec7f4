// Serves a SignOnlyAgent on a unix socket path (SSH_AUTH_SOCK for host-side use and tests).
// Each accepted connection is served on its own thread by ServeAgentConnection.
// The agent must outlive the server; Stop() (or the destructor) closes the listener, shuts down
// every live connection and joins all threads.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "sshagent/agent.h"

namespace cloister::sshagent {

class UnixAgentServer {
 public:
  // Binds `path` (mode 0600; fails if it exists) and starts accepting.
  static Result<std::unique_ptr<UnixAgentServer>> Start(const std::string& path,
                                                        const SignOnlyAgent* agent);
  ~UnixAgentServer();
  void Stop();
  const std::string& path() const { return path_; }
  // Connections that ended with a protocol error (oversized message, cut mid-message...).
  int protocol_errors() const { return protocol_errors_.load(); }

 private:
  UnixAgentServer(std::string path, int listen_fd, const SignOnlyAgent* agent);
  void AcceptLoop();

  std::string path_;
  int listen_fd_;
  const SignOnlyAgent* agent_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> protocol_errors_{0};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> conn_fds_;          // guarded by mu_
  std::vector<std::thread> conn_threads_;  // guarded by mu_
};

}  // namespace cloister::sshagent

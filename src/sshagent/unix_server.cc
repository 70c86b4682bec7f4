#include "sshagent/unix_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cloister::sshagent {

Result<std::unique_ptr<UnixAgentServer>> UnixAgentServer::Start(const std::string& path,
                                                                const SignOnlyAgent* agent) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Error(ErrorCode::kInvalidArgument, "socket path too long: " + path,
                 "use a shorter directory (unix socket paths are limited to 107 bytes)");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  mode_t old = umask(0177);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    close(fd);
    return ErrnoError("bind " + path, bind_errno);
  }
  if (listen(fd, 16) != 0) {
    int e = errno;
    close(fd);
    unlink(path.c_str());
    return ErrnoError("listen " + path, e);
  }
  std::unique_ptr<UnixAgentServer> server(new UnixAgentServer(path, fd, agent));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

UnixAgentServer::UnixAgentServer(std::string path, int listen_fd, const SignOnlyAgent* agent)
    : path_(std::move(path)), listen_fd_(listen_fd), agent_(agent) {}

UnixAgentServer::~UnixAgentServer() { Stop(); }

void UnixAgentServer::AcceptLoop() {
  for (;;) {
    int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // listener shut down
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(c);
      return;
    }
    conn_fds_.push_back(c);
    conn_threads_.emplace_back([this, c] {
      Status st = ServeAgentConnection(c, *agent_);
      if (!st.ok() && !stopping_) protocol_errors_++;
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find(conn_fds_.begin(), conn_fds_.end(), c);
      if (it != conn_fds_.end()) conn_fds_.erase(it);
      close(c);
    });
  }
}

void UnixAgentServer::Stop() {
  if (stopping_.exchange(true)) return;
  shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  unlink(path_.c_str());
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int c : conn_fds_) shutdown(c, SHUT_RDWR);
    threads.swap(conn_threads_);
  }
  for (auto& t : threads) t.join();
}

}  // namespace cloister::sshagent

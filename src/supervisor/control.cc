#include "supervisor/control.h"

#include "base/file_util.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cloister::vm {

using nlohmann::json;

LineConn::~LineConn() {
  if (fd_ >= 0) close(fd_);
}

Status LineConn::Send(const json& doc, int pass_fd) {
  std::string line = doc.dump() + "\n";
  return SendAllWithFd(fd_, line, pass_fd, "control socket");
}

Result<json> LineConn::Read(std::chrono::steady_clock::time_point deadline, int* received_fd) {
  int got_fd = -1;
  auto finish = [&](Result<json> r) -> Result<json> {
    if (received_fd && r.ok()) *received_fd = got_fd;
    else if (got_fd >= 0) close(got_fd);
    return r;
  };
  while (true) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      json doc = json::parse(line, nullptr, false);
      if (doc.is_discarded() || !doc.is_object()) {
        return finish(Error(ErrorCode::kCorrupt, "control socket: malformed message"));
      }
      return finish(doc);
    }
    if (buf_.size() > kMaxControlLine) {
      return finish(Error(ErrorCode::kCorrupt, "control socket: message too long"));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return finish(Error(ErrorCode::kUnavailable, "control socket: no answer in time"));
    }
    pollfd p{fd_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) return finish(ErrnoError("poll control socket", errno));
    if (r <= 0) continue;
    char data[4096];
    iovec iov{data, sizeof(data)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd_, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return finish(ErrnoError("read control socket", errno));
    }
    for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        if (got_fd < 0) got_fd = fd;
        else close(fd);  // only one fd per message is meaningful
      }
    }
    if (n == 0) return finish(Error(ErrorCode::kUnavailable, "control socket closed"));
    buf_.append(data, static_cast<size_t>(n));
  }
}

namespace {

Result<sockaddr_un> UnixAddr(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Error(ErrorCode::kInvalidArgument, "socket path too long (" +
                 std::to_string(path.size()) + " bytes): " + path,
                 "use a shorter store root (--store or CLOISTER_HOME)");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

Result<int> ConnectUnix(const std::string& path) {
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddr(path));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError("connect " + path, err);
  }
  return fd;
}

Result<int> ListenUnix(const std::string& path) {
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddr(path));
  unlink(path.c_str());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  mode_t old = umask(0177);
  int r = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  umask(old);
  if (r != 0 || listen(fd, 16) != 0) {
    if (r == 0) err = errno;
    close(fd);
    return ErrnoError("listen on " + path, err);
  }
  return fd;
}

std::string JsonString(const json& doc, const std::string& key) {
  if (!doc.is_object()) return "";
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : "";
}

json ErrorReply(const Error& error) {
  return {{"ok", false}, {"error", error.message()}, {"hint", error.hint()},
          {"code", ErrorCodeName(error.code())}};
}

Error ErrorFromReply(const json& reply) {
  std::string msg = "supervisor refused";
  std::string hint;
  ErrorCode code = ErrorCode::kFailedPrecondition;
  if (auto e = reply.find("error"); e != reply.end() && e->is_string()) msg = *e;
  if (auto h = reply.find("hint"); h != reply.end() && h->is_string()) hint = *h;
  if (auto c = reply.find("code"); c != reply.end() && c->is_string()) {
    for (int i = 0; i <= static_cast<int>(ErrorCode::kInternal); ++i) {
      if (*c == ErrorCodeName(static_cast<ErrorCode>(i))) code = static_cast<ErrorCode>(i);
    }
  }
  return Error(code, msg, hint);
}

Result<json> ControlRequest(const std::string& socket_path, const json& request,
                            std::chrono::milliseconds timeout, int* received_fd) {
  ASSIGN_OR_RETURN(int fd, ConnectUnix(socket_path));
  LineConn conn(fd);
  RETURN_IF_ERROR(conn.Send(request));
  ASSIGN_OR_RETURN(json reply, conn.Read(std::chrono::steady_clock::now() + timeout, received_fd));
  if (auto ok = reply.find("ok"); ok == reply.end() || !ok->is_boolean() || !ok->get<bool>()) {
    if (received_fd && *received_fd >= 0) {
      close(*received_fd);
      *received_fd = -1;
    }
    return ErrorFromReply(reply);
  }
  return reply;
}

}  // namespace cloister::vm

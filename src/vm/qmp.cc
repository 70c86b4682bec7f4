#include "vm/qmp.h"

#include "base/file_util.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace cloister::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Result<QmpMessage> ParseQmpLine(const std::string& line) {
  // SECURITY: bytes from QEMU (which runs guest code) are hostile: bounded, no exceptions.
  if (line.size() > kMaxQmpLine) return Error(ErrorCode::kCorrupt, "QMP: line too long");
  json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Error(ErrorCode::kCorrupt, "QMP: reply is not a JSON object");
  }
  QmpMessage msg{QmpMessage::Kind::kReturn, json(), "", ""};
  if (auto it = doc.find("id"); it != doc.end() && it->is_string()) msg.id = it->get<std::string>();
  if (doc.contains("QMP")) {
    msg.kind = QmpMessage::Kind::kGreeting;
    msg.body = doc["QMP"];
  } else if (doc.contains("return")) {
    msg.kind = QmpMessage::Kind::kReturn;
    msg.body = doc["return"];
  } else if (doc.contains("error")) {
    msg.kind = QmpMessage::Kind::kError;
    msg.body = doc["error"];
    if (!msg.body.is_object()) return Error(ErrorCode::kCorrupt, "QMP: malformed error");
  } else if (auto ev = doc.find("event"); ev != doc.end()) {
    if (!ev->is_string()) return Error(ErrorCode::kCorrupt, "QMP: malformed event");
    msg.kind = QmpMessage::Kind::kEvent;
    msg.event = ev->get<std::string>();
    msg.body = std::move(doc);
  } else {
    return Error(ErrorCode::kCorrupt, "QMP: unknown message");
  }
  return msg;
}

QmpClient::~QmpClient() {
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<QmpClient>> QmpClient::Connect(const std::string& socket_path,
                                                      std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return Error(ErrorCode::kInvalidArgument, "QMP socket path too long: " + socket_path,
                 "use a shorter store root (--store or CLOISTER_HOME)");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  auto deadline = Clock::now() + timeout;
  int fd = -1;
  while (true) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoError("socket", errno);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    int err = errno;
    close(fd);
    fd = -1;
    if ((err != ENOENT && err != ECONNREFUSED) || Clock::now() >= deadline) {
      return ErrnoError("connect to QMP socket " + socket_path, err);
    }
    // Waiting for QEMU to create its socket: poll the condition with a bounded deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::unique_ptr<QmpClient> client(new QmpClient(fd));
  ASSIGN_OR_RETURN(QmpMessage greeting, client->ReadMessage(deadline + std::chrono::seconds(5)));
  if (greeting.kind != QmpMessage::Kind::kGreeting) {
    return Error(ErrorCode::kCorrupt, "QMP: expected a greeting");
  }
  RETURN_IF_ERROR(client->Execute("qmp_capabilities", json::object(), std::chrono::seconds(10)));
  return client;
}

void QmpClient::StashEvent(QmpMessage msg) {
  events_.push_back(std::move(msg));
  while (events_.size() > kMaxQmpEvents) events_.pop_front();
}

Result<QmpMessage> QmpClient::ReadMessage(Clock::time_point deadline) {
  while (true) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.empty() || line == "\r") continue;
      return ParseQmpLine(line);
    }
    if (buffer_.size() > kMaxQmpLine) return Error(ErrorCode::kCorrupt, "QMP: line too long");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Error(ErrorCode::kUnavailable, "QMP: timed out waiting for QEMU");
    pollfd p{fd_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll QMP", errno);
    }
    if (r == 0) continue;
    char buf[8192];
    ssize_t got = read(fd_, buf, sizeof(buf));
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("read QMP", errno);
    }
    if (got == 0) return Error(ErrorCode::kUnavailable, "QMP: QEMU closed the connection");
    buffer_.append(buf, static_cast<size_t>(got));
  }
}

Result<json> QmpClient::Execute(const std::string& command, const json& arguments,
                                std::chrono::milliseconds timeout, int pass_fd) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = "c" + std::to_string(next_id_++);
  json req = {{"execute", command}, {"id", id}};
  if (!arguments.empty()) req["arguments"] = arguments;
  std::string line = req.dump() + "\n";
  RETURN_IF_ERROR(SendAllWithFd(fd_, line, pass_fd, "QMP"));
  auto deadline = Clock::now() + timeout;
  while (true) {
    ASSIGN_OR_RETURN(QmpMessage msg, ReadMessage(deadline));
    if (msg.kind == QmpMessage::Kind::kEvent) {
      StashEvent(std::move(msg));
      continue;
    }
    if (msg.id != id) continue;  // a stale reply to a command that timed out earlier
    if (msg.kind == QmpMessage::Kind::kError) {
      std::string desc = "unknown error";
      if (auto d = msg.body.find("desc"); d != msg.body.end() && d->is_string()) desc = *d;
      return Error(ErrorCode::kFailedPrecondition, "QMP " + command + ": " + desc);
    }
    if (msg.kind == QmpMessage::Kind::kReturn) return msg.body;
  }
}

Result<json> QmpClient::WaitEvent(const std::string& name, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  auto deadline = Clock::now() + timeout;
  while (true) {
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if (it->event == name) {
        json body = std::move(it->body);
        events_.erase(it);
        return body;
      }
    }
    ASSIGN_OR_RETURN(QmpMessage msg, ReadMessage(deadline));
    if (msg.kind == QmpMessage::Kind::kEvent) StashEvent(std::move(msg));
  }
}

std::deque<QmpMessage> QmpClient::TakeEvents() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(events_, {});
}

}  // namespace cloister::vm

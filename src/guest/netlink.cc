#include "guest/netlink.h"

#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace cloister::guest {

Status NetlinkExchange(int protocol, const char* what, const void* req, size_t len, size_t acks,
                       int ok_errno) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
  if (fd < 0) return ErrnoError(std::string(what) + " socket", errno);
  int one = 1;
  // Acks without a copy of the request: a refusal's answer stays small.
  setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, req, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) !=
      static_cast<ssize_t>(len)) {
    int e = errno;
    close(fd);
    return ErrnoError(std::string(what) + " send", e);
  }
  const uint32_t first_seq = static_cast<const nlmsghdr*>(req)->nlmsg_seq;
  size_t acked = 0;
  Status result = OkStatus();
  alignas(nlmsghdr) char buf[16384];
  while (acked < acks && result.ok()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) {
      result = Error(ErrorCode::kUnavailable, std::string(what) + ": no answer for " +
                                                  std::to_string(acks - acked) + " of " +
                                                  std::to_string(acks) + " messages");
      break;
    }
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      result = ErrnoError(std::string(what) + " receive", errno);
      break;
    }
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
        result = Error(ErrorCode::kUnavailable, std::string(what) + ": short answer");
        break;
      }
      const auto* err = reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(h));
      const int e = -err->error;
      if (e != 0 && e != ok_errno) {
        const uint32_t index = err->msg.nlmsg_seq - first_seq;
        result = ErrnoError(std::string(what) +
                                (index > 0 ? " (message " + std::to_string(index) + ")" : ""),
                            e);
        break;
      }
      ++acked;
    }
  }
  close(fd);
  return result;
}

}  // namespace cloister::guest

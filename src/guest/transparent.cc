#include "guest/transparent.h"

#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "base/file_util.h"
#include "base/subprocess.h"
#include "guest/netlink.h"
#include "guest/nft_batch.h"

namespace cloister::guest {

struct TransparentEgress::State {
  TransparentOptions options;
  OpenStreamFn open;
  std::function<void(const std::string&)> log;
  std::shared_ptr<SyntheticMap> map;
  int udp_fd = -1, dns_tcp_fd = -1, listen_fd = -1;
  uint16_t port = 0, dns_port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> connections{0};
  std::atomic<size_t> dns_connections{0};
  std::atomic<uint64_t> refusals{0};
};

namespace {

using State = TransparentEgress::State;

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Closes `fd` with a TCP reset (the client sees ECONNRESET/ECONNREFUSED, not a clean end).
void Reset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

Result<int> BindSocket(int type, uint16_t port, uint16_t* bound) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (type == SOCK_STREAM && listen(fd, 128) != 0)) {
    int e = errno;
    close(fd);
    return ErrnoError("bind 0.0.0.0:" + std::to_string(port), e);
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *bound = ntohs(a.sin_port);
  return fd;
}

void LogRefusal(State& s, const std::string& line) {
  // A process in the guest can cause refusals at will: keep the console readable.
  uint64_t n = ++s.refusals;
  if (n <= 100) {
    s.log(line);
  } else if (n % 1000 == 0) {
    s.log(line + " (" + std::to_string(n) + " refusals so far; most not logged)");
  }
}

void UdpDnsLoop(std::shared_ptr<State> s) {
  std::vector<char> buf(kMaxDnsMessage + 1);
  int one = 1;
  setsockopt(s->udp_fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
  while (!s->stopping) {
    sockaddr_in peer{};
    iovec iov{buf.data(), buf.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in_pktinfo))];
    msghdr m{};
    m.msg_name = &peer;
    m.msg_namelen = sizeof peer;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    ssize_t n = recvmsg(s->udp_fd, &m, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (s->stopping) break;
      continue;  // e.g. ICMP errors reported on the socket
    }
    if (s->stopping) break;
    // Answer from the address the query reached (127.0.0.1 after a redirect), so the reply
    // matches the NAT record and the client sees it come from the server it asked.
    in_pktinfo info{};
    bool have_info = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
        std::memcpy(&info, CMSG_DATA(c), sizeof info);
        have_info = true;
      }
    }
    std::string reply = AnswerDnsQuery(std::string_view(buf.data(), static_cast<size_t>(n)),
                                       *s->map, s->options.hostname);
    if (reply.empty()) continue;
    iovec out{reply.data(), reply.size()};
    msghdr r{};
    r.msg_name = &peer;
    r.msg_namelen = m.msg_namelen;
    r.msg_iov = &out;
    r.msg_iovlen = 1;
    alignas(cmsghdr) char rcontrol[CMSG_SPACE(sizeof(in_pktinfo))] = {};
    if (have_info) {
      r.msg_control = rcontrol;
      r.msg_controllen = sizeof rcontrol;
      cmsghdr* c = CMSG_FIRSTHDR(&r);
      c->cmsg_level = IPPROTO_IP;
      c->cmsg_type = IP_PKTINFO;
      c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
      in_pktinfo src{};
      src.ipi_spec_dst = info.ipi_addr;
      std::memcpy(CMSG_DATA(c), &src, sizeof src);
    }
    sendmsg(s->udp_fd, &r, MSG_NOSIGNAL);
  }
  close(s->udp_fd);
}

// Reads exactly n bytes within `timeout_ms` of idleness; false on EOF, error or timeout.
bool ReadExact(int fd, char* p, size_t n, int timeout_ms) {
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    int r = poll(&pf, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void ServeDnsTcp(std::shared_ptr<State> s, int fd) {
  // SECURITY: length-prefixed queries from a guest process; each bounded by kMaxDnsMessage, the
  // connection closed after 10 s of silence.
  while (true) {
    unsigned char len[2];
    if (!ReadExact(fd, reinterpret_cast<char*>(len), 2, 10000)) break;
    size_t n = (static_cast<size_t>(len[0]) << 8) | len[1];
    if (n > kMaxDnsMessage) break;
    std::string msg(n, '\0');
    if (!ReadExact(fd, msg.data(), n, 10000)) break;
    std::string reply = AnswerDnsQuery(msg, *s->map, s->options.hostname);
    if (reply.empty()) break;
    std::string framed;
    framed.push_back(static_cast<char>(reply.size() >> 8));
    framed.push_back(static_cast<char>(reply.size() & 0xFF));
    framed += reply;
    if (!SendAll(fd, framed.data(), framed.size())) break;
  }
  close(fd);
  --s->dns_connections;
}

void TcpDnsLoop(std::shared_ptr<State> s) {
  while (!s->stopping) {
    int fd = accept4(s->dns_tcp_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (s->stopping) break;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // EMFILE: back off
      continue;
    }
    if (++s->dns_connections > 64) {
      --s->dns_connections;
      close(fd);
      continue;
    }
    std::thread(ServeDnsTcp, s, fd).detach();
  }
  close(s->dns_tcp_fd);
}

// Relays between the client and the stream's local end until both directions ended. If the host
// ended the stream without sending a byte (a refusal, or no `egress` service), the client gets a
// reset rather than a clean end.
void Relay(int client, int stream) {
  bool client_open = true, stream_open = true, from_host = false, failed = false;
  std::vector<char> buf(64 * 1024);
  while ((client_open || stream_open) && !failed) {
    pollfd p[2];
    nfds_t np = 0;
    int ic = -1, is = -1;
    if (client_open) { ic = static_cast<int>(np); p[np++] = {client, POLLIN, 0}; }
    if (stream_open) { is = static_cast<int>(np); p[np++] = {stream, POLLIN, 0}; }
    if (poll(p, np, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ic >= 0 && p[ic].revents) {
      ssize_t n = read(client, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) {
        failed = true;  // the client reset: drop the stream too
      } else if (n == 0) {
        client_open = false;
        shutdown(stream, SHUT_WR);
      } else if (!SendAll(stream, buf.data(), static_cast<size_t>(n))) {
        failed = true;
      }
    }
    if (failed) break;
    if (is >= 0 && p[is].revents) {
      ssize_t n = read(stream, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        stream_open = false;
        if (!from_host) {
          failed = true;  // refused before any data
        } else {
          shutdown(client, SHUT_WR);
        }
      } else {
        from_host = true;
        if (!SendAll(client, buf.data(), static_cast<size_t>(n))) failed = true;
      }
    }
  }
  close(stream);
  if (failed) {
    Reset(client);
  } else {
    close(client);
  }
}

void HandleConnection(std::shared_ptr<State> s, int client) {
  sockaddr_in orig{}, local{};
  socklen_t olen = sizeof orig, llen = sizeof local;
  if (getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &orig, &olen) != 0 ||
      getsockname(client, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
    LogRefusal(*s, std::string("egress: refused a connection without an original destination: ") +
                       std::strerror(errno));
    Reset(client);
    return;
  }
  uint32_t addr = ntohl(orig.sin_addr.s_addr);
  uint16_t port = ntohs(orig.sin_port);
  std::string dest = Ipv4String(addr) + ":" + std::to_string(port);
  // Not redirected: someone connected to the listener itself (e.g. after flushing the rules).
  if (orig.sin_addr.s_addr == local.sin_addr.s_addr && orig.sin_port == local.sin_port) {
    LogRefusal(*s, "egress: refused a direct connection to the transparent listener (" + dest + ")");
    Reset(client);
    return;
  }
  std::optional<std::string> name = IsSynthetic(addr) ? s->map->NameFor(addr) : std::nullopt;
  if (!name) {
    LogRefusal(*s, "egress: refused TCP to " + dest +
                       ": not an address the guest's DNS gave out (a literal or stale IP); "
                       "nothing was sent to the host");
    Reset(client);
    return;
  }
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
    s->log(std::string("egress: socketpair: ") + std::strerror(errno));
    Reset(client);
    return;
  }
  // The header goes first on the stream: written before the open, so it precedes client bytes.
  std::string header = TransparentHeader(*name, port);
  if (!SendAll(sp[1], header.data(), header.size())) {
    close(sp[0]);
    close(sp[1]);
    Reset(client);
    return;
  }
  s->open(s->options.service, sp[0]);
  Relay(client, sp[1]);
}

void ListenLoop(std::shared_ptr<State> s) {
  while (!s->stopping) {
    int fd = accept4(s->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (s->stopping) break;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // EMFILE: back off
      continue;
    }
    if (++s->connections > TransparentOptions::kMaxConnections) {
      --s->connections;
      LogRefusal(*s, "egress: too many open connections; reset a new one");
      Reset(fd);
      continue;
    }
    std::thread([s, fd] {
      HandleConnection(s, fd);
      --s->connections;
    }).detach();
  }
  close(s->listen_fd);
}

}  // namespace

std::string RedirectNatRuleset(uint16_t port, uint16_t dns_port) {
  std::string p = std::to_string(port), d = std::to_string(dns_port);
  return "table ip cloister\n"
         "delete table ip cloister\n"
         "table ip cloister {\n"
         "  chain output {\n"
         "    type nat hook output priority -100; policy accept;\n"
         "    ip daddr 127.0.0.0/8 return\n"
         "    meta l4proto tcp th dport 53 redirect to :" + d + "\n"
         "    meta l4proto udp th dport 53 redirect to :" + d + "\n"
         "    meta l4proto tcp redirect to :" + p + "\n"
         "  }\n"
         "  chain prerouting {\n"
         "    type nat hook prerouting priority -100; policy accept;\n"
         "    iifname \"lo\" return\n"
         "    meta l4proto tcp th dport 53 redirect to :" + d + "\n"
         "    meta l4proto udp th dport 53 redirect to :" + d + "\n"
         "    meta l4proto tcp redirect to :" + p + "\n"
         "  }\n"
         "}\n";
}

std::string RedirectRuleset(uint16_t port, uint16_t dns_port) {
  return RedirectNatRuleset(port, dns_port) +
         "table ip cloister {\n"
         "  chain filter_output {\n"
         "    type filter hook output priority 0; policy accept;\n"
         "    ip daddr 127.0.0.0/8 accept\n"
         "    ct state established,related accept\n"
         "    reject\n"
         "  }\n"
         "}\n";
}

std::string TransparentHeader(const std::string& name, uint16_t port) {
  return name + " " + std::to_string(port) + "\n";
}

namespace {

// RTM_NEWROUTE on lo: `ip route add local DST/LEN dev lo table local`, or
// `ip route add DST/LEN dev lo src 127.0.0.1`; an existing one is kept.
Status AddLoRoute(uint32_t dst, uint8_t len, bool local, unsigned lo) {
  struct {
    nlmsghdr h;
    rtmsg r;
    char attrs[64];
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  req.h.nlmsg_type = RTM_NEWROUTE;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  req.h.nlmsg_seq = 1;
  req.r.rtm_family = AF_INET;
  req.r.rtm_dst_len = len;
  req.r.rtm_table = local ? RT_TABLE_LOCAL : RT_TABLE_MAIN;
  req.r.rtm_protocol = RTPROT_BOOT;
  req.r.rtm_scope = local ? RT_SCOPE_HOST : RT_SCOPE_LINK;
  req.r.rtm_type = local ? RTN_LOCAL : RTN_UNICAST;
  auto add_attr = [&](unsigned short type, const void* data, size_t n) {
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(req.h.nlmsg_len));
    rta->rta_type = type;
    rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(n));
    std::memcpy(RTA_DATA(rta), data, n);
    req.h.nlmsg_len = NLMSG_ALIGN(req.h.nlmsg_len) + RTA_ALIGN(rta->rta_len);
  };
  int oif = static_cast<int>(lo);
  add_attr(RTA_OIF, &oif, sizeof oif);
  if (len > 0) {
    uint32_t be = htonl(dst);
    add_attr(RTA_DST, &be, sizeof be);
  }
  if (!local) {
    // Source 127.0.0.1: without it a socket to a non-local address gets 0.0.0.0 as its source,
    // and the agent's reset (or answer) never reaches it.
    uint32_t src = htonl(INADDR_LOOPBACK);
    add_attr(RTA_PREFSRC, &src, sizeof src);
  }
  return NetlinkExchange(NETLINK_ROUTE, "netlink", &req, req.h.nlmsg_len, 1, EEXIST);
}

}  // namespace

Status SetupLocalRoute() {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int ioerr = 0;
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    ioerr = errno;
  } else if (!(ifr.ifr_flags & IFF_UP)) {
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) ioerr = errno;
  }
  close(fd);
  if (ioerr) return ErrnoError("bring lo up", ioerr);
  unsigned lo = if_nametoindex("lo");
  if (lo == 0) return ErrnoError("if_nametoindex lo", errno);
  // Synthetic addresses are local: without the redirect (rules flushed) a connect is refused at
  // once. Every other IPv4 destination routes into lo, where netfilter redirects it to the agent
  // (which refuses what the DNS never gave out); without the redirect such packets loop back and
  // are dropped. More specific routes (a container bridge in the guest) keep working.
  RETURN_IF_ERROR(AddLoRoute(kSyntheticNet, 15, /*local=*/true, lo));
  return AddLoRoute(0, 0, /*local=*/false, lo);
}

Result<std::unique_ptr<TransparentEgress>> TransparentEgress::Start(
    TransparentOptions options, OpenStreamFn open, std::function<void(const std::string&)> log) {
  auto s = std::make_shared<State>();
  s->options = std::move(options);
  s->open = std::move(open);
  s->log = std::move(log);
  s->map = std::make_shared<SyntheticMap>(s->options.max_names);
  // DNS: UDP and TCP on the same port (port 0 in tests: the UDP one's, retried if TCP's is taken).
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(s->udp_fd, BindSocket(SOCK_DGRAM, s->options.dns_port, &s->dns_port));
    auto tcp = BindSocket(SOCK_STREAM, s->dns_port, &s->dns_port);
    if (tcp.ok()) {
      s->dns_tcp_fd = *tcp;
      break;
    }
    close(s->udp_fd);
    if (s->options.dns_port != 0 || attempt >= 5) return tcp.error();
  }
  auto listen_fd = BindSocket(SOCK_STREAM, s->options.port, &s->port);
  if (!listen_fd.ok()) {
    close(s->udp_fd);
    close(s->dns_tcp_fd);
    return listen_fd.error();
  }
  s->listen_fd = *listen_fd;

  if (s->options.system_setup) {
    if (auto st = SetupLocalRoute(); !st.ok()) {
      s->log("egress: local route: " + st.error().message() + " (connections may fail)");
    }
    // The kernel loads what the ruleset needs on demand, one modprobe exec per module and alias
    // (nf_tables, the NAT chain and its conntrack, redir, reject, ct): 27 s of guest time under
    // a loaded TCG host, against 0.3 s where the initramfs loaded them already (the test image).
    // One modprobe for all of them first does the same work in one process; a failure here is
    // only logged (nft then loads what it can itself, as before). `reject` in an ip table is
    // nft_reject_ipv4 (nft_reject_inet is the inet family's): with the inet one listed instead,
    // nft still loaded the ipv4 one itself, one more modprobe under the kernel's usermode helper.
    // The boot hook starts the same modprobe in the background when it starts (image/boot_hook.cc),
    // before the metadata disk is mounted and this agent runs; this one is still what the rules
    // wait for: a module the hook is loading is waited for (the kernel's finit_module of it
    // returns once that load ends), one it did not load is loaded here.
    auto since = [](std::chrono::steady_clock::time_point t0) {
      return " in " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - t0).count()) +
             " ms";
    };
    utsname uts{};
    const bool module_tree =
        uname(&uts) == 0 &&
        access(("/lib/modules/" + std::string(uts.release) + "/modules.dep").c_str(), R_OK) == 0;
    for (const char* modprobe : {"/usr/sbin/modprobe", "/sbin/modprobe"}) {
      if (!module_tree || access(modprobe, X_OK) != 0) continue;
      auto mp_start = std::chrono::steady_clock::now();
      RunOptions mo;
      mo.timeout = std::chrono::seconds(60);
      std::vector<std::string> argv = {modprobe, "-a", "-q"};
      for (const char* m : protocol::kEgressKernelModules) argv.push_back(m);
      auto m = RunProcess(argv, mo);
      s->log("egress: netfilter modules " +
             std::string(m.ok() && m->success() ? "loaded" : "not all loaded") + since(mp_start) +
             " (one modprobe)");
      break;
    }
    // The rules as one nfnetlink batch from here (guest/nft_batch.h): no nft process to start and
    // no ruleset to parse, 0.33-0.42 s of guest time under TCG. The nft process is the fallback,
    // with the text ruleset (the same rules: guest_transparent_test).
    auto batch_start = std::chrono::steady_clock::now();
    if (auto batch = LoadRedirectRules(s->port, s->dns_port, /*with_filter=*/true); batch.ok()) {
      s->log("egress: redirect rules loaded (table ip cloister, one nfnetlink batch)" +
             since(batch_start));
    } else {
      s->log("egress: " + batch.error().message() + "; loading the rules with nft");
      RunOptions ro;
      ro.stdin_data = RedirectRuleset(s->port, s->dns_port);
      ro.timeout = std::chrono::seconds(30);
      std::string nft = s->options.nft_binary;
      if (nft.find('/') == std::string::npos) {
        // The boot hook's PATH may be minimal: look where Debian puts it first.
        for (const char* dir : {"/usr/sbin/", "/sbin/"}) {
          if (access((dir + nft).c_str(), X_OK) == 0) {
            nft = dir + nft;
            break;
          }
        }
      }
      auto nft_start = std::chrono::steady_clock::now();
      auto r = RunProcess({nft, "-f", "-"}, ro);
      if (!r.ok() || !r->success()) {
        std::string why = r.ok() ? r->err : r.error().message();
        // Without nft_reject the NAT part still gives the redirect; UDP then just finds no route.
        ro.stdin_data = RedirectNatRuleset(s->port, s->dns_port);
        auto r2 = RunProcess({nft, "-f", "-"}, ro);
        if (r2.ok() && r2->success()) {
          s->log("egress: nft filter chain not loaded (" + why + "); redirect rules loaded" +
                 since(nft_start));
        } else {
          s->log("egress: nft rules NOT loaded (" + (r2.ok() ? r2->err : r2.error().message()) +
                 "): no transparent egress this boot (nothing leaves the guest either)");
        }
      } else {
        s->log("egress: redirect rules loaded (table ip cloister)" + since(nft_start));
      }
    }
    std::string resolv =
        "# Written by cloister-agent at every boot: the agent answers DNS (transparent egress).\n"
        "nameserver 127.0.0.1\n";
    if (s->dns_port != 53) resolv += "# (DNS port " + std::to_string(s->dns_port) + ")\n";
    if (auto st = WriteFileAtomic(s->options.resolv_conf, resolv, 0644); !st.ok()) {
      s->log("egress: " + st.error().message());
    }
  }
  std::thread(UdpDnsLoop, s).detach();
  std::thread(TcpDnsLoop, s).detach();
  std::thread(ListenLoop, s).detach();
  s->log("egress: DNS on port " + std::to_string(s->dns_port) + ", transparent listener on port " +
         std::to_string(s->port) + " -> host service " + s->options.service);
  std::unique_ptr<TransparentEgress> t(new TransparentEgress());
  t->state_ = s;
  return t;
}

TransparentEgress::~TransparentEgress() {
  if (!state_) return;
  state_->stopping = true;
  shutdown(state_->udp_fd, SHUT_RDWR);
  shutdown(state_->dns_tcp_fd, SHUT_RDWR);
  shutdown(state_->listen_fd, SHUT_RDWR);
}

SyntheticMap& TransparentEgress::map() { return *state_->map; }
uint16_t TransparentEgress::port() const { return state_->port; }
uint16_t TransparentEgress::dns_port() const { return state_->dns_port; }

}  // namespace cloister::guest

#include "supervisor/ports.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <tuple>

namespace cloister::vm {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Decimal 0..65535, 1-5 digits, no sign, no leading zero (but "0" itself).
bool ParsePortNumber(std::string_view s, uint16_t* out) {
  if (s.empty() || s.size() > 5) return false;
  if (s.size() > 1 && s[0] == '0') return false;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > 65535) return false;
  *out = static_cast<uint16_t>(v);
  return true;
}

// The canonical text of a numeric IPv4/IPv6 address, or "" if `s` is not one.
std::string CanonicalIp(const std::string& s, int* family = nullptr) {
  char buf[INET6_ADDRSTRLEN];
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    if (family) *family = AF_INET;
    return inet_ntop(AF_INET, &a4, buf, sizeof buf) ? buf : "";
  }
  if (inet_pton(AF_INET6, s.c_str(), &a6) == 1) {
    if (family) *family = AF_INET6;
    return inet_ntop(AF_INET6, &a6, buf, sizeof buf) ? buf : "";
  }
  return "";
}

Error BadSpec(std::string_view text, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument,
               "bad port '" + std::string(text.substr(0, 80)) + "': " + why,
               "use [HOST_IP:]HOST_PORT:GUEST_PORT, e.g. -p 5173:5173 or -p 127.0.0.1:8080:80");
}

}  // namespace

std::string PortSpec::ToString() const {
  std::string ip = host_ip.find(':') != std::string::npos ? "[" + host_ip + "]" : host_ip;
  return ip + ":" + std::to_string(host_port) + ":" + std::to_string(guest_port);
}

bool IsLoopbackAddress(const std::string& ip) {
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, ip.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, ip.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

Result<PortSpec> ParsePortSpec(std::string_view text) {
  if (text.empty() || text.size() > 128) return BadSpec(text, "empty or too long");
  PortSpec spec;
  std::string_view rest = text;
  std::string ip;
  if (rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return BadSpec(text, "an IPv6 address goes in brackets: [::1]:8080:80");
    }
    ip = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 2);
    int family = 0;
    std::string canon = CanonicalIp(ip, &family);
    if (canon.empty() || family != AF_INET6) return BadSpec(text, "'" + ip + "' is not an IPv6 address");
    ip = canon;
  }
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t colon = rest.find(':', start);
    parts.push_back(rest.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
    if (parts.size() > 3) break;
  }
  std::string_view host_port, guest_port;
  if (!ip.empty()) {
    if (parts.size() != 2) return BadSpec(text, "expected [IPV6]:HOST_PORT:GUEST_PORT");
    host_port = parts[0];
    guest_port = parts[1];
  } else if (parts.size() == 2) {
    host_port = parts[0];
    guest_port = parts[1];
  } else if (parts.size() == 3) {
    std::string canon = CanonicalIp(std::string(parts[0]));
    if (canon.empty()) {
      return BadSpec(text, "'" + std::string(parts[0].substr(0, 64)) +
                               "' is not a numeric IP address (host names are not accepted)");
    }
    ip = canon;
    host_port = parts[1];
    guest_port = parts[2];
  } else {
    return BadSpec(text, "expected HOST_PORT:GUEST_PORT or HOST_IP:HOST_PORT:GUEST_PORT");
  }
  if (host_port.empty() && ip.empty()) return BadSpec(text, "host port missing (0: any free port)");
  if (!ip.empty()) spec.host_ip = ip;
  if (host_port.empty()) {
    spec.host_port = 0;  // docker's 127.0.0.1::80: any free port
  } else if (!ParsePortNumber(host_port, &spec.host_port)) {
    return BadSpec(text, "host port must be 0..65535");
  }
  if (!ParsePortNumber(guest_port, &spec.guest_port) || spec.guest_port == 0) {
    return BadSpec(text, "guest port must be 1..65535");
  }
  return spec;
}

// ---- config.json "ports" ----

namespace {

Status ValidatePorts(const PortsConfig& p) {
  if (p.publish.size() > kMaxPublishedPorts) {
    return Error(ErrorCode::kInvalidArgument,
                 "too many published ports (" + std::to_string(p.publish.size()) + ", at most " +
                     std::to_string(kMaxPublishedPorts) + ")");
  }
  for (size_t i = 0; i < p.publish.size(); ++i) {
    ASSIGN_OR_RETURN(PortSpec n, ParsePortSpec(p.publish[i].ToString()));
    if (!(n == p.publish[i])) {
      return Error(ErrorCode::kInvalidArgument, "port '" + p.publish[i].ToString() + "' is not normalised");
    }
    for (size_t j = 0; j < i; ++j) {
      if (p.publish[j].host_port != 0 && p.publish[j].host_port == n.host_port &&
          p.publish[j].host_ip == n.host_ip) {
        return Error(ErrorCode::kInvalidArgument,
                     "host port " + n.host_ip + ":" + std::to_string(n.host_port) +
                         " is published twice",
                     "give each -p its own host port");
      }
    }
  }
  return OkStatus();
}

json PortsToJson(const PortsConfig& p) {
  json publish = json::array();
  for (const PortSpec& s : p.publish) publish.push_back(s.ToString());
  return {{"publish", publish}, {"auto", p.auto_ports}};
}

Result<PortsConfig> PortsFromJson(const json& doc) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kCorrupt, "config.json: \"ports\" " + why,
                 "fix or remove the \"ports\" key of the workspace's config.json");
  };
  if (!doc.is_object()) return bad("is not an object");
  PortsConfig p;
  if (auto it = doc.find("auto"); it != doc.end()) {
    if (!it->is_boolean()) return bad("auto is not a boolean");
    p.auto_ports = it->get<bool>();
  }
  if (auto it = doc.find("publish"); it != doc.end()) {
    if (!it->is_array() || it->size() > kMaxPublishedPorts) return bad("publish is not a list of ports");
    for (const json& e : *it) {
      if (!e.is_string()) return bad("publish is not a list of ports");
      auto s = ParsePortSpec(e.get<std::string>());
      if (!s.ok()) return bad(s.error().message());
      p.publish.push_back(*s);
    }
  }
  if (Status st = ValidatePorts(p); !st.ok()) return bad(st.error().message());
  return p;
}

}  // namespace

const ConfigSection<PortsConfig>& PortsSection() {
  static const ConfigSection<PortsConfig> section{kPortsConfigKey, PortsFromJson, PortsToJson,
                                                  ValidatePorts};
  return section;
}

Result<PortsConfig> PortsConfigFromConfig(const WorkspaceConfig& config) {
  return LoadConfigSection(PortsSection(), config);
}

Status PutPortsConfig(WorkspaceConfig& config, const PortsConfig& ports) {
  return PutConfigSection(PortsSection(), config, ports);
}

// ---- The guest's report ----

Result<std::vector<uint16_t>> ParsePortsReport(std::string_view line) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kCorrupt, "ports report from the guest: " + why);
  };
  // SECURITY: guest bytes; bounded before anything else is looked at.
  if (line.size() > kMaxReportLine) return bad("line too long");
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  constexpr std::string_view kTag = "ports";
  if (line.substr(0, kTag.size()) != kTag) return bad("not a report");
  line.remove_prefix(kTag.size());
  std::vector<uint16_t> ports;
  std::set<uint16_t> seen;
  while (!line.empty()) {
    if (line[0] != ' ') return bad("ports are separated by one space");
    line.remove_prefix(1);
    size_t end = line.find(' ');
    std::string_view num = line.substr(0, end);
    uint16_t port = 0;
    if (!ParsePortNumber(num, &port) || port == 0) return bad("not a port number");
    if (!seen.insert(port).second) return bad("port " + std::to_string(port) + " twice");
    if (ports.size() >= kMaxReportPorts) return bad("too many ports");
    ports.push_back(port);
    line.remove_prefix(num.size());
  }
  return ports;
}

// ---- PortForwarder ----

const char* ForwardOriginName(ForwardOrigin origin) {
  switch (origin) {
    case ForwardOrigin::kConfig: return "config";
    case ForwardOrigin::kAdded: return "added";
    case ForwardOrigin::kAuto: return "auto";
  }
  return "?";
}

json ForwardInfoJson(const ForwardInfo& info) {
  return {{"spec", info.spec.ToString()},
          {"host_ip", info.spec.host_ip},
          {"host_port", info.spec.host_port},
          {"guest_port", info.spec.guest_port},
          {"origin", ForwardOriginName(info.origin)},
          {"connections", info.connections}};
}

PortForwarder::PortForwarder(Options options) : opts_(std::move(options)) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

PortForwarder::~PortForwarder() {
  StopAll();
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  Wake();
  if (accept_thread_.joinable()) accept_thread_.join();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void PortForwarder::Log(const std::string& line) const {
  if (opts_.log) opts_.log(line);
}

void PortForwarder::Wake() {
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
}

Result<PortSpec> PortForwarder::AddForward(const PortSpec& spec, ForwardOrigin origin) {
  std::lock_guard<std::mutex> l(mu_);
  ASSIGN_OR_RETURN(PortSpec bound, AddLocked(spec, origin));
  Wake();
  return bound;
}

Result<PortSpec> PortForwarder::AddLocked(const PortSpec& spec, ForwardOrigin origin) {
  if (stopping_) return Error(ErrorCode::kUnavailable, "the port forwarder is stopping");
  if (listeners_.size() >= kMaxForwards) {
    return Error(ErrorCode::kNoSpace, "too many forwarded ports (at most " +
                                          std::to_string(kMaxForwards) + ")",
                 "remove one with `cloister port NAME rm HOST_PORT`");
  }
  if (spec.guest_port == 0) return Error(ErrorCode::kInvalidArgument, "guest port 0");
  int family = 0;
  std::string ip = CanonicalIp(spec.host_ip, &family);
  if (ip.empty()) return Error(ErrorCode::kInvalidArgument, "'" + spec.host_ip + "' is not an IP address");
  std::string where = (family == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(spec.host_port);
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(spec.host_port);
    inet_pton(AF_INET, ip.c_str(), &a->sin_addr);
    len = sizeof *a;
  } else {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(spec.host_port);
    inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr);
    len = sizeof *a;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 128) != 0) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE) {
      return Error(ErrorCode::kAlreadyExists, "host port " + where + " is already in use",
                   "pick another host port (e.g. " + std::to_string(spec.host_port + 1) + ":" +
                       std::to_string(spec.guest_port) + ", or 0 for any free one); `ss -ltnp "
                       "'sport = :" + std::to_string(spec.host_port) + "'` shows who has it");
    }
    if (e == EACCES) {
      return Error(ErrorCode::kPermissionDenied, "listening on " + where + " needs privileges",
                   "use a host port of 1024 or more (e.g. 8080:" +
                       std::to_string(spec.guest_port) + ")");
    }
    if (e == EADDRNOTAVAIL) {
      return Error(ErrorCode::kInvalidArgument, ip + " is not an address of this host",
                   "leave HOST_IP out for 127.0.0.1, or name one of `ip -brief addr`");
    }
    return ErrnoError("listen on " + where, e);
  }
  socklen_t got = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &got);
  Listener li;
  li.fd = fd;
  li.info.spec = spec;
  li.info.spec.host_ip = ip;
  li.info.spec.host_port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                   : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  li.info.origin = origin;
  PortSpec bound = li.info.spec;
  listeners_[fd] = li;
  return bound;
}

void PortForwarder::CloseLocked(std::map<int, Listener>::iterator it) {
  // shutdown stops the listening at once (connects are refused from here on) and wakes the accept
  // thread's poll; the close happens here too: the accept thread re-reads the set after every
  // wake and never accepts on an fd that left the map.
  shutdown(it->first, SHUT_RDWR);
  close(it->first);
  listeners_.erase(it);
}

Status PortForwarder::RemoveForward(uint16_t host_port, const std::string& host_ip) {
  std::string ip = host_ip.empty() ? "" : CanonicalIp(host_ip);
  if (!host_ip.empty() && ip.empty()) {
    return Error(ErrorCode::kInvalidArgument, "'" + host_ip + "' is not an IP address");
  }
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = listeners_.begin(); it != listeners_.end(); ++it) {
    if (it->second.info.spec.host_port == host_port && (ip.empty() || it->second.info.spec.host_ip == ip)) {
      Log("ports: closed " + it->second.info.spec.ToString() + " (" +
          ForwardOriginName(it->second.info.origin) + ")");
      CloseLocked(it);
      Wake();
      return OkStatus();
    }
  }
  return Error(ErrorCode::kNotFound, "no forwarded host port " + std::to_string(host_port),
               "see `cloister port NAME ls`");
}

std::vector<ForwardInfo> PortForwarder::List() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<ForwardInfo> out;
  for (const auto& [fd, li] : listeners_) out.push_back(li.info);
  std::sort(out.begin(), out.end(), [](const ForwardInfo& a, const ForwardInfo& b) {
    return std::tie(a.spec.host_port, a.spec.host_ip) < std::tie(b.spec.host_port, b.spec.host_ip);
  });
  return out;
}

void PortForwarder::ApplyGuestReport(const std::vector<uint16_t>& guest_ports) {
  std::lock_guard<std::mutex> l(mu_);
  std::set<uint16_t> want(guest_ports.begin(), guest_ports.end());
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    auto next = std::next(it);
    if (it->second.info.origin == ForwardOrigin::kAuto && !want.count(it->second.info.spec.guest_port)) {
      Log("ports: guest port " + std::to_string(it->second.info.spec.guest_port) +
          " closed: auto forward " + it->second.info.spec.ToString() + " removed");
      CloseLocked(it);
    }
    it = next;
  }
  std::set<uint16_t> covered, used_host;
  size_t autos = 0;
  for (const auto& [fd, li] : listeners_) {
    covered.insert(li.info.spec.guest_port);
    used_host.insert(li.info.spec.host_port);
    if (li.info.origin == ForwardOrigin::kAuto) ++autos;
  }
  for (auto it = skipped_logged_.begin(); it != skipped_logged_.end();) {
    it = want.count(*it) ? std::next(it) : skipped_logged_.erase(it);
  }
  for (uint16_t p : want) {
    if (covered.count(p)) continue;
    auto skip = [&](const std::string& why) {
      if (skipped_logged_.insert(p).second) Log("ports: guest port " + std::to_string(p) + " not forwarded: " + why);
    };
    if (autos >= kMaxAutoPorts) {
      skip("at most " + std::to_string(kMaxAutoPorts) + " automatic forwards");
      continue;
    }
    // SECURITY: the guest picks the guest port only. The host port is the host's pick: the one
    // this guest port had before (itself the kernel's pick) when it is free, else port 0; never
    // the guest's number. Always loopback.
    PortSpec spec;
    spec.host_ip = kDefaultHostIp;
    spec.guest_port = p;
    Result<PortSpec> added = Error(ErrorCode::kAlreadyExists, "not tried");
    if (auto it = remembered_.find(p); it != remembered_.end() && !used_host.count(it->second)) {
      spec.host_port = it->second;
      added = AddLocked(spec, ForwardOrigin::kAuto);
    }
    if (!added.ok() && added.error().code() == ErrorCode::kAlreadyExists) {
      spec.host_port = 0;
      added = AddLocked(spec, ForwardOrigin::kAuto);
    }
    if (added.ok() && added->host_port < kFirstUnprivilegedPort) {
      // Only an odd ip_local_port_range gives this: never a privileged port on the guest's say.
      (void)RemoveLockedByPort(added->host_port);
      added = Error(ErrorCode::kUnavailable, "the kernel picked a privileged host port");
    }
    if (!added.ok()) {
      skip(added.error().message());
      continue;
    }
    Log("ports: guest port " + std::to_string(p) + " forwarded automatically from " +
        added->ToString());
    if (remembered_.size() >= kMaxRememberedAutoPorts && !remembered_.count(p)) {
      remembered_.erase(remembered_.begin());
    }
    remembered_[p] = added->host_port;
    used_host.insert(added->host_port);
    ++autos;
  }
  Wake();
}

void PortForwarder::ClearAuto() { ApplyGuestReport({}); }

size_t PortForwarder::ServeReports(int fd, std::chrono::milliseconds min_interval) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (report_fd_ >= 0 || stopping_) {
      Log("ports: a second report stream from the guest refused");
      close(fd);
      return 0;
    }
    report_fd_ = fd;
  }
  size_t applied = 0;
  std::string buf;
  std::optional<std::vector<uint16_t>> pending;
  std::optional<Clock::time_point> last_apply;
  while (true) {
    int timeout = -1;
    if (pending && last_apply) {
      auto due = *last_apply + min_interval;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count();
      timeout = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 60000)));
    } else if (pending) {
      timeout = 0;
    }
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, timeout);
    if (r < 0 && errno != EINTR) break;
    if (r > 0) {
      char chunk[4096];
      ssize_t n = read(fd, chunk, sizeof chunk);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      bool bad = false;
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        auto parsed = ParsePortsReport(std::string_view(buf).substr(0, nl + 1));
        if (!parsed.ok()) {
          Log("ports: " + parsed.error().message() + ": report stream closed");
          bad = true;
          break;
        }
        pending = std::move(*parsed);  // a flood coalesces: only the latest counts
        buf.erase(0, nl + 1);
      }
      // SECURITY: a line without its newline is bounded too.
      if (!bad && buf.size() >= kMaxReportLine) {
        Log("ports: report line from the guest too long: report stream closed");
        bad = true;
      }
      if (bad) break;
    }
    if (pending && (!last_apply || Clock::now() >= *last_apply + min_interval)) {
      ApplyGuestReport(*pending);
      ++applied;
      pending.reset();
      last_apply = Clock::now();
    }
  }
  ClearAuto();
  std::lock_guard<std::mutex> l(mu_);
  report_fd_ = -1;
  close(fd);
  return applied;
}

bool PortForwarder::RemoveLockedByPort(uint16_t host_port) {
  for (auto it = listeners_.begin(); it != listeners_.end(); ++it) {
    if (it->second.info.spec.host_port == host_port) {
      CloseLocked(it);
      return true;
    }
  }
  return false;
}

void PortForwarder::StopAll() {
  std::lock_guard<std::mutex> l(mu_);
  while (!listeners_.empty()) CloseLocked(listeners_.begin());
  skipped_logged_.clear();
  remembered_.clear();
  if (report_fd_ >= 0) shutdown(report_fd_, SHUT_RDWR);  // ServeReports ends and closes it
  Wake();
}

void PortForwarder::AcceptLoop() {
  while (true) {
    std::vector<pollfd> fds;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      fds.push_back({wake_[0], POLLIN, 0});
      for (const auto& [fd, li] : listeners_) fds.push_back({fd, POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) {
      char drain[64];
      while (read(wake_[0], drain, sizeof drain) > 0) {
      }
      continue;  // the set changed: poll the new one
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      int conn = -1;
      uint16_t guest_port = 0;
      {
        std::lock_guard<std::mutex> l(mu_);
        auto it = listeners_.find(fds[i].fd);
        // Removed (and maybe its number reused) since the poll: not ours to accept on.
        if (it == listeners_.end()) continue;
        conn = accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        ++it->second.info.connections;
        guest_port = it->second.info.spec.guest_port;
      }
      // Accepted sockets must not inherit the listener's O_NONBLOCK expectations: the Mux sets
      // what it needs on the fds it owns.
      if (opts_.open) {
        opts_.open(guest_port, conn);
      } else {
        close(conn);
      }
    }
  }
}

}  // namespace cloister::vm

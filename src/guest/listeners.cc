#include "guest/listeners.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "protocol/contract.h"

namespace cloister::guest {

namespace {

constexpr std::string_view kListenState = "0A";  // TCP_LISTEN

Error Bad(bool ipv6, const std::string& why) {
  return Error(ErrorCode::kCorrupt, std::string(ipv6 ? "/proc/net/tcp6" : "/proc/net/tcp") + ": " + why);
}

bool HexValue(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  *out = v;
  return true;
}

// The kernel prints each 32-bit word of the address as %08X of its value in host order: the
// memory bytes of that value are the address bytes.
bool AddressBytes(std::string_view hex, bool ipv6, uint8_t* bytes) {
  size_t words = ipv6 ? 4 : 1;
  if (hex.size() != words * 8) return false;
  for (size_t w = 0; w < words; ++w) {
    uint32_t v;
    if (!HexValue(hex.substr(w * 8, 8), &v)) return false;
    std::memcpy(bytes + w * 4, &v, 4);
  }
  return true;
}

bool Reachable(const uint8_t* b, bool ipv6) {
  if (!ipv6) return b[0] == 127 || (b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 0);
  bool zero10 = true;
  for (int i = 0; i < 10; ++i) zero10 &= b[i] == 0;
  if (!zero10) return false;
  if (b[10] == 0 && b[11] == 0) {
    bool zero_rest = b[12] == 0 && b[13] == 0 && b[14] == 0;
    return zero_rest && (b[15] == 0 || b[15] == 1);  // :: or ::1
  }
  return b[10] == 0xff && b[11] == 0xff && b[12] == 127;  // ::ffff:127.x.y.z
}

}  // namespace

Result<std::set<uint16_t>> ParseProcNetTcp(std::string_view text, bool ipv6) {
  // SECURITY: bounded before it is looked at; every field is checked before use. Only lines
  // ending in '\n' count (the kernel ends every line; a cut one is the size bound's).
  if (text.size() > kMaxProcNetBytes) text = text.substr(0, kMaxProcNetBytes);
  std::set<uint16_t> ports;
  bool header = true;
  size_t nl;
  while ((nl = text.find('\n')) != std::string_view::npos) {
    std::string_view line = text.substr(0, nl);
    text = text.substr(nl + 1);
    if (header) {
      header = false;
      continue;
    }
    // Fields: "sl: local rem st ..." separated by spaces.
    std::string_view fields[4];
    size_t n = 0;
    size_t i = 0;
    while (n < 4 && i < line.size()) {
      while (i < line.size() && line[i] == ' ') ++i;
      size_t start = i;
      while (i < line.size() && line[i] != ' ') ++i;
      if (i > start) fields[n++] = line.substr(start, i - start);
    }
    if (n == 0) continue;  // a blank line
    if (n < 4) return Bad(ipv6, "short line");
    if (fields[0].empty() || fields[0].back() != ':') return Bad(ipv6, "bad slot field");
    if (fields[3] != kListenState) continue;
    size_t colon = fields[1].find(':');
    if (colon == std::string_view::npos) return Bad(ipv6, "bad local address");
    uint8_t bytes[16];
    if (!AddressBytes(fields[1].substr(0, colon), ipv6, bytes)) return Bad(ipv6, "bad local address");
    std::string_view port_hex = fields[1].substr(colon + 1);
    uint32_t port;
    if (port_hex.size() != 4 || !HexValue(port_hex, &port)) return Bad(ipv6, "bad local port");
    if (port == 0) continue;
    if (Reachable(bytes, ipv6)) ports.insert(static_cast<uint16_t>(port));
  }
  return ports;
}

namespace {

// Reads at most kMaxProcNetBytes of a /proc file (its size reads as 0, so read to EOF).
Result<std::string> ReadProc(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  std::string out;
  char buf[16384];
  while (out.size() < kMaxProcNetBytes) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace

Result<std::set<uint16_t>> ReadListeningPorts(const std::string& proc_net,
                                              const std::set<uint16_t>& exclude) {
  std::set<uint16_t> all;
  for (bool ipv6 : {false, true}) {
    auto text = ReadProc(proc_net + (ipv6 ? "/tcp6" : "/tcp"));
    if (!text.ok()) {
      if (ipv6 && text.error().code() == ErrorCode::kNotFound) continue;  // no IPv6 in this kernel
      return text.error();
    }
    ASSIGN_OR_RETURN(std::set<uint16_t> ports, ParseProcNetTcp(*text, ipv6));
    all.insert(ports.begin(), ports.end());
  }
  for (uint16_t p : exclude) all.erase(p);
  return all;
}

std::string FormatPortsReport(const std::set<uint16_t>& ports) {
  std::string line = "ports";
  size_t n = 0;
  for (uint16_t p : ports) {
    if (n++ >= protocol::kMaxReportedPorts) break;
    line += " " + std::to_string(p);
  }
  return line + "\n";
}

ListenerWatcher::ListenerWatcher(ListenerWatcherOptions options) : opts_(std::move(options)) {}

ListenerWatcher::~ListenerWatcher() { Stop(); }

void ListenerWatcher::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void ListenerWatcher::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ListenerWatcher::Loop() {
  auto log = [this](const std::string& line) {
    if (opts_.log) opts_.log(line);
  };
  int fd = -1;
  std::optional<std::set<uint16_t>> sent;  // what the current stream was last told
  std::optional<std::chrono::steady_clock::time_point> next_open;
  std::string last_error;
  while (true) {
    auto ports = ReadListeningPorts(opts_.proc_net, opts_.exclude);
    if (!ports.ok()) {
      if (ports.error().message() != last_error) log("auto-ports: " + ports.error().message());
      last_error = ports.error().message();
    } else {
      last_error.clear();
    }
    if (fd >= 0) {
      // The host never writes on this stream: readable means it ended.
      pollfd p{fd, POLLIN | POLLRDHUP, 0};
      if (poll(&p, 1, 0) > 0) {
        close(fd);
        fd = -1;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (fd < 0 && opts_.open_stream && (!next_open || now >= *next_open)) {
      fd = opts_.open_stream();
      sent.reset();
      next_open = now + opts_.retry;
    }
    if (fd >= 0 && ports.ok() && (!sent || *sent != *ports)) {
      std::string line = FormatPortsReport(*ports);
      size_t off = 0;
      while (off < line.size()) {
        ssize_t n = send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      if (off == line.size()) {
        sent = *ports;
        ++sent_;
      } else {
        close(fd);
        fd = -1;
      }
    }
    std::unique_lock<std::mutex> l(mu_);
    if (cv_.wait_for(l, opts_.interval, [this] { return stop_; })) break;
  }
  if (fd >= 0) close(fd);
}

}  // namespace cloister::guest

// Published ports (issue 17, "Ports"): host TCP listeners whose connections become channel
// streams into the guest (`mux->OpenAsync(kTcpService, {GUEST_PORT}, fd)`: the guest agent
// connects to its own 127.0.0.1:GUEST_PORT, else [::1]:GUEST_PORT).
//
// Three origins, one table (PortForwarder):
//   - config: `-p [HOST_IP:]HOST_PORT:GUEST_PORT` on create/run, kept in config.json "ports"
//     (PortsSection), bound by the supervisor at every start (a taken host port fails the start);
//   - added:  `cloister port NAME add SPEC` on a running workspace (control op "ports"), for this
//     run only; also what the OAuth login calls for its loopback callback (AddForward/Remove);
//   - auto:   `--auto-ports`: the guest agent reports its listening TCP ports on the guest-opened
//     channel service kPortsReportService (guest/listeners.h); the host forwards each on
//     127.0.0.1 from a port the host picks (port 0: the kernel's ephemeral range; the one it had
//     before for that guest port this run when it is still free), shown by `cloister port NAME
//     ls`, the dashboard and a line on the attach terminal; gone when the guest's socket closes or
//     the report stream ends.
// Everything goes at stop (StopAll).
//
// SECURITY: what a published port exposes is the guest's service to whoever can connect to the
// host address: 127.0.0.1 (the default) is every local user of the host; a non-loopback address
// only when the user spells it out in SPEC. The guest chooses nothing but guest port numbers: an
// auto forward is always 127.0.0.1 on a host port the host picked (never the guest's number, so a
// guest that reports 5432 or 6379 never receives what host clients send to the host's own 5432 or
// 6379, and cannot race a restarting host service for its port), never below 1024, at most
// kMaxAutoPorts, applied at most once per report interval; the host never connects anywhere on the
// guest's say (a forward only ever opens a stream into the guest).
//
// Threading: PortForwarder's methods are thread-safe. One thread (owned) accepts on every listener;
// the StreamOpener runs on it and must not block (hand the fd to Mux::OpenAsync).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "protocol/contract.h"
#include "store/config.h"
#include "store/config_section.h"

namespace cloister::vm {

inline constexpr char kPortsConfigKey[] = "ports";   // config.json top-level key
inline constexpr char kPortsControlOp[] = "ports";   // control op: {"op":"ports","action":...}
inline constexpr char kDefaultHostIp[] = "127.0.0.1";
inline constexpr size_t kMaxPublishedPorts = 64;     // -p entries in the config
inline constexpr size_t kMaxForwards = 128;          // every forward at once (config+added+auto)
inline constexpr size_t kMaxAutoPorts = 32;          // auto forwards at once
inline constexpr size_t kMaxReportPorts = protocol::kMaxReportedPorts;  // ports in one report line
inline constexpr size_t kMaxReportLine = 2048;       // bytes of one report line, newline included
inline constexpr uint16_t kFirstUnprivilegedPort = 1024;
inline constexpr size_t kMaxRememberedAutoPorts = 256;  // guest port -> the host port it last had

// One published port. host_ip is a numeric IPv4 or IPv6 address in canonical text form.
struct PortSpec {
  std::string host_ip = kDefaultHostIp;
  uint16_t host_port = 0;  // 0: any free port (the bound one is reported)
  uint16_t guest_port = 0;
  // "127.0.0.1:8080:80", "[::1]:8080:80" (parses back to the same spec).
  std::string ToString() const;
  bool operator==(const PortSpec& o) const {
    return host_ip == o.host_ip && host_port == o.host_port && guest_port == o.guest_port;
  }
};

// `[HOST_IP:]HOST_PORT:GUEST_PORT` (docker's -p; "[::1]:8080:80" for IPv6; HOST_PORT 0 or empty
// picks a free port, `127.0.0.1::80`). Without HOST_IP: 127.0.0.1, never a wildcard. GUEST_PORT
// 1..65535. A host name is refused (numeric addresses only).
Result<PortSpec> ParsePortSpec(std::string_view text);

// True for 127.0.0.0/8 and ::1.
bool IsLoopbackAddress(const std::string& ip);

// config.json "ports": {"publish":["127.0.0.1:8080:80",...],"auto":false}.
struct PortsConfig {
  std::vector<PortSpec> publish;
  bool auto_ports = false;
};
const ConfigSection<PortsConfig>& PortsSection();
Result<PortsConfig> PortsConfigFromConfig(const WorkspaceConfig& config);
Status PutPortsConfig(WorkspaceConfig& config, const PortsConfig& ports);

// One guest report line (kPortsReportService, protocol/contract.h): "ports" then the guest's
// listening TCP ports as decimal numbers, space separated, then '\n' (the newline is optional
// here). Example: "ports 5173 8080\n"; "ports\n" is the empty set.
// SECURITY: guest bytes. Bounded (kMaxReportLine, kMaxReportPorts); anything else (an address, a
// sign, a leading zero, port 0, a duplicate) is kCorrupt. Fuzzed (fuzz/ports_report_fuzz.cc).
Result<std::vector<uint16_t>> ParsePortsReport(std::string_view line);

enum class ForwardOrigin { kConfig, kAdded, kAuto };
const char* ForwardOriginName(ForwardOrigin origin);  // "config", "added", "auto"

struct ForwardInfo {
  PortSpec spec;  // the bound host port (never 0)
  ForwardOrigin origin = ForwardOrigin::kAdded;
  uint64_t connections = 0;  // accepted so far
};
nlohmann::json ForwardInfoJson(const ForwardInfo& info);

class PortForwarder {
 public:
  // Hands one accepted connection for `guest_port` to the guest. Owns `fd` (must close it on
  // failure). Runs on the accept thread: must not block.
  using StreamOpener = std::function<void(uint16_t guest_port, int fd)>;
  struct Options {
    StreamOpener open;
    std::function<void(const std::string&)> log;  // one line per change; may be empty
  };

  explicit PortForwarder(Options options);
  ~PortForwarder();  // StopAll
  PortForwarder(const PortForwarder&) = delete;
  PortForwarder& operator=(const PortForwarder&) = delete;

  // Listens on spec.host_ip:spec.host_port and returns the spec with the bound port. A taken
  // host port is kAlreadyExists with a hint; a host port another forward has is kAlreadyExists.
  Result<PortSpec> AddForward(const PortSpec& spec, ForwardOrigin origin = ForwardOrigin::kAdded);
  // Closes the forward on host_port (and host_ip, unless empty). Open connections carry on.
  Status RemoveForward(uint16_t host_port, const std::string& host_ip = "");
  std::vector<ForwardInfo> List() const;

  // The guest's current set of listening ports (auto-ports): forwards the new ones (loopback, a
  // host port the host picks: the one this guest port had before in this forwarder when it is
  // free, else port 0, the kernel's choice), closes those whose guest port is gone. Ports that a
  // config/added forward already reaches are skipped; past kMaxAutoPorts the rest are skipped
  // (logged).
  void ApplyGuestReport(const std::vector<uint16_t>& guest_ports);
  void ClearAuto();

  // Serves one report stream from the guest (blocking; owns `fd`): reads bounded lines, applies
  // the latest complete one at most once per `min_interval` (a flood coalesces: the lines that
  // arrived meanwhile are parsed, only the last is applied), and ends on EOF, on a malformed line
  // (logged) or on Stop. Clears the auto forwards when it ends. One stream at a time: a second
  // one is closed at once. Returns how many reports it applied.
  size_t ServeReports(int fd, std::chrono::milliseconds min_interval);

  void StopAll();  // every listener closed, report streams ended; the forwarder stays usable

 private:
  struct Listener {
    int fd = -1;
    ForwardInfo info;
  };
  void AcceptLoop();
  void Wake();
  Result<PortSpec> AddLocked(const PortSpec& spec, ForwardOrigin origin);
  void CloseLocked(std::map<int, Listener>::iterator it);
  bool RemoveLockedByPort(uint16_t host_port);
  void Log(const std::string& line) const;

  Options opts_;
  mutable std::mutex mu_;
  std::map<int, Listener> listeners_;  // by listening fd
  int wake_[2] = {-1, -1};
  bool stopping_ = false;
  std::thread accept_thread_;
  int report_fd_ = -1;     // the report stream being served (one at a time)
  std::atomic<uint64_t> report_generation_{0};
  std::set<uint16_t> skipped_logged_;  // auto ports already logged as skipped
  // The host port each guest port last had (host-picked, never the guest's number): a dev server
  // that restarts finds its forward where it was. Bounded (kMaxRememberedAutoPorts).
  std::map<uint16_t, uint16_t> remembered_;
};

}  // namespace cloister::vm

// The guest's listening TCP ports, for automatic port forwarding (`--auto-ports`, issue 17; the
// host side is supervisor/ports.h). The agent reads /proc/net/tcp and /proc/net/tcp6 once per
// interval, keeps LISTEN sockets bound to a loopback or wildcard address (what the host's `tcp`
// streams can reach: the agent connects to 127.0.0.1 or ::1), leaves out its own listeners, and
// reports each change on a stream of the host's protocol::kPortsReportService.
//
// Owned by the guest agent; one ListenerWatcher per boot, with its own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "base/result.h"

namespace cloister::guest {

// Most bytes of one /proc/net/tcp{,6} file read; a guest with more sockets than that reports
// what fits (the first listeners are listed first by the kernel's hash order, not by port).
inline constexpr size_t kMaxProcNetBytes = 4u << 20;

// The ports of LISTEN sockets (state 0A) on 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, 0.0.0.0 or ::
// in the text of /proc/net/tcp (`ipv6` false) or /proc/net/tcp6 (`ipv6` true). The header line is
// skipped; a malformed line is kCorrupt.
// SECURITY: parsed with bounds (any process in the guest shapes what the file lists); fuzzed
// (fuzz/proc_net_tcp_fuzz.cc).
Result<std::set<uint16_t>> ParseProcNetTcp(std::string_view text, bool ipv6);

// Both files under `proc_net` (a missing tcp6 is an empty set: no IPv6), minus `exclude`.
Result<std::set<uint16_t>> ReadListeningPorts(const std::string& proc_net,
                                              const std::set<uint16_t>& exclude);

// The report line: "ports P1 P2 ...\n", sorted, at most protocol::kMaxReportedPorts (the lowest).
std::string FormatPortsReport(const std::set<uint16_t>& ports);

struct ListenerWatcherOptions {
  std::string proc_net = "/proc/net";
  std::set<uint16_t> exclude;  // the agent's own listeners (proxy, transparent, DNS)
  std::chrono::milliseconds interval{1000};
  // Opens a report stream to the host (our end, or -1 while no host is connected). Called again
  // once the stream ends (the host went away or refused it), at most once per `retry`.
  std::function<int()> open_stream;
  std::chrono::milliseconds retry{5000};
  std::function<void(const std::string&)> log;
};

class ListenerWatcher {
 public:
  explicit ListenerWatcher(ListenerWatcherOptions options);
  ~ListenerWatcher();  // Stop
  ListenerWatcher(const ListenerWatcher&) = delete;
  ListenerWatcher& operator=(const ListenerWatcher&) = delete;

  void Start();
  void Stop();
  // Reports written so far (each a change, or the full set on a new stream).
  uint64_t reports_sent() const { return sent_; }

 private:
  void Loop();
  ListenerWatcherOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  std::atomic<uint64_t> sent_{0};
};

}  // namespace cloister::guest

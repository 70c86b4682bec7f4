// Boot phases with millisecond timings (issue 20): what `cloister start --timings` prints.
//
// The supervisor measures the host's phases on its own steady clock (disks, proxy, metadata
// disk, QEMU's spawn and start, the proven-boot checkpoint). The guest agent reports its phases in
// its READY frame's text, as marks on the guest's CLOCK_BOOTTIME (ms since its kernel started):
//   "cloister-agent 1 boot ID timings init=N agent=N setup=N probe=N ready=N"
// init: PID 1 started (the kernel's part ends); agent: the boot hook exec'd the agent; setup: its
// setup done (mounts, files, forwards, transparent egress); probe: the terminal check passed;
// ready: READY is sent (the tool's installer started; the tmux session starts beside the probe
// and is not waited for: exec and ssh streams wait for it in the guest). The supervisor turns
// host and guest marks into one list of phases (BootPhases), sends it to `start` on its progress
// pipe as one "timings" line, and `start --timings` prints the table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace cloister::vm {

// The guest agent's marks (ms since the guest kernel started), all present and in order.
struct GuestMarks {
  int64_t init = 0, agent = 0, setup = 0, probe = 0, ready = 0;
};

// The " timings ..." suffix the agent appends to its READY text.
std::string FormatGuestMarks(const GuestMarks& marks);

// SECURITY: `ready_info` is the guest's READY text (hostile): the marks are parsed with bounds
// (each key once, in order, at most 10 digits, non-decreasing, nothing after them); anything else
// is an error and `start --timings` then shows the host's phases only.
Result<GuestMarks> ParseGuestMarks(std::string_view ready_info);

// One phase: its name ([a-z-], at most 24 characters) and its length in ms.
using BootPhase = std::pair<std::string, int64_t>;

// The phase list as the progress pipe carries it: "timings NAME=MS NAME=MS ...".
std::string FormatTimingsLine(const std::vector<BootPhase>& phases);
// Parses what FormatTimingsLine wrote (the supervisor's own line; still bounded).
Result<std::vector<BootPhase>> ParseTimingsLine(std::string_view line);

// The guest's phases between QEMU answering QMP and READY, both seen on the host
// (`host_span_ms`): what the guest's clock does not cover is the firmware and the kernel's load
// ("firmware", clamped at 0). Order: firmware, kernel, init-to-hook, agent-setup,
// terminal-probe, to-ready.
std::vector<BootPhase> GuestPhases(const GuestMarks& marks, int64_t host_span_ms);

// The table `start --timings` prints: a header, one "NAME MS" row per phase, then "total MS".
std::string FormatTimingsTable(const std::vector<BootPhase>& phases, int64_t total_ms);

}  // namespace cloister::vm

#include "supervisor/boot_timings.h"

#include <cstdio>

namespace cloister::vm {

namespace {

constexpr std::string_view kTimingsWord = " timings ";
constexpr const char* kGuestKeys[] = {"init", "agent", "setup", "probe", "ready"};

// A decimal of 1..10 digits at the front of `s` (consumed), or -1.
int64_t TakeNumber(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && n < 11 && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || n > 10) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = v * 10 + (s[i] - '0');
  s.remove_prefix(n);
  return v;
}

bool ValidPhaseName(std::string_view name) {
  if (name.empty() || name.size() > 24) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || c == '-')) return false;
  }
  return true;
}

}  // namespace

std::string FormatGuestMarks(const GuestMarks& m) {
  const int64_t v[] = {m.init, m.agent, m.setup, m.probe, m.ready};
  std::string out(kTimingsWord);
  for (size_t i = 0; i < 5; ++i) {
    if (i) out += ' ';
    out += std::string(kGuestKeys[i]) + "=" + std::to_string(v[i] < 0 ? 0 : v[i]);
  }
  return out;
}

Result<GuestMarks> ParseGuestMarks(std::string_view info) {
  // SECURITY: guest bytes; bounded scan, no allocation proportional to the input.
  if (info.size() > 4096) return Error(ErrorCode::kInvalidArgument, "READY text too long");
  size_t at = info.find(kTimingsWord);
  if (at == std::string_view::npos) {
    return Error(ErrorCode::kNotFound, "the guest agent reported no timings");
  }
  std::string_view s = info.substr(at + kTimingsWord.size());
  int64_t v[5];
  for (size_t i = 0; i < 5; ++i) {
    std::string_view key = kGuestKeys[i];
    if (i && (s.empty() || s.front() != ' ')) {
      return Error(ErrorCode::kInvalidArgument, "guest timings: a space expected before " +
                                                    std::string(key));
    }
    if (i) s.remove_prefix(1);
    if (s.substr(0, key.size()) != key || s.size() <= key.size() || s[key.size()] != '=') {
      return Error(ErrorCode::kInvalidArgument, "guest timings: " + std::string(key) +
                                                    "= expected");
    }
    s.remove_prefix(key.size() + 1);
    v[i] = TakeNumber(s);
    if (v[i] < 0) {
      return Error(ErrorCode::kInvalidArgument, "guest timings: a number of at most 10 digits "
                                                "expected after " + std::string(key) + "=");
    }
    if (i && v[i] < v[i - 1]) {
      return Error(ErrorCode::kInvalidArgument, "guest timings: " + std::string(key) +
                                                    " is before " + kGuestKeys[i - 1]);
    }
  }
  if (!s.empty()) return Error(ErrorCode::kInvalidArgument, "guest timings: trailing bytes");
  return GuestMarks{v[0], v[1], v[2], v[3], v[4]};
}

std::string FormatTimingsLine(const std::vector<BootPhase>& phases) {
  std::string out = "timings";
  for (const auto& [name, ms] : phases) out += " " + name + "=" + std::to_string(ms < 0 ? 0 : ms);
  return out;
}

Result<std::vector<BootPhase>> ParseTimingsLine(std::string_view line) {
  if (line.size() > 4096 || line.substr(0, 7) != "timings") {
    return Error(ErrorCode::kInvalidArgument, "not a timings line");
  }
  std::string_view s = line.substr(7);
  std::vector<BootPhase> out;
  while (!s.empty()) {
    if (s.front() != ' ' || out.size() >= 32) {
      return Error(ErrorCode::kInvalidArgument, "timings line: malformed");
    }
    s.remove_prefix(1);
    size_t eq = s.find('=');
    if (eq == std::string_view::npos || !ValidPhaseName(s.substr(0, eq))) {
      return Error(ErrorCode::kInvalidArgument, "timings line: bad phase name");
    }
    std::string name(s.substr(0, eq));
    s.remove_prefix(eq + 1);
    int64_t ms = TakeNumber(s);
    if (ms < 0) return Error(ErrorCode::kInvalidArgument, "timings line: bad number for " + name);
    out.emplace_back(std::move(name), ms);
  }
  return out;
}

std::vector<BootPhase> GuestPhases(const GuestMarks& m, int64_t host_span_ms) {
  int64_t firmware = host_span_ms - m.ready;
  return {{"firmware", firmware < 0 ? 0 : firmware},
          {"kernel", m.init},
          {"init-to-hook", m.agent - m.init},
          {"agent-setup", m.setup - m.agent},
          {"terminal-probe", m.probe - m.setup},
          {"to-ready", m.ready - m.probe}};
}

std::string FormatTimingsTable(const std::vector<BootPhase>& phases, int64_t total_ms) {
  std::string out;
  char line[96];
  std::snprintf(line, sizeof line, "%-16s %9s\n", "PHASE", "MS");
  out += line;
  for (const auto& [name, ms] : phases) {
    std::snprintf(line, sizeof line, "%-16s %9lld\n", name.c_str(), static_cast<long long>(ms));
    out += line;
  }
  std::snprintf(line, sizeof line, "%-16s %9lld\n", "total", static_cast<long long>(total_ms));
  out += line;
  return out;
}

}  // namespace cloister::vm

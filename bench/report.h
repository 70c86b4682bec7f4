// A bench's figures as its section of docs/benchmarks.md, printed by the bench itself, so the page
// cannot drift from what the bench prints.
//
// The convention (every bench follows it; scripts/bench-smoke.sh and docs_test check it):
//   - every bench accepts `--markdown` beside its other flags (with `--smoke` too); after its usual
//     output it prints its section between the lines
//         <!-- bench:NAME begin -->
//         <!-- bench:NAME end -->
//     (what it measures, the table of figures, the command line, the machine, its load, the date);
//   - docs/benchmarks.md holds one such section per bench, and scripts/bench-markdown.sh runs the
//     benches and replaces each section with what its bench printed.
// A new bench: a `Report` with its name, what it measures and its columns, one `Row` per measured
// path (`Num` formats a figure), `Note` for a line under the table, and `Print(argc, argv)` at the
// end when `Report::Wanted(argc, argv)`; then its section with the two marker lines in
// docs/benchmarks.md (copy one and run the script).
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace cloister::bench {

inline bool HasFlag(int argc, char** argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    if (flag == argv[i]) return true;
  }
  return false;
}

// printf into a string: `Num("%.2f", x)`.
inline std::string Num(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// The 1-minute load average now ("?" when /proc is not readable).
inline std::string LoadNow() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  return (in >> one) ? one : "?";
}

// "N cores (MODEL), M GiB, Linux RELEASE" of this machine.
inline std::string MachineNow() {
  std::string model = "unknown CPU";
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  long long mem_kib = 0;
  std::ifstream mem("/proc/meminfo");
  for (std::string key; mem >> key;) {
    if (key == "MemTotal:") {
      mem >> mem_kib;
      break;
    }
    mem.ignore(1 << 10, '\n');
  }
  utsname u{};
  uname(&u);
  return Num("%ld cores (%s), %.1f GiB, Linux %s", sysconf(_SC_NPROCESSORS_ONLN), model.c_str(),
             static_cast<double>(mem_kib) / (1 << 20), u.release);
}

// The load and the time when the bench started (before main), whenever its Report is made.
inline const std::string kLoadAtStart = LoadNow();
inline const std::time_t kStartTime = std::time(nullptr);

class Report {
 public:
  static bool Wanted(int argc, char** argv) { return HasFlag(argc, argv, "--markdown"); }

  Report(std::string name, std::string what, std::vector<std::string> columns)
      : name_(std::move(name)), what_(std::move(what)), columns_(std::move(columns)) {}

  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void Note(std::string line) { notes_.push_back(std::move(line)); }

  // The section, marker lines included. The command line is argv without --markdown.
  std::string Markdown(int argc, char** argv) const {
    std::string out = "<!-- bench:" + name_ + " begin -->\n" + what_ + "\n\n";
    out += Line(columns_);
    std::vector<std::string> rule(columns_.size(), "---");
    out += Line(rule);
    for (const auto& r : rows_) out += Line(r);
    if (!notes_.empty()) out += "\n";
    for (const auto& n : notes_) out += n + "\n";
    std::string cmd = name_;
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) != "--markdown") cmd += std::string(" ") + argv[i];
    }
    char when[32];
    std::tm tm{};
    gmtime_r(&kStartTime, &tm);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    const char* rev = std::getenv("CLOISTER_BENCH_REVISION");
    out += "\nMeasured by `" + cmd + "` on " + when + (rev && *rev ? std::string(" at ") + rev : "") +
           "; " + MachineNow() + "; load " + kLoadAtStart + " at the start, " + LoadNow() +
           " at the end (1-minute average).\n";
    out += "<!-- bench:" + name_ + " end -->\n";
    return out;
  }

  void Print(int argc, char** argv) const {
    std::string md = Markdown(argc, argv);
    std::fwrite(md.data(), 1, md.size(), stdout);
    std::fflush(stdout);
  }

 private:
  static std::string Line(const std::vector<std::string>& cells) {
    std::string l = "|";
    for (const auto& c : cells) l += " " + c + " |";
    return l + "\n";
  }

  std::string name_, what_;
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::string> notes_;
};

}  // namespace cloister::bench

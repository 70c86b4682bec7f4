// `cloister logs NAME [-f] [--console|--supervisor] [--since DURATION|TIME] [--raw]`: the boot
// console (console.log: what the guest wrote on its serial console, this boot) and the
// supervisor's log (supervisor.log: the supervisor's and QEMU's stderr, every boot). Both by
// default, each line labelled; -f follows them until the supervisor exits (or Ctrl-C).
//
// SECURITY: the console is guest-written bytes, and the supervisor log quotes guest text too: both
// are printed terminal-safe (base/terminal_text.h) so no escape sequence from the guest reaches
// the user's terminal, unless --raw asks for the bytes as they are.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/state.h"
#include "supervisor/workspace.h"
#include "base/terminal_text.h"

namespace cloister::cli {
namespace {

// "YYYY-MM-DDTHH:MM:SSZ" (the supervisor's stamp; also with a space for the T) as Unix time.
std::optional<time_t> ParseStamp(std::string_view s) {
  if (s.size() < 20) return std::nullopt;
  struct tm tm {};
  int n = 0;
  char sep = 0;
  std::string head(s.substr(0, 20));
  if (std::sscanf(head.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2dZ%n", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &sep, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 7 ||
      n != 20 || (sep != 'T' && sep != ' ')) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return timegm(&tm);
}

// --since: a duration (90s, 10m, 2h, 1d, 1h30m) before now, or a UTC time (2026-12-01T13:00:00Z,
// or the same with a space, or a date alone).
Result<time_t> ParseSince(const std::string& text, time_t now) {
  if (auto t = ParseStamp(text)) return *t;
  if (text.size() == 10) {
    if (auto t = ParseStamp(text + "T00:00:00Z")) return *t;
  }
  if (text.size() == 19) {
    if (auto t = ParseStamp(text + "Z")) return *t;
  }
  int64_t total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t j = i;
    int64_t v = 0;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9' && j - i < 9) {
      v = v * 10 + (text[j] - '0');
      ++j;
    }
    if (j == i || j >= text.size()) {
      any = false;
      break;
    }
    char unit = text[j];
    int64_t mul = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : unit == 'd' ? 86400 : 0;
    if (mul == 0) {
      any = false;
      break;
    }
    total += v * mul;
    any = true;
    i = j + 1;
  }
  if (!any) {
    return Error(ErrorCode::kInvalidArgument, "bad --since '" + text + "'",
                 "a duration (30s, 10m, 2h, 1d, 1h30m) or a UTC time (2026-12-01T13:00:00Z)");
  }
  return now - static_cast<time_t>(total);
}

struct LogFile {
  std::string path;
  std::string label;      // "" when only this file is shown
  bool stamped = false;   // lines start with the supervisor's time stamp
  std::optional<time_t> since;
  bool raw = false;

  uint64_t offset = 0;
  std::string partial;
  bool shown = false;     // since: a stamped line at or after `since` was seen

  static LogFile Make(std::string path, std::string label, bool stamped,
                       std::optional<time_t> since, bool raw) {
    LogFile f;
    f.path = std::move(path);
    f.label = std::move(label);
    f.stamped = stamped;
    f.since = since;
    f.raw = raw;
    return f;
  }

  void Emit(std::ostream& out, const std::string& line) {
    if (since) {
      if (stamped) {
        if (auto t = ParseStamp(line)) shown = *t >= *since;
      }
      if (!shown) return;
    }
    out << label << (raw ? line : TerminalSafe(line)) << "\n";
  }

  // Reads what was appended since the last call and prints its complete lines (and, if `final`,
  // the last partial one). A file that shrank was truncated (a new boot): read from the start.
  void Pump(std::ostream& out, bool final) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) {
      return;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0) {
      if (static_cast<uint64_t>(st.st_size) < offset) {
        offset = 0;
        partial.clear();
        out << label << "-- " << path << " was truncated (a new boot) --\n";
      }
      if (since && !stamped && !shown) shown = st.st_mtime >= *since;  // the console: one boot
    }
    std::fseek(f, static_cast<long>(offset), SEEK_SET);
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
      offset += n;
      partial.append(buf, n);
      size_t start = 0, nl;
      while ((nl = partial.find('\n', start)) != std::string::npos) {
        size_t end = nl;
        if (end > start && partial[end - 1] == '\r') --end;  // the serial console's "\r\n"
        Emit(out, partial.substr(start, end - start));
        start = nl + 1;
      }
      partial.erase(0, start);
      // A guest that never writes a newline cannot make us hold an unbounded line.
      if (partial.size() > 64 * 1024) {
        Emit(out, partial);
        partial.clear();
      }
    }
    std::fclose(f);
    if (final && !partial.empty()) {
      Emit(out, partial);
      partial.clear();
    }
    out << std::flush;
  }
};

}  // namespace

void AddLogsCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "logs", "Show a workspace's boot console and supervisor log (-f follows them)");
  struct Opts {
    std::string name;
    bool follow = false;
    bool console = false;
    bool supervisor = false;
    bool raw = false;
    std::string since;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_flag("-f,--follow", o->follow,
                "Keep printing what is appended, until the workspace's supervisor exits (or Ctrl-C)");
  auto* c = cmd->add_flag("--console", o->console,
                          "Only the boot console (what the guest printed on its serial console "
                          "during this boot)");
  cmd->add_flag("--supervisor", o->supervisor,
                "Only the supervisor's log (its stages and errors, and QEMU's, every boot)")
      ->excludes(c);
  cmd->add_option("--since", o->since,
                  "Only newer lines: a duration (10m, 2h, 1h30m) or a UTC time "
                  "(2026-12-01T13:00:00Z). The console has no times: it is shown whole if it "
                  "was written since then");
  cmd->add_flag("--raw", o->raw,
                "Print the bytes as they are (by default control characters and terminal escape "
                "sequences from the guest are shown as \\xNN)");
  cmd->callback([&cli, o] {
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    if (auto cfg = (*store)->LoadConfig(o->name); !cfg.ok()) return (void)cli.Fail(cfg.error());
    vm::RunPaths paths = vm::RunPathsFor(**store, o->name);
    std::optional<time_t> since;
    if (!o->since.empty()) {
      auto t = ParseSince(o->since, std::time(nullptr));
      if (!t.ok()) return (void)cli.Fail(t.error());
      since = *t;
    }
    bool both = !o->console && !o->supervisor;
    std::vector<LogFile> files;
    if (!o->console) {
      files.push_back(LogFile::Make(paths.supervisor_log, both ? "[supervisor] " : "", true, since,
                                    o->raw));
    }
    if (!o->supervisor) {
      files.push_back(LogFile::Make(paths.console_log, both ? "[console] " : "", false, since,
                                    o->raw));
    }
    bool any = false;
    for (const LogFile& f : files) any = any || access(f.path.c_str(), F_OK) == 0;
    if (!any && !o->follow) {
      cli.err() << "cloister: " << o->name << " has no logs yet (it has not been started: "
                << "`cloister start " << o->name << "`)\n";
      return;
    }
    for (LogFile& f : files) f.Pump(cli.out(), !o->follow);
    if (!o->follow) return;
    // Follow while the supervisor lives; one last read after it is gone.
    while (vm::LivePid(paths.supervisor_pid) != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling files, bounded
      for (LogFile& f : files) f.Pump(cli.out(), false);
    }
    for (LogFile& f : files) f.Pump(cli.out(), true);
  });
}

}  // namespace cloister::cli

// `cloister fork SRC NEW [--count N] [--with-credentials] [--json]`: new workspaces whose system
// disk and home start as SRC's are now (Store::Fork). A running SRC is first checkpointed by its
// supervisor over QMP, crash-consistently and without stopping it; the forks copy that
// checkpoint.
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "base/strings.h"
#include "cli/commands.h"
#include "cli/store_verbs.h"
#include "supervisor/launcher.h"
#include "supervisor/ports.h"
#include "supervisor/supervisor.h"

namespace cloister::cli {
namespace {

constexpr uint32_t kMaxForks = 64;

// "NEW" for one fork; "NEW-1" ... "NEW-N" for several.
std::vector<std::string> ForkNames(const std::string& name, uint32_t count) {
  if (count == 1) return {name};
  std::vector<std::string> names;
  for (uint32_t i = 1; i <= count; ++i) names.push_back(name + "-" + std::to_string(i));
  return names;
}

// Progress of a copy on a terminal: one line rewritten at most ten times a second; `*shown`
// says whether it printed (the caller ends the line).
std::function<void(uint64_t, uint64_t)> TerminalProgress(std::ostream& err,
                                                         const std::string& name, bool* shown) {
  if (!isatty(STDERR_FILENO)) return {};
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [&err, name, last, shown](uint64_t done, uint64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (now - *last < std::chrono::milliseconds(100)) return;
    *last = now;
    *shown = true;
    err << "\rcloister: copying the disks of " << name << ": " << FormatSize(std::min(done, total))
        << " / " << FormatSize(total) << std::flush;
  };
}

}  // namespace

void AddForkCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "fork",
      "New workspaces whose system disk and home start as SRC's are now (stopped or running: a "
      "running SRC is checkpointed crash-consistently over QMP without stopping it, and the "
      "checkpoint stays in SRC). Each fork owns its files (reflink where the filesystem can, "
      "else a sparse copy), so `rm SRC` never breaks one; it gets its own MAC, SSH key and sshd "
      "host key, no published ports, no checkpoints and no saved RAM (it boots fresh)");
  struct Opts {
    std::string source, name;
    uint32_t count = 1;
    bool with_credentials = false;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("SRC", o->source, "Workspace to fork")->required();
  cmd->add_option("NEW", o->name, "Name of the fork (with --count N: NEW-1 ... NEW-N)")
      ->required();
  cmd->add_option("--count", o->count, "How many forks to make (1-64)")->capture_default_str();
  cmd->add_flag("--with-credentials", o->with_credentials,
                "Copy SRC's credentials (API keys, AWS, header tokens, with their policies) into "
                "each fork's own secrets file. A subscription login is never copied: it stays in "
                "one workspace");
  cmd->add_flag("--json", o->json, "Print the forks' configs as a JSON array");
  cmd->callback([&cli, o] {
    if (o->count < 1 || o->count > kMaxForks) {
      cli.Fail(Error(ErrorCode::kInvalidArgument,
                     "--count " + std::to_string(o->count) + " is out of range",
                     "make between 1 and 64 forks at a time"));
      return;
    }
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
    Store& s = **store;
    ForkRequest req;
    req.source = o->source;
    req.with_credentials = o->with_credentials;
    // Published ports would collide with SRC's; run --rm's mark is SRC's.
    req.drop_settings = {vm::kPortsConfigKey, vm::kEphemeralKey};
    if (Status v = ValidateWorkspaceName(o->source); !v.ok()) {
      cli.Fail(v.error());
      return;
    }
    if (lifecycle::IsLive(s.State(o->source))) {
      Result<std::string> id = vm::CheckpointRunningWorkspace(s, o->source);
      if (!id.ok()) {
        cli.Fail(id.error().WithContext("checkpointing the running " + o->source));
        return;
      }
      if (!o->json) {
        cli.err() << "cloister: " << o->source << " is running: forking its checkpoint " << *id
                  << " (taken live; `cloister checkpoint rm " << o->source << " " << *id
                  << "` drops it)\n";
      }
      req.checkpoint = *id;
    }
    nlohmann::json out = nlohmann::json::array();
    for (const std::string& name : ForkNames(o->name, o->count)) {
      req.name = name;
      bool shown = false;
      req.progress = o->json ? nullptr : TerminalProgress(cli.err(), name, &shown);
      Result<ForkResult> f = s.Fork(req);
      if (shown) cli.err() << "\n";
      if (!f.ok()) {
        cli.Fail(f.error().WithContext("fork " + name));
        return;
      }
      if (o->json) {
        nlohmann::json j = ConfigToJson(f->config);
        j["forked_from"] = o->source;
        if (!req.checkpoint.empty()) j["forked_checkpoint"] = req.checkpoint;
        j["copied_bytes"] = f->copied_bytes;
        j["reflinked"] = f->reflinked;
        out.push_back(j);
        continue;
      }
      cli.out() << "Forked '" << o->source << "' as '" << name << "' ("
                << (f->reflinked ? "reflink clones" : "sparse copies of " +
                                                          FormatSize(f->copied_bytes))
                << ", MAC " << f->config.mac << ")\n";
    }
    if (o->json) cli.PrintJson(out);
  });
}

}  // namespace cloister::cli

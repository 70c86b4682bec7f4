#include "cli/ui_backend.h"

#include <mutex>
#include <sstream>

#include "audit/report.h"
#include "base/strings.h"
#include "cli/cli.h"
#include "cli/disposal_prompts.h"
#include "store/layout.h"
#include "store/store.h"
#include "supervisor/state.h"
#include "supervisor/workspace.h"

namespace cloister::cli {
namespace {

struct Ran {
  int code = 0;
  std::string out, err;
};

// The CLI's error lines ("cloister: error: MSG", "Hint: H") back into an Error.
Error CliError(const Ran& r) {
  std::string msg, hint;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cloister: error: ", 0) == 0) msg = line.substr(17);
    else if (line.rfind("Hint: ", 0) == 0) hint = line.substr(6);
  }
  if (msg.empty()) msg = Trim(r.err).empty() ? "exit " + std::to_string(r.code) : Trim(r.err);
  ErrorCode code = ErrorCode::kFailedPrecondition;
  if (msg.find("no workspace named") != std::string::npos) code = ErrorCode::kNotFound;
  return Error(code, msg, hint);
}

class CliBackend : public ui::Backend {
 public:
  explicit CliBackend(UiBackendOptions o) : o_(std::move(o)) {}

  Result<nlohmann::json> ListWorkspaces() override {
    return Json(Run({"ls", "--json"}));
  }
  Result<nlohmann::json> DescribeWorkspace(const std::string& name) override {
    return Json(Run({"describe", name, "--json"}));
  }
  Result<std::string> TracePath(const std::string& name) override {
    // As `cloister trace` finds it (cmd_trace.cc): through the store, for a workspace that exists.
    ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(o_.store_root));
    ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(name));
    (void)config;
    return store->Paths(name).trace_log;
  }
  Result<std::string> ConfirmText(const std::string& name, ui::Action action,
                                  const std::string& checkpoint) override {
    if (!ui::IsDestructive(action)) return std::string();
    ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(o_.store_root));
    ASSIGN_OR_RETURN(WorkspaceConfig c, store->LoadConfig(name));
    switch (action) {
      case ui::Action::kReset: return ResetPrompt(c);
      case ui::Action::kWipeHome: return WipeHomePrompt(c);
      case ui::Action::kWipe: return WipePrompt(c);
      case ui::Action::kRm: return RmPrompt(c);
      case ui::Action::kCheckpointRestore: return RestorePrompt(name, checkpoint);
      default: return std::string();
    }
  }
  Result<std::string> Run(const std::string& name, ui::Action action,
                          const std::string& checkpoint) override {
    // One action at a time, as one person at a terminal would run them.
    std::lock_guard<std::mutex> l(action_mu_);
    Ran r = Run(ActionArgv(action, name, checkpoint));
    if (r.code != kExitOk) return CliError(r);
    std::string msg = Trim(r.out);
    if (msg.empty()) msg = Trim(r.err);
    if (msg.empty()) msg = std::string(ui::ActionName(action)) + " " + name + ": done";
    return msg;
  }
  Result<nlohmann::json> RunAudit(const std::string& name) override {
    std::lock_guard<std::mutex> l(action_mu_);
    if (o_.run_audit) return o_.run_audit(name);
    Ran r = Run({"audit", "residue", name, "--json"});
    if (r.code != audit::kAuditClean && r.code != audit::kAuditFoundForeign) return CliError(r);
    if (r.out.size() > audit::kMaxReportBytes) {
      return Error(ErrorCode::kCorrupt, "audit report larger than its bound");
    }
    return Json(r);
  }
  std::map<std::string, std::string> ControlSockets() override {
    if (o_.control_sockets) return o_.control_sockets();
    // Called every second: not `ls` (configs, disk sizes, a status round trip per workspace) but
    // the workspaces' directory names and whether each has a live supervisor (its pid file's
    // lock, vm::LivePid): the cheapest truthful answer to "who may ask now".
    std::map<std::string, std::string> out;
    if (!store_) {
      auto store = Store::Open(o_.store_root);
      if (!store.ok()) return out;
      store_ = std::move(*store);
    }
    const std::string dir = JoinPath(o_.store_root, std::string(layout::kWorkspacesDir));
    auto names = store_->env()->ListDir(dir);
    if (!names.ok()) return out;
    for (const std::string& name : *names) {
      if (!ui::ValidWorkspaceName(name)) continue;
      vm::RunPaths paths = vm::RunPathsFor(*store_, name);
      if (vm::LivePid(paths.supervisor_pid) > 0) out[name] = paths.supervisor_socket;
    }
    return out;
  }

 private:
  Ran Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"cloister", "--store", o_.store_root});
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    std::istringstream in;
    Ran r;
    r.code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, in);
    r.out = out.str();
    r.err = err.str();
    return r;
  }
  static Result<nlohmann::json> Json(const Ran& r) {
    if (r.code != kExitOk && r.code != kExitError) return CliError(r);
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      if (r.code != kExitOk) return CliError(r);
      return Error(ErrorCode::kInternal, "the CLI printed no JSON");
    }
    return j;
  }

  UiBackendOptions o_;
  std::mutex action_mu_;
  std::unique_ptr<Store> store_;  // ControlSockets only (the desk's one thread)
};

}  // namespace

std::vector<std::string> ActionArgv(ui::Action action, const std::string& name,
                                    const std::string& checkpoint) {
  switch (action) {
    case ui::Action::kStart: return {"start", "-d", name};
    case ui::Action::kStop: return {"stop", name};
    case ui::Action::kSuspend: return {"stop", "--suspend", name};
    case ui::Action::kCheckpointCreate: return {"checkpoint", "create", name};
    case ui::Action::kCheckpointRestore: return {"checkpoint", "restore", name, checkpoint, "--yes"};
    case ui::Action::kReset: return {"reset", name, "--yes"};
    case ui::Action::kWipeHome: return {"wipe-home", name, "--yes"};
    case ui::Action::kWipe: return {"wipe", name, "--yes"};
    case ui::Action::kRm: return {"rm", name, "--yes"};
  }
  return {};
}

std::unique_ptr<ui::Backend> MakeUiBackend(UiBackendOptions options) {
  return std::make_unique<CliBackend>(std::move(options));
}

}  // namespace cloister::cli

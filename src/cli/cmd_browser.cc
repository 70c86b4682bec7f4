// `cloister browser NAME start|stop|status|forget [--keep-profile] [--json]` (issue #18;
// docs/design.md "Browser VM"):
// the workspace's browser VM, through its supervisor's control socket (op "browser",
// supervisor/browser_vm.h). `start` resolves --image here (the catalog's checks, like `create
// --image`) and needs a running workspace; `stop` and `status` work in any state (a stopped
// workspace has no browser VM). Each run first deletes browser VM directories a crash left.
#include <iostream>

#include "browser/profile_disk.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/image_resolver.h"
#include "cli/store_verbs.h"
#include "cli/vault_access.h"
#include "lifecycle/lifecycle.h"
#include "supervisor/browser_vm.h"
#include "supervisor/control.h"
#include "supervisor/launcher.h"
#include "supervisor/workspace.h"

namespace cloister::cli {

namespace {

using nlohmann::json;

void PrintBrowser(Cli& cli, const std::string& name, const json& b) {
  std::string state = vm::JsonString(b, "state");
  if (state.empty()) state = "stopped";
  cli.out() << name << ": browser " << state;
  if (state == "running") {
    cli.out() << " (QEMU pid " << b.value("qemu_pid", 0) << ", " << b.value("memory_mib", 0)
              << " MiB, " << b.value("cpus", 0) << " CPU" << (b.value("cpus", 0) == 1 ? "" : "s")
              << ", " << (b.value("keep_profile", false) ? "kept profile" : "profile on tmpfs")
              << ", " << b.value("cdp_connections", 0) << " CDP connections so far); CDP in the "
              << "workspace at http://127.0.0.1:" << protocol::kBrowserCdpPort;
  }
  cli.out() << "\n";
}

// `browser NAME forget` (bprofile): drops the kept profile (browser/profile_disk.h), disk then
// key, and nothing else. Refused while the browser VM runs (it may hold the disk); the vault
// write takes the locks every vault change takes (cli/vault_access.h).
Status ForgetProfile(Cli& cli, const std::string& name, const vm::VmStatus& status, bool yes,
                     bool as_json, const std::string& supervisor_socket) {
  if (lifecycle::IsLive(status.state)) {
    ASSIGN_OR_RETURN(json reply, vm::ControlRequest(supervisor_socket,
                                                    {{"op", vm::kBrowserOp}, {"action", "status"}},
                                                    std::chrono::seconds(30)));
    std::string state = vm::JsonString(reply.value("browser", json::object()), "state");
    if (!state.empty() && state != "stopped") {
      return Error(ErrorCode::kFailedPrecondition,
                   name + ": its browser VM is " + state + " and may hold the profile disk",
                   "stop it first: `cloister browser " + name + " stop`");
    }
  }
  ASSIGN_OR_RETURN(VaultAccess access, OpenVaultAccess(cli, name, /*mutate=*/true));
  browser::ProfileLocation loc{access.location.keys_dir, access.paths.dir, name};
  ASSIGN_OR_RETURN(bool exists, browser::ProfileExists(loc));
  if (exists) {
    RETURN_IF_ERROR(cli.Confirm("Forget the kept browser profile of '" + name +
                                    "' (its cookies and logins are lost)?",
                                yes));
    RETURN_IF_ERROR(browser::DestroyProfile(loc));
  }
  if (as_json) {
    cli.PrintJson({{"name", name}, {"forgotten", exists}});
  } else if (exists) {
    cli.out() << name << ": browser profile forgotten (disk and key deleted)\n";
  } else {
    cli.out() << name << ": no kept browser profile\n";
  }
  return OkStatus();
}

}  // namespace

void AddBrowserCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "browser",
      "Start, stop or show the workspace's browser VM: Chromium in a VM of its own (a copy-on-write "
      "disk in a temporary directory, deleted at stop), driven from inside the workspace over the "
      "Chrome DevTools Protocol at http://127.0.0.1:9222; its traffic crosses the workspace's "
      "egress proxy (trace records marked \"source\":\"browser\")");
  struct Opts {
    std::string name, action = "status", image;
    int memory = vm::kBrowserDefaultMemoryMib;
    int cpus = vm::kBrowserDefaultCpus;
    bool json = false;
    bool yes = false;
    bool keep_profile = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_option("ACTION", o->action,
                  "status (default), start (the workspace must be running; one browser VM per "
                  "workspace), stop, or forget (delete the kept profile disk and its key; the "
                  "browser VM must not run)")
      ->check(CLI::IsMember({"start", "stop", "status", "forget"}));
  cmd->add_option("--image", o->image,
                  "start: the browser image (a catalog name or a raw image path; default '" +
                      std::string(vm::kBrowserImageName) + "', from `cloister image build --browser`)");
  cmd->add_option("--memory", o->memory, "start: the browser VM's memory in MiB (256..65536)")
      ->capture_default_str();
  cmd->add_option("--cpus", o->cpus, "start: the browser VM's CPUs (1..16)")->capture_default_str();
  cmd->add_flag("--keep-profile", o->keep_profile,
                "start: keep Chromium's profile (cookies, logins) on the workspace's encrypted disk "
                "(<workspace>/browser-profile.qcow2, LUKS, its key in the workspace's vault; made at "
                "the first use) instead of a tmpfs; `wipe`, `wipe-home`, `rm` and `browser NAME "
                "forget` delete it");
  cmd->add_flag("--json", o->json, "Print the browser VM's state as JSON");
  cmd->add_flag("-f,--yes", o->yes, "forget: do not ask for confirmation");
  cmd->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(cli));
      (void)vm::CollectStaleBrowserDirs(store->root());
      ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(o->name));
      (void)config;
      vm::VmStatus status = vm::WorkspaceStatus(*store, o->name);
      if (o->action == "forget") {
        return ForgetProfile(cli, o->name, status, o->yes, o->json,
                             vm::RunPathsFor(*store, o->name).supervisor_socket);
      }
      json request = {{"op", vm::kBrowserOp}, {"action", o->action}};
      if (o->action == "start") {
        RETURN_IF_ERROR(vm::BrowserStartCheck(status.state, o->name, status.detail));
        std::string spec = o->image.empty() ? std::string(vm::kBrowserImageName) : o->image;
        auto image = ResolveImageSpec(Env::Default(), cli.StoreRoot(), spec);
        if (!image.ok()) {
          Error e = image.error();
          return Error(e.code(), "browser image '" + spec + "': " + e.message(),
                       o->image.empty() ? "build it: `cloister image build --browser`"
                                        : e.hint());
        }
        vm::BrowserStartOptions so{image->path, o->memory, o->cpus, o->keep_profile};
        RETURN_IF_ERROR(vm::ValidateBrowserStartOptions(so));
        request["image"] = so.image_path;
        request["memory_mib"] = so.memory_mib;
        request["cpus"] = so.cpus;
        request["keep_profile"] = so.keep_profile;
        cli.err() << "cloister: " << o->name << ": starting its browser VM ("
                  << image->name << ", " << so.memory_mib << " MiB, " << so.cpus << " CPU"
                  << (so.keep_profile ? ", kept profile" : "") << ")\n";
      } else if (o->keep_profile) {
        return Error(ErrorCode::kInvalidArgument, "--keep-profile is an option of `browser start`",
                     "`cloister browser " + o->name + " start --keep-profile`");
      } else if (!lifecycle::IsLive(status.state)) {
        // No supervisor: no browser VM (its directory, if a crash left one, is gone above).
        json b = {{"state", "stopped"}};
        if (o->json) {
          cli.PrintJson({{"name", o->name}, {"state", lifecycle::StateName(status.state)},
                         {"browser", b}});
        } else {
          PrintBrowser(cli, o->name, b);
        }
        return OkStatus();
      }
      vm::RunPaths paths = vm::RunPathsFor(*store, o->name);
      // A start waits for the browser VM's READY (minutes under TCG; the supervisor's own bound).
      ASSIGN_OR_RETURN(json reply, vm::ControlRequest(paths.supervisor_socket, request,
                                                      std::chrono::minutes(15)));
      json b = reply.value("browser", json::object());
      if (o->json) {
        cli.PrintJson({{"name", o->name}, {"state", lifecycle::StateName(status.state)},
                       {"browser", b}});
        return OkStatus();
      }
      PrintBrowser(cli, o->name, b);
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

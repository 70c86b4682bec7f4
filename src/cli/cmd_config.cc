// `cloister config NAME [--tool TOOL] [--json]`: shows a workspace's settings, or changes the
// editable ones (today: the coding agent it runs). A change to a stopped workspace holds its lock,
// as every mutating verb does; a running VM's supervisor holds that lock and reads the config at
// boot, so a change made while it runs goes in under the config lock alone and applies at the next
// start (the verb says so).
#include "base/agent_tools.h"
#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/lifecycle_check.h"
#include "cli/store_verbs.h"
#include "supervisor/browser_vm.h"
#include "supervisor/launcher.h"
#include "supervisor/ports.h"

namespace cloister::cli {

namespace {

nlohmann::json SettingsJson(const WorkspaceConfig& c, lifecycle::State state) {
  nlohmann::json vols = nlohmann::json::array();
  for (const Volume& v : c.volumes) {
    vols.push_back({{"host", v.host}, {"guest", v.guest}, {"read_only", v.read_only}});
  }
  nlohmann::json doc = {{"name", c.name},
                        {"tool", c.tool},
                        {"image", c.image.name},
                        {"memory_mib", c.memory_mib},
                        {"cpus", c.cpus},
                        {"home_size", c.home_size},
                        {"volumes", vols},
                        {"state", lifecycle::StateName(state)}};
  if (const AgentTool* t = FindAgentTool(c.tool); t && !t->package.empty()) {
    doc["tool_package"] = AgentToolPackageSpec(*t);
  }
  if (auto ports = vm::PortsConfigFromConfig(c); ports.ok()) {
    nlohmann::json publish = nlohmann::json::array();
    for (const vm::PortSpec& s : ports->publish) publish.push_back(s.ToString());
    doc["publish"] = publish;
    doc["auto_ports"] = ports->auto_ports;
  }
  if (auto b = vm::BrowserSettingsFromConfig(c); b.ok()) doc["browser_autostart"] = vm::AutostartValue(*b);
  return doc;
}

}  // namespace

void AddConfigCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "config", "Show a workspace's settings, or change the coding agent it runs (--tool), "
                "--auto-ports or --browser-autostart");
  struct Opts {
    std::string name, tool, auto_ports, browser_autostart;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_option("--tool", o->tool,
                  "The coding agent: " + AgentToolNames() +
                      ". Installed in the guest at its next boot (npm, through the proxy); a "
                      "change while the VM runs applies at its next start");
  cmd->add_option("--auto-ports", o->auto_ports,
                  "on: forward every TCP port the guest listens on from 127.0.0.1 (`cloister port "
                  "NAME ls`); off: only the -p ports. Applies at the next start")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--browser-autostart", o->browser_autostart,
                  "on: the first CDP connection from the guest (http://127.0.0.1:9222) while no "
                  "browser VM runs starts one (the 'browser' image, default memory and CPUs; a "
                  "failed start is retried only after a back-off); keep-profile: the same with the "
                  "kept profile (`browser start --keep-profile`); off: `cloister browser NAME start` "
                  "only. Applies at once, also while the VM runs")
      ->check(CLI::IsMember({"on", "off", "keep-profile"}));
  cmd->add_flag("--json", o->json, "Print the settings as JSON");
  cmd->callback([&cli, o] {
    auto opened = Store::Open(cli.StoreRoot());
    if (!opened.ok()) return (void)cli.Fail(opened.error());
    Store& store = **opened;
    auto config = store.LoadConfig(o->name);
    if (!config.ok()) return (void)cli.Fail(config.error());
    bool running = false;
    if (!o->tool.empty() || !o->auto_ports.empty() || !o->browser_autostart.empty()) {
      const AgentTool* new_tool = nullptr;
      if (!o->tool.empty()) {
        auto tool = ParseAgentTool(o->tool);
        if (!tool.ok()) return (void)cli.Fail(tool.error());
        new_tool = *tool;
      }
      std::optional<WorkspaceLock> lock;
      Result<WorkspaceLock> locked = store.LockWorkspace(o->name);
      if (locked.ok()) {
        lock.emplace(std::move(locked).value());
      } else if (locked.error().code() == ErrorCode::kBusy &&
                 AppliesAtNextStart(store, o->name, lifecycle::Action::kConfigChange)) {
        running = true;  // the supervisor holds the lock; UpdateConfig takes the config lock
      } else {
        return (void)cli.Fail(locked.error());
      }
      std::string previous;
      Status st = store.UpdateConfig(o->name, [&](WorkspaceConfig& c) -> Status {
        previous = c.tool;
        if (new_tool) c.tool = std::string(new_tool->name);
        if (!o->browser_autostart.empty()) {
          ASSIGN_OR_RETURN(vm::BrowserSettings b, vm::ParseAutostartValue(o->browser_autostart));
          RETURN_IF_ERROR(vm::PutBrowserSettings(c, b));
        }
        if (o->auto_ports.empty()) return OkStatus();
        ASSIGN_OR_RETURN(vm::PortsConfig ports, vm::PortsConfigFromConfig(c));
        ports.auto_ports = o->auto_ports == "on";
        return vm::PutPortsConfig(c, ports);
      });
      if (!st.ok()) return (void)cli.Fail(st.error());
      config = store.LoadConfig(o->name);
      if (!config.ok()) return (void)cli.Fail(config.error());
      if (previous != config->tool) {
        cli.err() << "cloister: " << o->name << ": tool " << previous << " -> " << config->tool;
        if (running) {
          cli.err() << "; the VM is running: this applies at its next start (`cloister reboot "
                    << o->name << "`)";
        } else if (config->tool != kDefaultToolName) {
          cli.err() << "; installed in the guest at its next start";
        }
        cli.err() << "\n";
      }
      if (!o->auto_ports.empty()) {
        cli.err() << "cloister: " << o->name << ": auto-ports " << o->auto_ports
                  << (running ? "; the VM is running: this applies at its next start" : "") << "\n";
      }
      if (!o->browser_autostart.empty()) {
        cli.err() << "cloister: " << o->name << ": browser autostart " << o->browser_autostart
                  << (running ? " (the running VM's next CDP connection sees it)" : "") << "\n";
      }
    }
    // The one derived status, as `ls` shows it (supervisor/state.h).
    lifecycle::State state = vm::WorkspaceStatus(store, o->name).state;
    if (o->json) return cli.PrintJson(SettingsJson(*config, state));
    const WorkspaceConfig& c = *config;
    cli.out() << "name:    " << c.name << " (" << lifecycle::StateName(state) << ")\n"
              << "tool:    " << c.tool;
    if (const AgentTool* t = FindAgentTool(c.tool); t && !t->package.empty()) {
      cli.out() << " (" << AgentToolPackageSpec(*t) << ")";
    } else if (!t) {
      cli.out() << " (unknown to this cloister: `cloister config " << c.name << " --tool shell`)";
    }
    cli.out() << "\n"
              << "image:   " << c.image.name
              << (c.image.version.empty() ? "" : " " + c.image.version) << "\n"
              << "memory:  " << c.memory_mib << " MiB, " << c.cpus << " vCPU\n"
              << "home:    " << FormatSize(c.home_size) << " (sparse)\n";
    for (const Volume& v : c.volumes) {
      cli.out() << "volume:  " << v.host << " -> " << v.guest << (v.read_only ? " (ro)" : "")
                << "\n";
    }
    if (auto ports = vm::PortsConfigFromConfig(c); ports.ok()) {
      for (const vm::PortSpec& s : ports->publish) cli.out() << "port:    " << s.ToString() << "\n";
      if (ports->auto_ports) cli.out() << "ports:   auto (the guest's listening ports too)\n";
    }
    if (auto b = vm::BrowserSettingsFromConfig(c); b.ok()) {
      cli.out() << "browser: autostart " << vm::AutostartValue(*b) << "\n";
    } else {
      cli.out() << "browser: " << b.error().message() << "\n";
    }
  });
}

}  // namespace cloister::cli

// `cloister port NAME [ls] [--json]`, `cloister port NAME add SPEC...`, `cloister port NAME rm
// HOST_PORT|SPEC...`: the published ports of a running workspace (supervisor/ports.h), through
// its control socket (op "ports"). `add` publishes for this run only (the `-p` ports of create and
// run are kept in the config and come up at every start); `rm` closes any of them until the next
// start. On a stopped workspace `ls` shows the configured ones.
#include <algorithm>
#include <iomanip>

#include "base/json_util.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/port_flags.h"
#include "lifecycle/lifecycle.h"
#include "store/store.h"
#include "supervisor/control.h"
#include "supervisor/launcher.h"
#include "supervisor/ports.h"
#include "supervisor/workspace.h"

namespace cloister::cli {

namespace {

using nlohmann::json;

// A `rm` argument: HOST_PORT, or a spec whose host side names the forward.
Result<json> RemoveTarget(const std::string& text) {
  bool digits = !text.empty() && text.size() <= 5 &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) {
    unsigned long v = std::stoul(text);
    if (v == 0 || v > 65535) {
      return Error(ErrorCode::kInvalidArgument, "bad host port '" + text + "'", "1..65535");
    }
    return json{{"host_port", v}, {"host_ip", ""}};
  }
  ASSIGN_OR_RETURN(vm::PortSpec spec, vm::ParsePortSpec(text));
  return json{{"host_port", spec.host_port}, {"host_ip", spec.host_ip}};
}

void PrintTable(Cli& cli, const json& ports) {
  if (!ports.is_array() || ports.empty()) {
    cli.out() << "no published ports\n";
    return;
  }
  cli.out() << std::left << std::setw(28) << "HOST" << std::setw(8) << "GUEST" << std::setw(8)
            << "ORIGIN" << "CONNECTIONS\n";
  for (const json& p : ports) {
    std::string ip = vm::JsonString(p, "host_ip");
    if (ip.find(':') != std::string::npos) ip = "[" + ip + "]";
    std::string host = ip + ":" + std::to_string(JsonInt<int>(p, "host_port", 0));
    cli.out() << std::setw(28) << host << std::setw(8) << JsonInt<int>(p, "guest_port", 0) << std::setw(8)
              << vm::JsonString(p, "origin") << JsonInt<uint64_t>(p, "connections", 0) << "\n";
  }
}

void WarnIfExposed(const vm::PortSpec& spec, std::ostream& warn) {
  if (vm::IsLoopbackAddress(spec.host_ip)) return;
  warn << "cloister: warning: " << spec.ToString() << " listens beyond loopback: every host that "
       << "reaches " << spec.host_ip << " can connect to the guest's port " << spec.guest_port
       << "\n";
}

}  // namespace

Result<vm::PortsConfig> ParsePublishFlags(const std::vector<std::string>& publish, bool auto_ports,
                                          std::ostream& warn) {
  vm::PortsConfig ports;
  ports.auto_ports = auto_ports;
  for (const std::string& text : publish) {
    ASSIGN_OR_RETURN(vm::PortSpec spec, vm::ParsePortSpec(text));
    WarnIfExposed(spec, warn);
    ports.publish.push_back(spec);
  }
  RETURN_IF_ERROR(vm::PortsSection().validate(ports));
  return ports;
}

Status StorePublishFlags(Store& store, const std::string& name, const vm::PortsConfig& ports) {
  if (ports.publish.empty() && !ports.auto_ports) return OkStatus();
  return store.UpdateConfig(name, [&](WorkspaceConfig& c) { return vm::PutPortsConfig(c, ports); });
}

void AddPortCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "port",
      "List, add or remove the published ports of a running workspace: a host TCP port (on "
      "127.0.0.1 unless an address is given) whose connections reach the guest's port through "
      "the host-guest channel; the guest opens no port");
  struct Opts {
    std::string name, action = "ls";
    std::vector<std::string> specs;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_option("ACTION", o->action,
                  "ls (default), add [HOST_IP:]HOST_PORT:GUEST_PORT... (this run only; HOST_PORT 0 "
                  "picks a free one; a non-loopback HOST_IP exposes the guest's port to every host "
                  "that reaches that address), or rm HOST_PORT|SPEC...")
      ->check(CLI::IsMember({"ls", "add", "rm"}));
  cmd->add_option("SPEC", o->specs, "Ports to add or remove");
  cmd->add_flag("--json", o->json, "Print the ports as JSON");
  cmd->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
      ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(o->name));
      if (o->action != "ls" && o->specs.empty()) {
        return Error(ErrorCode::kInvalidArgument, "port " + o->action + " needs a port",
                     "e.g. `cloister port " + o->name + " " + o->action +
                         (o->action == "add" ? " 8080:80`" : " 8080`"));
      }
      if (o->action == "ls" && !o->specs.empty()) {
        return Error(ErrorCode::kInvalidArgument, "port ls takes no ports");
      }
      json request = {{"op", vm::kPortsControlOp}, {"action", o->action}};
      if (o->action == "add") {
        json specs = json::array();
        for (const std::string& s : o->specs) {
          ASSIGN_OR_RETURN(vm::PortSpec spec, vm::ParsePortSpec(s));
          WarnIfExposed(spec, cli.err());
          specs.push_back(spec.ToString());
        }
        request["specs"] = specs;
      } else if (o->action == "rm") {
        json targets = json::array();
        for (const std::string& s : o->specs) {
          ASSIGN_OR_RETURN(json t, RemoveTarget(s));
          targets.push_back(t);
        }
        request["targets"] = targets;
      }
      vm::VmStatus status = vm::WorkspaceStatus(*store, o->name);
      if (o->action == "ls" && !lifecycle::IsLive(status.state)) {
        // Stopped: what comes up at the next start.
        ASSIGN_OR_RETURN(vm::PortsConfig ports, vm::PortsConfigFromConfig(config));
        json list = json::array();
        for (const vm::PortSpec& s : ports.publish) {
          vm::ForwardInfo info;
          info.spec = s;
          info.origin = vm::ForwardOrigin::kConfig;
          list.push_back(vm::ForwardInfoJson(info));
        }
        if (o->json) {
          cli.PrintJson({{"name", o->name},
                         {"state", lifecycle::StateName(status.state)},
                         {"auto_ports", ports.auto_ports},
                         {"ports", list}});
          return OkStatus();
        }
        cli.err() << "cloister: " << o->name << " is " << lifecycle::StateName(status.state)
                  << ": these come up at its next start"
                  << (ports.auto_ports ? " (and the guest's listening ports, --auto-ports)" : "")
                  << "\n";
        PrintTable(cli, list);
        return OkStatus();
      }
      // A change needs a live VM (the table's answer for a stream into the guest).
      RETURN_IF_ERROR(lifecycle::Check(status.state,
                                       o->action == "ls" ? lifecycle::Action::kStatus
                                                         : lifecycle::Action::kExec,
                                       o->name, status.detail));
      vm::RunPaths paths = vm::RunPathsFor(*store, o->name);
      ASSIGN_OR_RETURN(json reply, vm::ControlRequest(paths.supervisor_socket, request,
                                                      std::chrono::seconds(30)));
      if (o->json) {
        reply.erase("ok");
        reply["name"] = o->name;
        cli.PrintJson(reply);
        return OkStatus();
      }
      if (o->action == "add") {
        for (const json& a : reply.value("added", json::array())) {
          cli.err() << "cloister: " << o->name << ": published " << vm::JsonString(a, "spec")
                    << " (until the VM stops)\n";
        }
      } else if (o->action == "rm") {
        cli.err() << "cloister: " << o->name << ": removed " << o->specs.size() << " port"
                  << (o->specs.size() == 1 ? "" : "s") << "\n";
      }
      if (o->action == "ls") PrintTable(cli, reply.value("ports", json::array()));
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

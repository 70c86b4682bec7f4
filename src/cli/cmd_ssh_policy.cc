// cloister ssh-policy NAME [--confirm on|off] [--add-host H]... [--remove-host H]... [--ports P,...]
//                          [--no-hosts] [--reset] [--json]
// Shows or changes the workspace's SSH policy (sshagent/policy.h, config.json "ssh"): whether each
// signature of the workspace key waits for `cloister ssh-confirm NAME`, and which hosts and ports
// the guest's ssh may reach through the egress proxy's opaque CONNECT tunnels. Changes apply at
// the next start or reboot of the VM.
#include <algorithm>
#include <cctype>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/lifecycle_check.h"
#include "cli/store_verbs.h"
#include "sshagent/policy.h"

namespace cloister::cli {
namespace {

std::string JoinPorts(const std::vector<uint16_t>& ports) {
  std::string s;
  for (uint16_t p : ports) s += (s.empty() ? "" : ",") + std::to_string(p);
  return s;
}

}  // namespace

void AddSshPolicyCommand(CLI::App& app, Cli& cli) {
  struct Opts {
    std::string name;
    std::string confirm;
    std::vector<std::string> add_hosts, remove_hosts;
    std::string ports;
    bool no_hosts = false, reset = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "ssh-policy",
      "Show or change the workspace's SSH policy: confirmation of each signature, and the hosts "
      "and ports ssh may reach through the egress proxy (applies at the next start or reboot)");
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_option("--confirm", o->confirm,
                  "on: every signature waits for `cloister ssh-confirm NAME` on the host (refused "
                  "when nobody answers); off: signatures need no confirmation")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--add-host", o->add_hosts,
                  "Allow ssh tunnels to this host and its subdomains (repeatable)");
  cmd->add_option("--remove-host", o->remove_hosts, "Stop allowing this host (repeatable)");
  cmd->add_flag("--no-hosts", o->no_hosts, "Allow no host at all (ssh out of the guest is off)");
  cmd->add_option("--ports", o->ports,
                  "Comma-separated ports ssh tunnels may use, replacing the list (not 80 or 443)");
  cmd->add_flag("--reset", o->reset,
                "Back to the defaults (no confirmation; github.com, gitlab.com, bitbucket.org on 22)");
  cmd->add_flag("--json", o->json, "Print as JSON");
  cmd->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(cli));
      ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(o->name));
      Result<sshagent::SshPolicy> stored = sshagent::SshPolicyFromConfig(config);
      // A damaged policy can always be replaced by --reset.
      if (!stored.ok() && !o->reset) return stored.error();
      sshagent::SshPolicy policy = stored.ok() ? *stored : sshagent::SshPolicy{};
      bool change = o->reset || !o->confirm.empty() || !o->add_hosts.empty() ||
                    !o->remove_hosts.empty() || !o->ports.empty() || o->no_hosts;
      if (o->reset) policy = sshagent::SshPolicy{};
      if (!o->confirm.empty()) policy.confirm = o->confirm == "on";
      if (o->no_hosts) policy.tunnel_hosts.clear();
      for (const std::string& h : o->remove_hosts) {
        ASSIGN_OR_RETURN(std::string n, sshagent::NormalizeTunnelHost(h));
        auto it = std::find(policy.tunnel_hosts.begin(), policy.tunnel_hosts.end(), n);
        if (it == policy.tunnel_hosts.end()) {
          return Error(ErrorCode::kNotFound, n + " is not an allowed SSH host of " + o->name,
                       "see `cloister ssh-policy " + o->name + "`");
        }
        policy.tunnel_hosts.erase(it);
      }
      for (const std::string& h : o->add_hosts) {
        ASSIGN_OR_RETURN(std::string n, sshagent::NormalizeTunnelHost(h));
        if (std::find(policy.tunnel_hosts.begin(), policy.tunnel_hosts.end(), n) ==
            policy.tunnel_hosts.end()) {
          policy.tunnel_hosts.push_back(n);
        }
      }
      if (!o->ports.empty()) {
        policy.tunnel_ports.clear();
        for (const std::string& item : Split(o->ports, ',')) {
          std::string t = Trim(item);
          int port = 0;
          if (t.empty() || t.size() > 5 || !std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
            return Error(ErrorCode::kInvalidArgument, "--ports: '" + t + "' is not a port",
                         "e.g. --ports 22,2222");
          }
          port = std::stoi(t);
          RETURN_IF_ERROR(sshagent::ValidateTunnelPort(port));
          if (std::find(policy.tunnel_ports.begin(), policy.tunnel_ports.end(), port) ==
              policy.tunnel_ports.end()) {
            policy.tunnel_ports.push_back(static_cast<uint16_t>(port));
          }
        }
      }
      RETURN_IF_ERROR(sshagent::ValidateSshPolicy(policy));
      if (change) {
        // A settings flag: the config lock is enough (a running VM keeps its boot's policy).
        RETURN_IF_ERROR(store->UpdateConfig(o->name, [&](WorkspaceConfig& c) {
          return sshagent::PutSshPolicy(c, policy);
        }));
      }
      bool running = AppliesAtNextStart(*store, o->name, lifecycle::Action::kConfigChange);
      if (o->json) {
        nlohmann::json doc = sshagent::SshPolicyToJson(policy);
        doc["workspace"] = o->name;
        doc["applies_at_next_start"] = change && running;
        cli.PrintJson(doc);
      } else {
        cli.out() << "confirm each signature: " << (policy.confirm ? "on" : "off") << "\n"
                  << "ssh tunnel hosts: "
                  << (policy.tunnel_hosts.empty() ? "(none: ssh out of the guest is off)"
                                                  : Join(policy.tunnel_hosts, ", "))
                  << "\n"
                  << "ssh tunnel ports: " << JoinPorts(policy.tunnel_ports) << "\n";
        if (change && running) {
          cli.err() << "cloister: " << o->name << " is running; the change applies at its next "
                    << "start (`cloister reboot " << o->name << "`)\n";
        }
        if (policy.confirm) {
          cli.err() << "cloister: run `cloister ssh-confirm " << o->name
                    << "` in a terminal to answer; with nobody answering, every signature is "
                       "refused\n";
        }
      }
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

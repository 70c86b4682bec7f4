// cloister ssh-policy NAME [--confirm on|off] [--add-host H]... [--remove-host H]... [--ports P,...]
//                          [--no-hosts] [--unpin H]... [--reset] [--json]
// Shows or changes the workspace's SSH policy (sshagent/policy.h, config.json "ssh"): whether each
// signature of the workspace key waits for `cloister ssh-confirm NAME`, which hosts and ports
// the guest's ssh may reach through the egress proxy's opaque CONNECT tunnels, and the host keys
// pinned for those hosts (login signatures only in sessions bound to one). Changes apply at the
// next start or reboot of the VM; forgetting pins (--unpin) applies at once.
#include <algorithm>
#include <cctype>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/lifecycle_check.h"
#include "cli/policy_verb.h"
#include "cli/store_verbs.h"
#include "sshagent/host_key.h"
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
    std::vector<std::string> add_hosts, remove_hosts, unpin;
    std::string ports;
    bool no_hosts = false, reset = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "ssh-policy",
      "Show or change the workspace's SSH policy: confirmation of each signature, the hosts "
      "and ports ssh may reach through the egress proxy (applies at the next start or reboot), "
      "and the host keys pinned for them (SSH logins are signed only for a pinned host key)");
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_option("--confirm", o->confirm,
                  "on: every signature waits for `cloister ssh-confirm NAME` on the host (refused "
                  "when nobody answers); off: signatures need no confirmation")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--add-host", o->add_hosts,
                  "Allow ssh tunnels to this host and its subdomains; logins are signed for "
                  "the host itself, whose keys are pinned at its first login (add a subdomain by "
                  "name to log in there) (repeatable)");
  cmd->add_option("--remove-host", o->remove_hosts, "Stop allowing this host (repeatable)");
  cmd->add_flag("--no-hosts", o->no_hosts, "Allow no host at all (ssh out of the guest is off)");
  cmd->add_option("--ports", o->ports,
                  "Comma-separated ports ssh tunnels may use, replacing the list (not 80 or 443)");
  cmd->add_option("--unpin", o->unpin,
                  "Forget the host keys pinned for this host; the next login pins what the host "
                  "presents then, asked from the host side (repeatable; applies at once)");
  cmd->add_flag("--reset", o->reset,
                "Back to the defaults (no confirmation; github.com, gitlab.com, bitbucket.org on "
                "22; no pinned host keys)");
  cmd->add_flag("--json", o->json, "Print as JSON");
  cmd->callback([&cli, o] {
    auto run = [&]() -> Status {
      bool settings = o->reset || !o->confirm.empty() || !o->add_hosts.empty() ||
                      !o->remove_hosts.empty() || !o->ports.empty() || o->no_hosts;
      bool change = settings || !o->unpin.empty();
      ASSIGN_OR_RETURN(
          PolicyChange<sshagent::SshPolicy> changed,
          ChangePolicy<sshagent::SshPolicy>(
              cli, sshagent::SshPolicySection(), o->name, o->reset, change,
              [&](sshagent::SshPolicy& policy) -> Status {
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
                for (const std::string& h : o->unpin) {
                  ASSIGN_OR_RETURN(std::string n, sshagent::NormalizeTunnelHost(h));
                  if (policy.host_keys.erase(n) == 0) {
                    return Error(ErrorCode::kNotFound, n + " has no pinned host key in " + o->name,
                                 "see `cloister ssh-policy " + o->name + "`");
                  }
                }
                // A host that is no longer allowed takes its pins with it.
                for (auto it = policy.host_keys.begin(); it != policy.host_keys.end();) {
                  bool allowed = std::find(policy.tunnel_hosts.begin(), policy.tunnel_hosts.end(),
                                           it->first) != policy.tunnel_hosts.end();
                  it = allowed ? std::next(it) : policy.host_keys.erase(it);
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
                return OkStatus();
              }));
      std::unique_ptr<Store>& store = changed.store;
      const sshagent::SshPolicy& policy = changed.policy;
      bool running = AppliesAtNextStart(*store, o->name, lifecycle::Action::kConfigChange);
      nlohmann::json doc = sshagent::SshPolicyToJson(policy);
      doc["host_keys"] = nlohmann::json::object();
      for (const auto& [host, keys] : policy.host_keys) {
        nlohmann::json list = nlohmann::json::array();
        for (const std::string& line : keys) {
          auto blob = sshagent::HostKeyBlobFromLine(line);
          list.push_back({{"key", line},
                          {"fingerprint", blob.ok() ? sshagent::HostKeyFingerprint(*blob) : ""}});
        }
        doc["host_keys"][host] = list;
      }
      PrintPolicy(cli, o->name, o->json, std::move(doc), [&] {
        cli.out() << "confirm each signature: " << (policy.confirm ? "on" : "off") << "\n"
                  << "ssh tunnel hosts: "
                  << (policy.tunnel_hosts.empty() ? "(none: ssh out of the guest is off)"
                                                  : Join(policy.tunnel_hosts, ", "))
                  << "\n"
                  << "ssh tunnel ports: " << JoinPorts(policy.tunnel_ports) << "\n";
        if (policy.host_keys.empty()) {
          cli.out() << "pinned host keys: (none yet: a host's keys are pinned at its first login)\n";
        } else {
          cli.out() << "pinned host keys:\n";
          for (const auto& [host, keys] : policy.host_keys) {
            for (const std::string& line : keys) {
              auto blob = sshagent::HostKeyBlobFromLine(line);
              cli.out() << "  " << host << "  " << line.substr(0, line.find(' ')) << " "
                        << (blob.ok() ? sshagent::HostKeyFingerprint(*blob) : "(unreadable)") << "\n";
            }
          }
        }
      }, settings && running);
      if (!o->json && policy.confirm) {
        cli.err() << "cloister: run `cloister ssh-confirm " << o->name
                  << "` in a terminal to answer; with nobody answering, every signature is "
                     "refused\n";
      }
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

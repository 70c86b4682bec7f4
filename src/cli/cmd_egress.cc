// cloister egress NAME [--allow HOST[:PORT]]... [--remove HOST[:PORT]]... [--allow-all]
//                      [--allowlist] [--reset] [--json]
// Shows or changes the workspace's egress policy (proxy/policy.h, config.json "egress"): which
// host:port the guest may reach through the egress proxy, in proxy mode and transparent mode
// alike, and where opaque (uninspected) tunnels are allowed. Changes apply at the next start or
// reboot of the VM.
#include <algorithm>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/lifecycle_check.h"
#include "cli/policy_verb.h"
#include "cli/store_verbs.h"
#include "proxy/policy.h"

namespace cloister::cli {

void AddEgressCommand(CLI::App& app, Cli& cli) {
  struct Opts {
    std::string name;
    std::vector<std::string> allow, remove;
    bool allow_all = false, allowlist = false, reset = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "egress",
      "Show or change where the workspace's guest may connect (every outbound TCP connection, "
      "proxy-aware or not, goes through the egress proxy; applies at the next start or reboot)");
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_option("--allow", o->allow,
                  "Allow HOST[:PORT] (exact name, *.suffix for its subdomains, or an IPv4 "
                  "address; no port: any port). Switches to allowlist mode unless --allow-all is "
                  "also given. An entry with a port other than 80/443 also allows an opaque "
                  "(uninspected) tunnel there, for protocols that are neither TLS nor HTTP. "
                  "Private addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) are "
                  "reached only for destinations an entry names; the host itself, loopback, "
                  "link-local and cloud metadata never (repeatable)");
  cmd->add_option("--remove", o->remove, "Remove an entry, as listed (repeatable)");
  auto* all = cmd->add_flag("--allow-all", o->allow_all,
                            "Allow every destination (the default); entries with ports still "
                            "open their opaque tunnels");
  auto* list = cmd->add_flag("--allowlist", o->allowlist,
                             "Allow only the listed destinations (with no entries: nothing)");
  all->excludes(list);
  cmd->add_flag("--reset", o->reset, "Back to the defaults (allow all, no entries)");
  cmd->add_flag("--json", o->json, "Print as JSON");
  cmd->callback([&cli, o] {
    auto run = [&]() -> Status {
      bool change = o->reset || o->allow_all || o->allowlist || !o->allow.empty() ||
                    !o->remove.empty();
      ASSIGN_OR_RETURN(
          PolicyChange<proxy::EgressPolicy> changed,
          ChangePolicy<proxy::EgressPolicy>(
              cli, proxy::EgressPolicySection(), o->name, o->reset, change,
              [&](proxy::EgressPolicy& policy) -> Status {
                for (const std::string& text : o->remove) {
                  ASSIGN_OR_RETURN(proxy::EgressRule r, proxy::ParseEgressRule(text));
                  auto it = std::find(policy.allow.begin(), policy.allow.end(), r);
                  if (it == policy.allow.end()) {
                    return Error(ErrorCode::kNotFound,
                                 r.ToString() + " is not an egress entry of " + o->name,
                                 "see `cloister egress " + o->name + "`");
                  }
                  policy.allow.erase(it);
                }
                for (const std::string& text : o->allow) {
                  ASSIGN_OR_RETURN(proxy::EgressRule r, proxy::ParseEgressRule(text));
                  if (std::find(policy.allow.begin(), policy.allow.end(), r) == policy.allow.end()) {
                    policy.allow.push_back(r);
                  }
                }
                if (!o->allow.empty() || o->allowlist) policy.allow_all = false;
                if (o->allow_all) policy.allow_all = true;
                return OkStatus();
              }));
      std::unique_ptr<Store>& store = changed.store;
      const proxy::EgressPolicy& policy = changed.policy;
      bool running = AppliesAtNextStart(*store, o->name, lifecycle::Action::kConfigChange);
      nlohmann::json doc = proxy::EgressPolicyToJson(policy);
      nlohmann::json opaque = nlohmann::json::array();
      for (const proxy::EgressRule& r : policy.allow) {
        if (r.port != 0 && r.port != 80 && r.port != 443) opaque.push_back(r.ToString());
      }
      doc["opaque_tunnels"] = opaque;
      PrintPolicy(cli, o->name, o->json, std::move(doc), [&] {
        cli.out() << "egress: "
                  << (policy.allow_all ? "every destination is allowed"
                                       : "only the entries below are allowed")
                  << "\n";
        if (policy.allow.empty()) {
          cli.out() << "entries: (none)\n";
        } else {
          cli.out() << "entries:\n";
          for (const proxy::EgressRule& r : policy.allow) {
            cli.out() << "  " << r.ToString();
            if (r.port != 0 && r.port != 80 && r.port != 443) cli.out() << "  (opaque tunnel allowed)";
            cli.out() << "\n";
          }
        }
      }, change && running);
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

// The scaffolding the policy verbs share (`cloister egress`, `cloister ssh-policy`; issue 14 ask
// 5): each shows or changes one config section (store/config_section.h) of a workspace.
//
//   ChangePolicy: load the stored value (a damaged one is an error unless --reset, which replaces
//                 it), start from the defaults on --reset, apply the verb's edits (which validate
//                 and may refuse: then nothing is written), and write it under the config lock when
//                 anything was asked to change (a running VM keeps its boot's policy).
//   PrintPolicy:  --json: the verb's document plus "workspace" and "applies_at_next_start"; text:
//                 the verb's lines, then the note that a running workspace applies the change at
//                 its next start.
// The verb itself decides whether the workspace is running (its own State() check), prints, and
// adds what only it says.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "cli/cli.h"
#include "cli/store_verbs.h"
#include "store/config_section.h"

namespace cloister::cli {

template <class T>
struct PolicyChange {
  std::unique_ptr<Store> store;
  T policy;
};

template <class T>
Result<PolicyChange<T>> ChangePolicy(Cli& cli, const ConfigSection<T>& section, const std::string& name,
                                     bool reset, bool change, const std::function<Status(T&)>& edit) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(cli));
  ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(name));
  Result<T> stored = LoadConfigSection(section, config);
  // A damaged policy can always be replaced by --reset.
  if (!stored.ok() && !reset) return stored.error();
  T policy = stored.ok() ? *stored : T{};
  if (reset) policy = T{};
  RETURN_IF_ERROR(edit(policy));
  RETURN_IF_ERROR(section.validate(policy));
  if (change) {
    // A settings change: the config lock is enough (a running VM keeps its boot's policy).
    RETURN_IF_ERROR(store->UpdateConfig(name, [&](WorkspaceConfig& c) {
      return PutConfigSection(section, c, policy);
    }));
  }
  return PolicyChange<T>{std::move(store), std::move(policy)};
}

inline void PrintPolicy(Cli& cli, const std::string& name, bool json, nlohmann::json doc,
                        const std::function<void()>& text, bool changed_while_running) {
  if (json) {
    doc["workspace"] = name;
    doc["applies_at_next_start"] = changed_while_running;
    cli.PrintJson(doc);
    return;
  }
  text();
  if (changed_while_running) {
    cli.err() << "cloister: " << name << " is running; the change applies at its next "
              << "start (`cloister reboot " << name << "`)\n";
  }
}

}  // namespace cloister::cli

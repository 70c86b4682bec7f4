// What the dashboard shows and does, behind one interface. The CLI implements it (cli/cmd_ui.cc)
// with the very calls its verbs make, so the page and `cloister ls --json` cannot disagree; tests
// of the server use a fake.
//
// Thread safety: the server calls a Backend from several connection threads at once; an
// implementation serialises what must be (the CLI's backend runs one action at a time).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "ui/request.h"

namespace cloister::ui {

class Backend {
 public:
  virtual ~Backend() = default;
  // `cloister ls --json`: an array of workspaces.
  virtual Result<nlohmann::json> ListWorkspaces() = 0;
  // `cloister describe NAME --json`.
  virtual Result<nlohmann::json> DescribeWorkspace(const std::string& name) = 0;
  // The workspace's trace.jsonl (the proxy appends whole lines; the server only reads it).
  virtual Result<std::string> TracePath(const std::string& name) = 0;
  // The confirmation the CLI asks before `action` (the same text, from the same function);
  // "" for an action the CLI does not ask about.
  virtual Result<std::string> ConfirmText(const std::string& name, Action action,
                                          const std::string& checkpoint) = 0;
  // Runs the verb; returns what the CLI would print on success.
  virtual Result<std::string> Run(const std::string& name, Action action,
                                  const std::string& checkpoint) = 0;
  // `cloister audit residue NAME --json` (the VM must be running): the report as JSON.
  virtual Result<nlohmann::json> RunAudit(const std::string& name) = 0;
  // The control sockets of the workspaces that may ask for consent now (running ones), by
  // workspace: the dashboard keeps a consent listener on each (ui/consent.h).
  virtual std::map<std::string, std::string> ControlSockets() = 0;
};

}  // namespace cloister::ui

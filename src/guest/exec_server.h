// Guest side of exec: serves one `exec` stream (see channel/exec_proto.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "guest/users.h"

namespace cloister::guest {

struct ExecServerOptions {
  // The per-boot environment (config.json "env"), under the request's own env.
  std::map<std::string, std::string> base_env;
  std::string passwd_path = "/etc/passwd";
  std::string group_path = "/etc/group";
  // Switch to the requested user (the agent runs as root). Unit tests running unprivileged
  // turn this off and run as themselves.
  bool switch_user = true;
};

// Reads the request, runs the command, relays stdin/stdout/stderr, resize and signals, and
// finishes with EXIT (or ERROR). Blocking: run it on its own thread. Closes `fd`.
void ServeExec(int fd, const ExecServerOptions& options);

// The environment a guest command gets: HOME USER LOGNAME SHELL PATH [TERM], then base_env,
// then `extra` (later entries win).
std::vector<std::string> CommandEnv(const UserInfo& user, const std::map<std::string, std::string>& base_env,
                                    const std::map<std::string, std::string>& extra,
                                    const std::string& term);

}  // namespace cloister::guest

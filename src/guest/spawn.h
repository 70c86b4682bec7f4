// Starting guest processes as a given user, with pipes or a pty. Used by the exec server, the
// ready check (a login shell in a pty) and the tmux session. Everything that allocates is done
// before fork(); the child only calls async-signal-safe functions.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "guest/users.h"

namespace cloister::guest {

struct SpawnSpec {
  std::vector<std::string> argv;      // argv[0] is looked up in PATH from `env` unless it has '/'
  std::string argv0;                  // if set, passed as argv[0] instead (e.g. "-sh" for login)
  std::vector<std::string> env;       // the complete environment, "K=V"
  std::string cwd;                    // empty: "/"
  std::optional<UserInfo> user;       // switch to this user (needs root); nullopt: stay
  bool tty = false;                   // a new pty as stdin/stdout/stderr and controlling tty
  uint16_t rows = 24;
  uint16_t cols = 80;
  bool stdin_null = false;            // no stdin pipe: /dev/null (pipes mode only)
};

struct Spawned {
  pid_t pid = -1;
  int pidfd = -1;    // readable when the child exits (-1 if pidfd_open is unavailable)
  int master = -1;   // tty mode: the pty master (read output, write input)
  int in = -1;       // pipes mode: child's stdin (write end)
  int out = -1;      // pipes mode: child's stdout (read end)
  int err = -1;      // pipes mode: child's stderr (read end)
};

// Errors before the child runs: kNotFound "command not found" (exit 127 convention),
// kPermissionDenied (126), others for chdir / user switch / pty failures. All fds returned are
// close-on-exec and non-blocking.
Result<Spawned> Spawn(const SpawnSpec& spec);

// Finds `name` in the PATH of `env` (or the default PATH).
std::optional<std::string> FindInPath(const std::string& name, const std::vector<std::string>& env);

// The default PATH for guest commands. Its last entry holds cloister's static busybox applets in
// images built from OCI sources (image/oci/finish.h), so `cp` (tar) and power-off work on an image
// that has none of its own; the image's own tools come first. Absent in the other images.
inline constexpr char kDefaultPath[] =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/cloister/bin";

}  // namespace cloister::guest

// Driving a cloister on another machine over SSH, as `DOCKER_HOST=ssh://...` does for Docker.
//
// Selection (first that applies): `--host ssh://[USER@]HOST[:PORT]` or `--context NAME` before the
// verb, `$CLOISTER_HOST`, `$CLOISTER_CONTEXT`, the current context of
// `$XDG_CONFIG_HOME/cloister/contexts.json` (`cloister context use`). The context "default" (or
// none) is this machine. Verbs that are about this machine (`context`, `completion`,
// `ls --all-contexts`) always run here.
//
// Transport: the user's own OpenSSH client (their ~/.ssh/config, agent, known_hosts; cloister has
// no SSH code of its own) runs, on the remote,
//     cloister _remote PROTOCOL VERSION -- ARGS...
// with every argument single-quoted for the remote shell (a POSIX shell: sh, bash, zsh, dash).
// The remote refuses a client of another protocol or version with both versions and the fix, and
// otherwise runs ARGS as if typed there. stdin, stdout and stderr are ssh's, so a secret given to
// `cred add` on stdin crosses only as data on the SSH channel: never in an argv, an environment
// or a temporary file on either side. With a terminal on both stdin and stdout, ssh gets `-t`:
// `exec -t`, `attach`, prompts and confirmations run on the remote's pty, shown on the local
// terminal, and ssh carries window changes and Ctrl-C. The exit code is the remote verb's; ssh's
// own failure (255) is reported as a lost or failed connection.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::cli {

struct RemoteTarget {
  std::string context;    // "" when given by --host or $CLOISTER_HOST
  std::string user;       // "" = ssh's default
  std::string host;
  std::string port;       // "" = ssh's default
  std::string cloister = "cloister";  // the remote's command (a context may name a path)
  std::string url() const;
};

// Parses "ssh://[USER@]HOST[:PORT]" (HOST may be [v6]); anything else is an error with the form.
Result<RemoteTarget> ParseRemoteUrl(const std::string& url);

// The contexts file: {"current": NAME, "contexts": {NAME: {"host": URL, "cloister": CMD}}}.
std::string ContextsPath();
Result<nlohmann::json> LoadContexts();
Status SaveContexts(const nlohmann::json& doc);  // atomic, 0600

// What main() does with argv: nullopt = run here; a target = strip the selection flags (into
// *rest, argv[0] excluded) and run remotely. An unknown context or a bad URL is an error.
Result<std::optional<RemoteTarget>> SelectRemote(int argc, const char* const* argv,
                                                 std::vector<std::string>* rest);

// The ssh client command: $CLOISTER_SSH_COMMAND split on white space (like GIT_SSH_COMMAND,
// without a shell; e.g. "ssh -F ~/.ssh/other_config"), else "ssh".
std::vector<std::string> SshCommand();

// ssh's argv for `args` on `target` (tty: request a pty).
std::vector<std::string> RemoteSshArgv(const RemoteTarget& target,
                                       const std::vector<std::string>& args, bool tty);

// Single-quotes `word` for a POSIX shell.
std::string ShellQuote(const std::string& word);

// Runs `args` on the remote with this process's stdio; returns the exit code to exit with.
int RunRemote(const RemoteTarget& target, const std::vector<std::string>& args);

// The remote side's check of a client: OK or the refusal naming both versions.
Status CheckRemoteClient(const std::string& protocol, const std::string& version);

// What main() runs for a remote: the verbs that need a local end (cp, port, create/run -p, run
// --auto-ports, ssh, ssh-config, stop/rm's tunnels; cli/remote_verbs.cc) get it, every other verb is RunRemote. `args` as SelectRemote left it.
int RunRemoteVerb(const RemoteTarget& target, const std::vector<std::string>& args);

// Starts ssh for `args` on `target` (a pty only with `tty`) with `in_fd`/`out_fd` as its
// stdin/stdout (-1: this process's) and this process's stderr; returns its pid.
Result<pid_t> SpawnRemote(const RemoteTarget& target, const std::vector<std::string>& args,
                          int in_fd, int out_fd, bool tty = false);
// Waits for a SpawnRemote child: its exit code (128+signal), a lost connection (255) said on stderr.
int WaitRemote(const RemoteTarget& target, pid_t pid);
// Runs `args` on the remote (no pty) with stdout captured and stderr passed through.
Result<std::string> RemoteOutput(const RemoteTarget& target, const std::vector<std::string>& args,
                                 int* exit_code);

// `cp` against a remote (cmd_cp.cc): `prefix` are the global options before the verb, `args` what
// follows it. Remote -> local: the remote's `cp NAME:PATH -` tar stream on ssh's stdout, extracted
// here under transfer/'s entry policy (SECURITY: the remote and its guest are hostile). Local ->
// remote: a tar written here into ssh's stdin, for the remote's hidden `_cp-in TOP NAME:PATH`.
int RemoteCopy(const RemoteTarget& target, const std::vector<std::string>& prefix,
               const std::vector<std::string>& args);

// SECURITY: a host key pin line from a remote's `_ssh-material`, for a known_hosts file here: it
// must be exactly "NAME.cloister ssh-ed25519 BASE64" (one line; no marker such as @cert-authority,
// no pattern, no second host). Returns the trimmed line, or kCorrupt. Fuzzed (remote_pin).
Result<std::string> CheckRemotePinLine(const std::string& name, const std::string& text);

// SECURITY: the forwards of a remote's `port NAME ls --json` answer (hostile bytes), which `run -p`
// / `--auto-ports` through a remote turn into tunnels here: only entries whose host_port (the
// remote's loopback port) and guest_port are JSON integers in 1..65535 and whose origin is a
// string; everything else is skipped. Fuzzed (remote_forwards).
struct RemoteForward {
  int remote_port = 0;
  int guest_port = 0;
  std::string origin;  // "config", "added", "auto" (supervisor/ports.h), or whatever was sent
};
std::vector<RemoteForward> ParseRemoteForwards(const nlohmann::json& answer);

// The port a remote forward asks for on THIS machine's loopback: a -p's HOST_PORT as the user
// wrote it (`spec_port`; 0: any free one); anything else, an automatic forward above all, 0: a
// port this machine picks. SECURITY: never the remote's number, which follows the guest's choice
// (a guest that listens on 5432 must not receive what local clients send to 5432, issue 37).
int LocalPortFor(const RemoteForward& forward, int spec_port);

// A short file-name-safe id of a target ("root@127.0.0.1_2222").
std::string TargetId(const RemoteTarget& target);

}  // namespace cloister::cli

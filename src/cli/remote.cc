#include "cli/remote.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/file_util.h"
#include "base/json_util.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "cli/version.h"
#include "sshagent/ide_keys.h"

namespace cloister::cli {

namespace {

bool ValidHostChars(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':';
    if (!ok) return false;
  }
  return s[0] != '-';  // never an ssh option
}

bool ValidUser(const std::string& s) {
  if (s.empty() || s.size() > 64 || s[0] == '-') return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// Verbs about this machine: never forwarded.
bool LocalOnly(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--all-contexts") return true;
    if (a == "--") break;
  }
  for (const std::string& a : args) {
    if (a.empty() || a[0] == '-') continue;
    return a == "context" || a == "completion";
  }
  return true;  // no verb (--help, --version): this machine's help
}

}  // namespace

std::string RemoteTarget::url() const {
  std::string u = "ssh://";
  if (!user.empty()) u += user + "@";
  u += host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (!port.empty()) u += ":" + port;
  return u;
}

Result<RemoteTarget> ParseRemoteUrl(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "bad remote host '" + url + "': " + why,
                 "give ssh://[USER@]HOST[:PORT], e.g. ssh://dev@buildbox or ssh://buildbox:2222");
  };
  const std::string scheme = "ssh://";
  if (url.rfind(scheme, 0) != 0) return bad("only ssh:// is supported");
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  RemoteTarget t;
  if (auto at = rest.find('@'); at != std::string::npos) {
    t.user = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (!ValidUser(t.user)) return bad("the user name");
  }
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos) return bad("an unclosed [");
    t.host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return bad("text after ]");
      t.port = rest.substr(1);
    }
  } else if (auto colon = rest.find(':'); colon != std::string::npos) {
    t.host = rest.substr(0, colon);
    t.port = rest.substr(colon + 1);
  } else {
    t.host = rest;
  }
  if (!ValidHostChars(t.host)) return bad("the host name");
  if (!t.port.empty()) {
    if (t.port.size() > 5 || t.port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(t.port) == 0 || std::stoul(t.port) > 65535) {
      return bad("the port");
    }
  }
  return t;
}

std::string ContextsPath() {
  std::string base;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) {
    base = x;
  } else {
    const char* home = std::getenv("HOME");
    base = std::string(home && *home ? home : "/root") + "/.config";
  }
  return base + "/cloister/contexts.json";
}

Result<nlohmann::json> LoadContexts() {
  std::ifstream in(ContextsPath());
  if (!in) return nlohmann::json{{"current", "default"}, {"contexts", nlohmann::json::object()}};
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.value("contexts", nlohmann::json()).is_object()) {
    return Error(ErrorCode::kCorrupt, ContextsPath() + " is not a contexts file",
                 "fix or delete it (cloister context add recreates it)");
  }
  if (!doc.contains("current") || !doc["current"].is_string()) doc["current"] = "default";
  return doc;
}

Status SaveContexts(const nlohmann::json& doc) {
  std::filesystem::path p = ContextsPath();
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return Error(ErrorCode::kIo, "cannot create " + p.parent_path().string() + ": " + ec.message());
  return WriteFileAtomic(p.string(), doc.dump(2) + "\n", 0600);
}

namespace {

Result<RemoteTarget> FromContext(const std::string& name) {
  ASSIGN_OR_RETURN(nlohmann::json doc, LoadContexts());
  const auto& ctxs = doc["contexts"];
  if (!ctxs.contains(name) || !ctxs[name].is_object()) {
    return Error(ErrorCode::kNotFound, "no context '" + name + "'",
                 "see cloister context ls; add one with cloister context add NAME ssh://HOST");
  }
  ASSIGN_OR_RETURN(RemoteTarget t, ParseRemoteUrl(ctxs[name].value("host", "")));
  t.context = name;
  std::string cmd = ctxs[name].value("cloister", "");
  if (!cmd.empty()) t.cloister = cmd;
  return t;
}

}  // namespace

Result<std::optional<RemoteTarget>> SelectRemote(int argc, const char* const* argv,
                                                 std::vector<std::string>* rest) {
  std::optional<std::string> host, context;
  rest->clear();
  bool verb_seen = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (!verb_seen && (a == "--host" || a == "--context") && i + 1 < argc) {
      (a == "--host" ? host : context) = argv[++i];
      continue;
    }
    if (!verb_seen && a.rfind("--host=", 0) == 0) {
      host = a.substr(7);
      continue;
    }
    if (!verb_seen && a.rfind("--context=", 0) == 0) {
      context = a.substr(10);
      continue;
    }
    if (!verb_seen && a == "--store" && i + 1 < argc) {  // an option with a value: not the verb
      rest->push_back(a);
      rest->push_back(argv[++i]);
      continue;
    }
    if (!a.empty() && a[0] != '-') verb_seen = true;
    rest->push_back(a);
  }
  if (LocalOnly(*rest)) {
    if (host || context) {
      // `--host X context ls` makes no sense; `--host X ls --all-contexts` neither.
      return Error(ErrorCode::kInvalidArgument, "this verb is about this machine: drop --host/--context");
    }
    return std::optional<RemoteTarget>();
  }
  if (host) {
    ASSIGN_OR_RETURN(RemoteTarget t, ParseRemoteUrl(*host));
    return std::optional<RemoteTarget>(t);
  }
  if (!context) {
    if (const char* h = std::getenv("CLOISTER_HOST"); h && *h) {
      ASSIGN_OR_RETURN(RemoteTarget t, ParseRemoteUrl(h));
      return std::optional<RemoteTarget>(t);
    }
    if (const char* c = std::getenv("CLOISTER_CONTEXT"); c && *c) context = c;
  }
  if (!context) {
    ASSIGN_OR_RETURN(nlohmann::json doc, LoadContexts());
    context = doc.value("current", "default");
  }
  if (*context == "default" || context->empty()) return std::optional<RemoteTarget>();
  ASSIGN_OR_RETURN(RemoteTarget t, FromContext(*context));
  return std::optional<RemoteTarget>(t);
}

std::string ShellQuote(const std::string& word) {
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

std::vector<std::string> SshCommand() {
  std::vector<std::string> words;
  if (const char* c = std::getenv("CLOISTER_SSH_COMMAND"); c && *c) {
    std::istringstream in(c);
    for (std::string w; in >> w;) words.push_back(w);
  }
  if (words.empty()) words.push_back("ssh");
  return words;
}

std::vector<std::string> RemoteSshArgv(const RemoteTarget& t, const std::vector<std::string>& args,
                                       bool tty) {
  // The remote cloister needs neither the user's agent nor X11: never forwarded, whatever the
  // user's ssh config says for that host.
  std::vector<std::string> argv = SshCommand();
  argv.insert(argv.end(), {tty ? "-t" : "-T", "-o", "ForwardAgent=no", "-o", "ForwardX11=no"});
  if (!t.port.empty()) {
    argv.push_back("-p");
    argv.push_back(t.port);
  }
  if (!t.user.empty()) {
    argv.push_back("-l");
    argv.push_back(t.user);
  }
  argv.push_back("--");
  argv.push_back(t.host);
  std::string cmd = ShellQuote(t.cloister) + " _remote " + std::to_string(kRemoteProtocolVersion) +
                    " " + ShellQuote(kCloisterVersion) + " --";
  for (const std::string& a : args) cmd += " " + ShellQuote(a);
  argv.push_back(cmd);
  return argv;
}

namespace {

[[noreturn]] void ExecSsh(std::vector<std::string> argv) {
  signal(SIGINT, SIG_DFL);
  signal(SIGQUIT, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execvp(cargv[0], cargv.data());
  std::cerr << "cloister: error: cannot run ssh: " << std::strerror(errno)
            << "\nHint: install OpenSSH's client (Debian: openssh-client)\n";
  _exit(127);
}

void SayLost(const RemoteTarget& t) {
  std::cerr << "cloister: error: the SSH connection to " << t.url()
            << " failed or was lost (ssh exited 255, which is also what a remote command that "
               "exits 255 gives); what ran on the remote stays as it was\n"
            << "Hint: check `ssh " << (t.port.empty() ? "" : "-p " + t.port + " ")
            << (t.user.empty() ? "" : t.user + "@") << t.host
            << " true`; cloister status there with `cloister --host " << t.url() << " ls`\n";
}

int ExitCodeOf(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace

int RunRemote(const RemoteTarget& t, const std::vector<std::string>& args) {
  bool tty = isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1;
  std::vector<std::string> argv = RemoteSshArgv(t, args, tty);
  // While ssh runs, a Ctrl-C or a hangup is ssh's to handle (it forwards it on a pty, or ends the
  // session); this process only waits and reports.
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  std::cout << std::flush;
  pid_t pid = fork();
  if (pid < 0) {
    std::cerr << "cloister: error: cannot start ssh: " << std::strerror(errno) << "\n";
    return 1;
  }
  if (pid == 0) {
    CloexecFrom(3);
    ExecSsh(argv);
  }
  return WaitRemote(t, pid);
}

Result<pid_t> SpawnRemote(const RemoteTarget& t, const std::vector<std::string>& args, int in_fd,
                          int out_fd, bool tty) {
  std::vector<std::string> argv = RemoteSshArgv(t, args, tty);
  std::cout << std::flush;
  pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    if (in_fd >= 0 && in_fd != STDIN_FILENO) dup2(in_fd, STDIN_FILENO);
    if (out_fd >= 0 && out_fd != STDOUT_FILENO) dup2(out_fd, STDOUT_FILENO);
    CloexecFrom(3);
    ExecSsh(argv);
  }
  return pid;
}

int WaitRemote(const RemoteTarget& t, pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  int code = ExitCodeOf(status);
  if (WIFEXITED(status) && code == 255) SayLost(t);
  return code;
}

Result<std::string> RemoteOutput(const RemoteTarget& t, const std::vector<std::string>& args,
                                 int* exit_code) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto pid = SpawnRemote(t, args, null_in, fds[1]);
  close(fds[1]);
  if (null_in >= 0) close(null_in);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.error();
  }
  // SECURITY: what a remote prints is bounded here (it is JSON for this side to parse).
  std::string out = DrainFdBounded(fds[0], (16u << 20));
  close(fds[0]);
  *exit_code = WaitRemote(t, *pid);
  return out;
}

Result<std::string> CheckRemotePinLine(const std::string& name, const std::string& text) {
  if (text.size() > 512) return Error(ErrorCode::kCorrupt, "the remote's host key pin is too long");
  std::string line = Trim(text);
  std::vector<std::string> words = Split(line, ' ');
  bool ok = words.size() == 3 && words[0] == name + sshagent::kSshHostSuffix &&
            words[1] == "ssh-ed25519" && !words[2].empty() && words[2].size() < 200;
  for (char c : ok ? words[2] : std::string()) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') ok = false;
  }
  if (!ok) {
    return Error(ErrorCode::kCorrupt, "the remote's host key pin for " + name + " is not one ed25519 key",
                 "run `cloister ssh-config " + name + "` on the remote host and check its output");
  }
  return line;
}

namespace {
int PortField(const nlohmann::json& obj, const char* key) {
  int v = JsonInt<int>(obj, key, 0);  // an integer that fits, never a float or a string
  return v >= 1 && v <= 65535 ? v : 0;
}
}  // namespace

int LocalPortFor(const RemoteForward& forward, int spec_port) {
  return forward.origin == "config" ? spec_port : 0;
}

std::vector<RemoteForward> ParseRemoteForwards(const nlohmann::json& answer) {
  std::vector<RemoteForward> out;
  if (!answer.is_object()) return out;
  auto ports = answer.find("ports");
  if (ports == answer.end() || !ports->is_array()) return out;
  for (const nlohmann::json& p : *ports) {
    if (out.size() >= 4096) break;  // far more than any supervisor publishes
    if (!p.is_object()) continue;
    RemoteForward f;
    f.remote_port = PortField(p, "host_port");
    f.guest_port = PortField(p, "guest_port");
    auto origin = p.find("origin");
    if (!f.remote_port || !f.guest_port || origin == p.end() || !origin->is_string()) continue;
    f.origin = origin->get<std::string>();
    out.push_back(std::move(f));
  }
  return out;
}

std::string TargetId(const RemoteTarget& t) {
  std::string id = (t.user.empty() ? "" : t.user + "@") + t.host + (t.port.empty() ? "" : "_" + t.port);
  for (char& c : id) {
    if (c == ':' || c == '/') c = '_';
  }
  return id;
}

Status CheckRemoteClient(const std::string& protocol, const std::string& version) {
  if (protocol == std::to_string(kRemoteProtocolVersion) && version == kCloisterVersion) {
    return OkStatus();
  }
  return Error(ErrorCode::kFailedPrecondition,
               "this remote runs cloister " + std::string(kCloisterVersion) + " (remote protocol " +
                   std::to_string(kRemoteProtocolVersion) + "); the local cloister is " + version +
                   " (remote protocol " + protocol + ")",
               "install the same cloister version on both machines");
}

}  // namespace cloister::cli

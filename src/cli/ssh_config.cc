#include "cli/ssh_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file_util.h"
#include "base/strings.h"
#include "protocol/contract.h"
#include "sshagent/ide_keys.h"

namespace cloister::cli {
namespace {

Status CheckWritable(const std::string& what, const std::string& value) {
  for (char c : value) {
    if (c == '"' || c == '\n' || c == '\r' || c == '\0') {
      return Error(ErrorCode::kInvalidArgument,
                   what + " '" + value + "' holds a character ssh_config cannot quote",
                   "use a store path (--store / CLOISTER_HOME) without quotes or newlines");
    }
  }
  if (value.find("${") != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, what + " '" + value + "' holds '${', which ssh expands",
                 "use a store path without '${'");
  }
  return OkStatus();
}

// ssh expands %-tokens in these values: a literal % is %%.
std::string EscapePercent(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

// A path as one ssh_config argument.
std::string ConfigQuote(const std::string& s) { return "\"" + EscapePercent(s) + "\""; }

// A word for /bin/sh, which runs ProxyCommand (`exec ...`).
std::string ShellWord(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return EscapePercent(out + "'");
}

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> SshHostOptions(const SshHostSpec& s) {
  RETURN_IF_ERROR(CheckWritable("the cloister binary path", s.cloister));
  RETURN_IF_ERROR(CheckWritable("the store root", s.store_root));
  RETURN_IF_ERROR(CheckWritable("the client key path", s.identity));
  RETURN_IF_ERROR(CheckWritable("the known_hosts path", s.known_hosts));
  std::string proxy;
  if (!s.proxy_argv.empty()) {
    for (const std::string& w : s.proxy_argv) {
      RETURN_IF_ERROR(CheckWritable("the ProxyCommand word", w));
      proxy += (proxy.empty() ? "" : " ") + ShellWord(w);
    }
  } else {
    proxy = ShellWord(s.cloister);
    if (!s.store_root.empty()) proxy += " --store " + ShellWord(s.store_root);
    proxy += " _ssh-stdio " + ShellWord(s.name);
  }
  std::string host = s.name + sshagent::kSshHostSuffix;
  return std::vector<std::pair<std::string, std::string>>{
      {"User", protocol::kGuestUser},
      {"ProxyCommand", proxy},
      {"IdentityFile", ConfigQuote(s.identity)},
      {"IdentitiesOnly", "yes"},
      {"UserKnownHostsFile", ConfigQuote(s.known_hosts)},
      {"GlobalKnownHostsFile", "none"},
      {"HostKeyAlias", host},
      {"StrictHostKeyChecking", "yes"},
      {"UpdateHostKeys", "no"},
      // SECURITY: the user's own agent never goes to the guest (the guest's sshd refuses it too
      // and sets SSH_AUTH_SOCK to the workspace's sign-only agent).
      {"ForwardAgent", "no"},
      {"ForwardX11", "no"},
  };
}

Result<std::string> SshHostBlock(const SshHostSpec& spec) {
  ASSIGN_OR_RETURN(auto options, SshHostOptions(spec));
  std::string out = "# cloister workspace " + spec.name + " (`cloister ssh-config " + spec.name +
                    "`; the host key is pinned in its known_hosts file)\n";
  out += "Host " + spec.name + sshagent::kSshHostSuffix + "\n";
  for (const auto& [k, v] : options) out += "  " + k + " " + v + "\n";
  return out;
}

std::vector<std::string> SshConfigHosts(const std::string& text) {
  std::vector<std::string> names;
  const std::string suffix = sshagent::kSshHostSuffix;
  for (const std::string& raw : Split(text, '\n')) {
    std::string line = Trim(raw);
    if (!StartsWith(line, "Host ")) continue;
    std::string host = Trim(line.substr(5));
    if (host.size() > suffix.size() && host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) {
      names.push_back(host.substr(0, host.size() - suffix.size()));
    }
  }
  return names;
}

std::string SshIncludeLine(const std::string& path) { return "Include " + ConfigQuote(path); }

std::pair<std::string, bool> WithSshInclude(const std::string& config, const std::string& include) {
  for (const std::string& line : Split(config, '\n')) {
    if (Trim(line) == include) return {config, false};
  }
  std::string out = "# Added by `cloister ssh-config --install` (workspaces as NAME.cloister).\n" +
                    include + "\n\n" + config;
  return {out, true};
}

Result<bool> InstallSshInclude(const std::string& ssh_config, const std::string& path) {
  namespace fs = std::filesystem;
  std::string target = ssh_config;
  std::error_code ec;
  if (fs::is_symlink(ssh_config, ec)) {
    fs::path resolved = fs::canonical(ssh_config, ec);
    if (ec) {
      return Error(ErrorCode::kNotFound, ssh_config + " is a dangling symlink",
                   "fix the link or remove it, then run `cloister ssh-config --install` again");
    }
    target = resolved.string();
  }
  std::string dir = fs::path(target).parent_path().string();
  if (!fs::exists(dir, ec)) {
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir, errno);
  }
  std::string current;
  mode_t mode = 0600;
  struct stat st{};
  if (stat(target.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
    std::ifstream in(target);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in && !in.eof()) return Error(ErrorCode::kIo, "cannot read " + target);
    current = ss.str();
  } else if (errno != ENOENT) {
    return ErrnoError("stat " + target, errno);
  }
  auto [text, changed] = WithSshInclude(current, SshIncludeLine(path));
  if (!changed) return false;
  RETURN_IF_ERROR(WriteFileAtomic(target, text, mode));
  return true;
}

}  // namespace cloister::cli

#include "transfer/git_import.h"

#include <fcntl.h>
#include <unistd.h>

#include "base/terminal_text.h"
#include "transfer/git_bundle.h"

namespace cloister::transfer {
namespace {

Error GitFailed(const std::string& what, const RunOutput& out) {
  std::string err = TerminalSafe(out.err.substr(0, 2048), true);
  while (!err.empty() && err.back() == '\n') err.pop_back();
  return Error(ErrorCode::kFailedPrecondition, what + " failed" + (err.empty() ? "" : ": " + err),
               "nothing was changed in the host repository");
}

// The first kMaxBundleHeader bytes of the bundle (less if it is shorter).
Result<std::string> ReadHead(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoError("open " + path, errno);
  std::string head(kMaxBundleHeader, '\0');
  size_t got = 0;
  while (got < head.size()) {
    ssize_t n = read(fd, head.data() + got, head.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return ErrnoError("read " + path, e);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  head.resize(got);
  return head;
}

}  // namespace

Result<RunOutput> HostGit(const std::string& repo, const std::vector<std::string>& args) {
  // SECURITY: a clean environment and no hook, fsmonitor or unchecked object (git_import.h).
  std::vector<std::string> argv = {"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C",
                                   "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
                                   "GIT_TERMINAL_PROMPT=0", "GIT_NO_REPLACE_OBJECTS=1",
                                   "git", "-c", "core.hooksPath=/dev/null",
                                   "-c", "core.fsmonitor=false",
                                   "-c", "fetch.fsckObjects=true",
                                   "-c", "transfer.fsckObjects=true",
                                   "-c", "protocol.allow=never", "-c", "protocol.file.allow=always",
                                   "-C", repo};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions o;
  o.timeout = std::chrono::minutes(30);
  return RunProcess(argv, o);
}

Result<GitImported> ImportBundle(const GitImport& req) {
  std::string want = "refs/heads/" + req.branch;
  GitImported out;
  out.ref = "refs/heads/cloister/" + req.workspace + "/" + req.branch;
  if (!ValidRefName(want) || !ValidRefName(out.ref)) {
    return Error(ErrorCode::kInvalidArgument, "'" + req.branch + "' is not a valid branch name",
                 "name a branch as git check-ref-format --branch accepts it");
  }
  ASSIGN_OR_RETURN(std::string head, ReadHead(req.bundle_path));
  ASSIGN_OR_RETURN(BundleHeader header, ParseBundleHeader(head));
  RETURN_IF_ERROR(CheckBundleRefs(header, {want}));
  ASSIGN_OR_RETURN(RunOutput toplevel, HostGit(req.host_repo, {"rev-parse", "--git-dir"}));
  if (!toplevel.success()) return GitFailed("finding the repository " + req.host_repo, toplevel);
  ASSIGN_OR_RETURN(RunOutput verify, HostGit(req.host_repo, {"bundle", "verify", "-q",
                                                             req.bundle_path}));
  if (!verify.success()) return GitFailed("git bundle verify", verify);
  ASSIGN_OR_RETURN(RunOutput fetch,
                   HostGit(req.host_repo, {"fetch", "--quiet", "--no-tags",
                                           "--no-write-fetch-head", "--no-recurse-submodules",
                                           req.bundle_path, "+" + want + ":" + out.ref}));
  if (!fetch.success()) return GitFailed("git fetch from the bundle", fetch);
  ASSIGN_OR_RETURN(RunOutput rev, HostGit(req.host_repo, {"rev-parse", "--verify", "-q",
                                                          out.ref + "^{commit}"}));
  if (!rev.success()) return GitFailed("git rev-parse " + out.ref, rev);
  out.oid = rev.out.substr(0, rev.out.find('\n'));
  if (out.oid != header.refs[0].oid) {
    return Error(ErrorCode::kCorrupt, out.ref + " is " + out.oid + ", the bundle said " +
                                          header.refs[0].oid);
  }
  return out;
}

}  // namespace cloister::transfer

// `cloister git pull|push NAME` and `cloister diff NAME`: a workspace's work comes back to the
// host as git commits, not through a writable share.
//
// pull: the guest's git makes a bundle of one branch (`git bundle create -`, run as dev over an
// exec stream, as `cp` runs tar); the host keeps at most transfer::kMaxBundleBytes of it in a
// 0600 temporary file and fetches it into the host repository as
// refs/heads/cloister/NAME/BRANCH with git run as data (transfer/git_import.h: header parsed with
// bounds, only the asked ref, `git bundle verify`, no hooks, no fsmonitor, fsck on, a clean
// environment). push: the host's git makes a bundle of a host branch, the guest clones or
// fetches it (the guest protects itself there). diff: the guest's `git diff` against the commit
// the last push started it from, printed terminal-safe.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "base/terminal_text.h"
#include "cli/commands.h"
#include "cli/git_verbs.h"
#include "cli/guest_run.h"
#include "cli/store_verbs.h"
#include "transfer/git_bundle.h"
#include "transfer/git_import.h"

namespace cloister::cli {
namespace {

// config.json's "git" section: what the last push (or create --from-repo) seeded.
constexpr char kGitConfigKey[] = "git";

struct RepoArgs {
  std::string name;
  std::string guest_repo;  // --repo: the repository in the guest
  std::string host_repo;   // --host-repo: the host repository (default: the current directory's)
  std::string branch;      // --branch (default: the host repository's current branch)
  bool json = false;
};

struct Resolved {
  std::string host_top;
  std::string guest_repo;
  std::string branch;
};

// A temporary 0600 file, removed when this goes out of scope.
struct TempFile {
  std::string path;
  int fd = -1;
  ~TempFile() {
    if (fd >= 0) close(fd);
    if (!path.empty()) unlink(path.c_str());
  }
};

Result<std::unique_ptr<TempFile>> MakeTemp() {
  const char* dir = std::getenv("TMPDIR");
  auto t = std::make_unique<TempFile>();
  std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/cloister-bundle-XXXXXX";
  t->fd = mkstemp(tmpl.data());
  if (t->fd < 0) return ErrnoError("mkstemp " + tmpl, errno);
  t->path = tmpl;
  return t;
}

Result<Resolved> Resolve(Store& store, const RepoArgs& a) {
  Resolved r;
  std::error_code ec;
  std::string host = a.host_repo.empty() ? "." : a.host_repo;
  std::string abs = std::filesystem::absolute(host, ec).lexically_normal().string();
  ASSIGN_OR_RETURN(RunOutput top, transfer::HostGit(abs, {"rev-parse", "--show-toplevel"}));
  if (!top.success()) {
    return Error(ErrorCode::kNotFound, abs + " is not in a git work tree",
                 "run it in your repository, or name it with --host-repo");
  }
  r.host_top = top.out.substr(0, top.out.find('\n'));
  nlohmann::json seeded;
  if (auto c = store.LoadConfig(a.name); c.ok()) {
    auto it = c->extra.find(kGitConfigKey);
    if (it != c->extra.end() && it->is_object()) seeded = *it;
  } else {
    return c.error();
  }
  r.guest_repo = !a.guest_repo.empty() ? a.guest_repo
                 : seeded.is_object() && seeded.value("guest_repo", "") != ""
                     ? seeded.value("guest_repo", "")
                     : "/home/dev/" + std::filesystem::path(r.host_top).filename().string();
  r.branch = a.branch;
  if (r.branch.empty()) {
    ASSIGN_OR_RETURN(RunOutput b, transfer::HostGit(r.host_top, {"symbolic-ref", "--short", "HEAD"}));
    if (!b.success()) {
      return Error(ErrorCode::kInvalidArgument, "the host repository has no current branch",
                   "name one with --branch");
    }
    r.branch = b.out.substr(0, b.out.find('\n'));
  }
  if (!transfer::ValidRefName("refs/heads/" + r.branch) ||
      !transfer::ValidRefName("refs/heads/cloister/" + a.name + "/" + r.branch)) {
    return Error(ErrorCode::kInvalidArgument, "'" + r.branch + "' is not a valid branch name",
                 "name a branch as git check-ref-format --branch accepts it");
  }
  if (r.guest_repo.empty() || r.guest_repo[0] == '-') {
    return Error(ErrorCode::kInvalidArgument, "--repo must be a path in the workspace");
  }
  return r;
}

// SECURITY: the guest's bundle, written to `file` with at most kMaxBundleBytes; more ends the
// guest's command and fails.
Status ReceiveBundle(Store& store, const std::string& name, const Resolved& r, int file) {
  ASSIGN_OR_RETURN(int stream, OpenStream(store, name));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    int e = errno;
    close(stream);
    return ErrnoError("socketpair", e);
  }
  channel::ExecControl control;
  Result<GuestRun> run = Error(ErrorCode::kInternal, "not run");
  std::thread guest([&] {
    run = RunOnStream(stream, {"git", "-C", r.guest_repo, "bundle", "create", "-",
                               "refs/heads/" + r.branch},
                      -1, sv[1], &control);
    shutdown(sv[1], SHUT_WR);
  });
  uint64_t total = 0;
  Status copied = OkStatus();
  char buf[65536];
  while (true) {
    ssize_t n = read(sv[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      copied = ErrnoError("reading the bundle", errno);
      break;
    }
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    if (total > transfer::kMaxBundleBytes) {
      copied = Error(ErrorCode::kNoSpace, "the workspace's bundle is larger than " +
                                              FormatSize(transfer::kMaxBundleBytes));
      break;
    }
    if (write(file, buf, static_cast<size_t>(n)) != n) {
      copied = ErrnoError("writing the bundle", errno);
      break;
    }
  }
  if (!copied.ok()) control.Abort(SIGTERM);
  Drain(sv[0]);
  guest.join();
  close(sv[0]);
  close(sv[1]);
  RETURN_IF_ERROR(copied);
  if (!run.ok()) return vm::ExplainEndedSession(store, name, lifecycle::Action::kExec, run.error());
  if (run->exit.ShellCode() != 0) {
    return Error(ErrorCode::kFailedPrecondition,
                 "git bundle create failed in the workspace (exit " +
                     std::to_string(run->exit.ShellCode()) + ")" +
                     (run->err.empty() ? "" : ": " + run->err),
                 "check --repo and --branch: `cloister exec " + name + " -- git -C " +
                     r.guest_repo + " branch`");
  }
  return OkStatus();
}

void AddRepoFlags(CLI::App* cmd, RepoArgs& a) {
  cmd->add_option("NAME", a.name, "Workspace name")->required();
  cmd->add_option("--repo", a.guest_repo,
                  "The repository in the workspace (default: /home/dev/<the host repository's "
                  "folder name>, where push and create --from-repo put it)");
  cmd->add_option("--host-repo", a.host_repo,
                  "The host repository (default: the one the current directory is in)");
  cmd->add_option("--branch", a.branch,
                  "The branch (default: the host repository's current branch)");
  cmd->add_flag("--json", a.json, "Print the result as JSON");
}

void AddPull(CLI::App& git, Cli& cli) {
  auto* cmd = git.add_subcommand(
      "pull",
      "Bring a workspace's commits of one branch into the host repository as "
      "cloister/NAME/BRANCH: a git bundle made in the guest, streamed over the channel, verified "
      "and fetched by host git as data (no hooks, no filters, nothing of the guest's config); a "
      "bundle holding any other ref is refused");
  auto a = std::make_shared<RepoArgs>();
  AddRepoFlags(cmd, *a);
  cmd->callback([&cli, a] {
    auto run = [&]() -> Result<transfer::GitImported> {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(cli));
      ASSIGN_OR_RETURN(Resolved r, Resolve(*store, *a));
      ASSIGN_OR_RETURN(std::unique_ptr<TempFile> tmp, MakeTemp());
      RETURN_IF_ERROR(ReceiveBundle(*store, a->name, r, tmp->fd));
      return transfer::ImportBundle({r.host_top, tmp->path, a->name, r.branch});
    };
    auto got = run();
    if (!got.ok()) {
      cli.Fail(got.error());
      return;
    }
    if (a->json) {
      cli.PrintJson({{"ref", got->ref}, {"commit", got->oid}});
      return;
    }
    cli.out() << "Fetched " << a->name << "'s work into " << got->ref.substr(11) << " ("
              << got->oid.substr(0, 12) << ")\n";
  });
}

}  // namespace

Result<std::string> PushBranch(Store& store, const std::string& name, const std::string& host_repo,
                               const std::string& guest_repo, const std::string& branch) {
  RepoArgs a{name, guest_repo, host_repo, branch, false};
  ASSIGN_OR_RETURN(Resolved r, Resolve(store, a));
  ASSIGN_OR_RETURN(std::unique_ptr<TempFile> tmp, MakeTemp());
  std::string ref = "refs/heads/" + r.branch;
  ASSIGN_OR_RETURN(RunOutput oid, transfer::HostGit(r.host_top, {"rev-parse", "--verify",
                                                                 "-q", ref + "^{commit}"}));
  if (!oid.success()) {
    return Error(ErrorCode::kNotFound, "the host repository has no branch " + r.branch);
  }
  std::string commit = oid.out.substr(0, oid.out.find('\n'));
  unlink(tmp->path.c_str());  // git bundle create makes the file itself
  ASSIGN_OR_RETURN(RunOutput made,
                   transfer::HostGit(r.host_top, {"bundle", "create", "-q", tmp->path, ref}));
  if (!made.success()) {
    return Error(ErrorCode::kFailedPrecondition, "git bundle create failed: " + made.err);
  }
  int in = open(tmp->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoError("open " + tmp->path, errno);
  // In the guest: clone the bundle, or fetch it into an existing repository.
  const std::string script =
      "t=$(mktemp) && cat > \"$t\" || exit 1\n"
      "if [ -e \"$1/.git\" ]; then git -C \"$1\" fetch -q \"$t\" \"+refs/heads/$2:refs/heads/$2\"\n"
      "else git clone -q -b \"$2\" \"$t\" \"$1\"; fi\nr=$?; rm -f \"$t\"; exit $r\n";
  auto guest = RunInGuest(store, name, {"sh", "-c", script, "sh", r.guest_repo, r.branch},
                          in, -1);
  close(in);
  if (!guest.ok()) return guest.error();
  if (guest->exit.ShellCode() != 0) {
    return Error(ErrorCode::kFailedPrecondition,
                 "the workspace's git could not take the branch (exit " +
                     std::to_string(guest->exit.ShellCode()) + ")" +
                     (guest->err.empty() ? "" : ": " + guest->err),
                 "a branch checked out in the workspace cannot be fetched into; switch "
                 "branches there, or push another --branch");
  }
  RETURN_IF_ERROR(store.UpdateConfig(name, [&](WorkspaceConfig& c) {
    c.extra[kGitConfigKey] = {{"guest_repo", r.guest_repo},
                              {"branch", r.branch},
                              {"base", commit}};
    return OkStatus();
  }));
  return commit;
}

namespace {

void AddPush(CLI::App& git, Cli& cli) {
  auto* cmd = git.add_subcommand(
      "push", "Send a host branch into a workspace's repository (cloned there if it is not yet), "
              "through a git bundle over the channel; `cloister diff NAME` then shows the "
              "workspace's changes against it");
  auto a = std::make_shared<RepoArgs>();
  AddRepoFlags(cmd, *a);
  cmd->callback([&cli, a] {
    auto run = [&]() -> Result<std::string> {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(cli));
      return PushBranch(*store, a->name, a->host_repo, a->guest_repo, a->branch);
    };
    auto got = run();
    if (!got.ok()) {
      cli.Fail(got.error());
      return;
    }
    if (a->json) {
      cli.PrintJson({{"commit", *got}});
      return;
    }
    cli.out() << "Pushed " << got->substr(0, 12) << " into " << a->name << "\n";
  });
}

}  // namespace

void AddGitCommand(CLI::App& app, Cli& cli) {
  auto* git = app.add_subcommand(
      "git", "Move work between a host repository and a workspace as git commits, not through a "
             "shared folder");
  git->require_subcommand(1);
  AddPull(*git, cli);
  AddPush(*git, cli);
}

void AddDiffCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "diff", "Show what a workspace changed (committed or not) against the commit `git push` "
              "or `create --from-repo` started it from (the guest's git diff, printed "
              "terminal-safe)");
  auto name = std::make_shared<std::string>();
  cmd->add_option("NAME", *name, "Workspace name")->required();
  cmd->callback([&cli, name] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(cli));
      ASSIGN_OR_RETURN(WorkspaceConfig c, store->LoadConfig(*name));
      auto it = c.extra.find(kGitConfigKey);
      if (it == c.extra.end() || !it->is_object() || it->value("base", "").empty()) {
        return Error(ErrorCode::kFailedPrecondition,
                     *name + " was not seeded from a host repository",
                     "`cloister git push " + *name + "` sends a branch in first");
      }
      std::string repo = it->value("guest_repo", ""), base = it->value("base", "");
      if (repo.empty() || repo[0] == '-' || base.find_first_not_of("0123456789abcdef") !=
                                                std::string::npos) {
        return Error(ErrorCode::kCorrupt, "config.json's git section is malformed");
      }
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        return ErrnoError("socketpair", errno);
      }
      Result<GuestRun> guest = Error(ErrorCode::kInternal, "not run");
      std::thread t([&] {
        guest = RunInGuest(*store, *name, {"git", "-C", repo, "diff", "--no-color", base}, -1,
                           sv[1]);
        shutdown(sv[1], SHUT_WR);
      });
      // SECURITY: the guest's output, made terminal-safe piece by piece.
      char buf[65536];
      while (true) {
        ssize_t n = read(sv[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        cli.out() << TerminalSafe(std::string_view(buf, static_cast<size_t>(n)), true);
      }
      t.join();
      close(sv[0]);
      close(sv[1]);
      if (!guest.ok()) return guest.error();
      if (guest->exit.ShellCode() != 0) {
        return Error(ErrorCode::kFailedPrecondition,
                     "git diff failed in the workspace" +
                         (guest->err.empty() ? "" : ": " + guest->err));
      }
      return OkStatus();
    };
    if (Status s = run(); !s.ok()) cli.Fail(s.error());
  });
}

}  // namespace cloister::cli

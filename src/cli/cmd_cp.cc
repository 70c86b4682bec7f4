// `cloister cp SRC DST`, docker-style: exactly one side is `NAME:PATH` (a path in the workspace;
// relative to /home/dev); the other a host path, or `-` for a tar stream on stdin/stdout.
// Files and directory trees; modes and mtimes kept; symlinks copied as symlinks, never followed.
//
// Both directions go through the channel: an exec stream runs the guest's `tar` as dev, and the
// host side is transfer/tar.h (libarchive). Out of the guest, the guest's tar stream is hostile
// and ExtractTar/FilterTar hold it to their entry policy (SECURITY: see transfer/tar.h). Into the
// guest the host writes the tar and the guest's tar extracts it as dev: the guest protects
// itself there (not our boundary).
//
// Where things land (as docker cp):
//   DST an existing directory    -> DST/basename(SRC)
//   DST a new path (parent must exist) -> DST (SRC renamed)
//   DST an existing file         -> overwritten (SRC must be a file)
//   `-` as DST: a tar of SRC on stdout; `-` as SRC: a tar on stdin extracted into the directory DST.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "channel/exec_client.h"
#include "base/strings.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/remote.h"
#include "protocol/contract.h"
#include "store/store.h"
#include "supervisor/launcher.h"
#include "base/terminal_text.h"
#include "transfer/tar.h"
#include "cli/guest_run.h"

namespace cloister::cli {
namespace {

struct Spec {
  bool remote = false;
  std::string name;  // workspace (remote)
  std::string path;  // "-" for a tar stream (host side only)
};

// NAME:PATH when a ':' comes before any '/', as docker reads it (`./a:b` is a host path).
Spec ParseSpec(const std::string& arg) {
  Spec s;
  size_t colon = arg.find(':');
  size_t slash = arg.find('/');
  if (colon != std::string::npos && colon > 0 && (slash == std::string::npos || colon < slash)) {
    s.remote = true;
    s.name = arg.substr(0, colon);
    s.path = arg.substr(colon + 1);
  } else {
    s.path = arg;
  }
  return s;
}

std::string StripSlashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// dirname/basename of a path (trailing slashes stripped); "" base for "/" (and "." / ".." stay).
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  std::string p = StripSlashes(path);
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return {".", p};
  if (slash == 0) return {"/", p.substr(1)};
  return {p.substr(0, slash), p.substr(slash + 1)};
}

Status CheckBase(const std::string& base, const std::string& path) {
  if (base.empty() || base == "." || base == "..") {
    return Error(ErrorCode::kInvalidArgument, "cannot copy '" + path + "' by that name",
                 "name the file or directory itself (e.g. NAME:/home/dev/project, not "
                 "NAME:/home/dev/.)");
  }
  return OkStatus();
}

// A guest path as the guest's tar gets it: relative paths are from /home/dev, and one that
// begins with '-' gets "./" (never read as an option).
std::string GuestPath(const std::string& path) {
  if (path.empty()) return ".";
  if (path[0] == '-') return "./" + path;
  return path;
}

Error GuestTarFailed(const GuestRun& run, const std::string& what) {
  return Error(ErrorCode::kFailedPrecondition,
               what + " failed in the workspace (exit " + std::to_string(run.exit.ShellCode()) +
                   ")" + (run.err.empty() ? "" : ": " + run.err),
               "check the path and its permissions for dev in the workspace");
}


std::string Summary(const transfer::TarStats& s, const std::string& where) {
  std::string out = "cloister: copied " + std::to_string(s.entries) + " entr" +
                    (s.entries == 1 ? "y" : "ies") + " (" + FormatSize(s.bytes) + ") " + where;
  if (s.skipped) out += "; skipped " + std::to_string(s.skipped) + " device/fifo/socket entries";
  return out + "\n";
}

// Where a copy out of a workspace lands on this machine (docker's rules): the directory to
// extract into and the policy (top = the guest's basename of SRC). dest_dir stays "" for `-`.
Status ResolveHostDestination(Cli& cli, const Spec& src, const std::string& dst,
                              std::string* gparent_out, std::string* dest_dir,
                              transfer::EntryPolicy* policy) {
  std::string gpath = GuestPath(StripSlashes(src.path));
  auto [gparent, gbase] = SplitPath(gpath);
  RETURN_IF_ERROR(CheckBase(gbase, src.path));
  *gparent_out = gparent;
  policy->top = gbase;
  policy->warn = [&cli](const std::string& w) { cli.err() << "cloister: warning: " << w << "\n"; };
  if (dst != "-") {
    struct stat st;
    std::string d = StripSlashes(dst);
    if (stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      *dest_dir = d;
    } else {
      auto [parent, base] = SplitPath(d);
      RETURN_IF_ERROR(CheckBase(base, dst));
      struct stat pst;
      if (stat(parent.c_str(), &pst) != 0 || !S_ISDIR(pst.st_mode)) {
        return Error(ErrorCode::kNotFound, "no directory " + parent + " on the host",
                     "create it first, or name an existing directory");
      }
      if (dst.back() == '/' && stat(d.c_str(), &st) != 0) {
        return Error(ErrorCode::kNotFound, "no directory " + d + " on the host",
                     "create it first (`mkdir -p " + d + "`)");
      }
      *dest_dir = parent;
      policy->rename_top = base;
      policy->top_must_be_file = stat(d.c_str(), &st) == 0;  // an existing non-directory
    }
  }
  return OkStatus();
}

Status CopyFromGuest(Cli& cli, Store& store, const Spec& src, const std::string& dst) {
  std::string gpath = GuestPath(StripSlashes(src.path));
  std::string gparent, dest_dir;
  transfer::EntryPolicy policy;
  RETURN_IF_ERROR(ResolveHostDestination(cli, src, dst, &gparent, &dest_dir, &policy));
  const std::string& gbase = policy.top;
  // The stream is opened here, before ExtractTar changes the working directory (the store root
  // may be a relative path).
  ASSIGN_OR_RETURN(int stream, OpenStream(store, src.name));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    int e = errno;
    close(stream);
    return ErrnoError("socketpair", e);
  }
  channel::ExecControl control;
  Result<GuestRun> run = Error(ErrorCode::kInternal, "not run");
  std::thread guest([&] {
    run = RunOnStream(stream, {"tar", "-C", gparent, "-cf", "-", gbase}, -1, sv[1], &control);
    shutdown(sv[1], SHUT_WR);  // the extractor sees the end
  });
  Result<transfer::TarStats> copied =
      dst == "-" ? transfer::FilterTar(sv[0], STDOUT_FILENO, policy)
                 : transfer::ExtractTar(sv[0], dest_dir, policy);
  bool aborted = false;
  if (!copied.ok()) {
    // Refused (or a write failed): end the guest's tar, and drain what it still sends so the
    // session can close.
    control.Abort(SIGTERM);
    aborted = true;
  }
  Drain(sv[0]);
  guest.join();
  close(sv[0]);
  close(sv[1]);
  if (aborted) {
    // The guest's tar may have failed first (no such path): its words go along (bounded,
    // terminal-safe), after ours, which stay the answer.
    if (run.ok() && run->exit.ShellCode() != 0 && !run->err.empty()) {
      return Error(copied.error().code(),
                   copied.error().message() + " (the workspace's tar: " + run->err + ")",
                   copied.error().hint());
    }
    return copied.error();
  }
  if (!run.ok()) {
    return vm::ExplainEndedSession(store, src.name, lifecycle::Action::kExec, run.error());
  }
  if (run->exit.ShellCode() != 0) return GuestTarFailed(*run, "tar -c " + gpath);
  if (dst != "-") cli.err() << Summary(*copied, "to " + dst);
  return OkStatus();
}

// What is at `gpath` in the workspace, as dev sees it: "dir", "file" or "absent" (a missing
// parent is an error).
Result<std::string> ProbeGuestPath(Store& store, const std::string& name, const std::string& gpath) {
  const char* probe =
      "if [ -d \"$1\" ]; then echo dir; elif [ -e \"$1\" ] || [ -L \"$1\" ]; then echo file; "
      "elif [ -d \"$(dirname \"$1\")\" ]; then echo absent; else echo noparent; fi";
  ASSIGN_OR_RETURN(GuestRun kind, RunInGuest(store, name, {"sh", "-c", probe, "sh", gpath}, -1, -1));
  std::string k = kind.out.substr(0, kind.out.find('\n'));
  if (kind.exit.ShellCode() != 0 || (k != "dir" && k != "file" && k != "absent" && k != "noparent")) {
    return GuestTarFailed(kind, "looking at " + gpath);
  }
  if (k == "noparent") {
    std::string gparent = SplitPath(gpath).first;
    return Error(ErrorCode::kNotFound, "no directory " + gparent + " in " + name,
                 "create it first (`cloister exec " + name + " -- mkdir -p " + gparent + "`)");
  }
  return k;
}

Status CopyToGuest(Cli& cli, Store& store, const std::string& src, const Spec& dst) {
  std::string gpath = GuestPath(StripSlashes(dst.path));
  ASSIGN_OR_RETURN(std::string k, ProbeGuestPath(store, dst.name, gpath));
  auto [gparent, gbase] = SplitPath(gpath);
  std::vector<std::string> untar = {"tar", "-C", "", "-x", "-o", "-f", "-"};
  if (src == "-") {
    if (k != "dir") {
      return Error(ErrorCode::kInvalidArgument,
                   "a tar stream on stdin needs an existing directory in the workspace, not " + gpath,
                   "create it first (`cloister exec " + dst.name + " -- mkdir -p " + gpath + "`)");
    }
    untar[2] = gpath;
    ASSIGN_OR_RETURN(GuestRun run, RunInGuest(store, dst.name, untar, STDIN_FILENO, -1));
    if (run.exit.ShellCode() != 0) return GuestTarFailed(run, "tar -x into " + gpath);
    return OkStatus();
  }
  std::string hsrc = StripSlashes(src);
  struct stat st;
  if (lstat(hsrc.c_str(), &st) != 0) return ErrnoError("cannot read " + hsrc, errno);
  std::string top;
  if (k == "dir") {
    auto [hparent, hbase] = SplitPath(hsrc);
    if (hbase == "." || hbase == ".." || hbase.empty()) {
      std::error_code ec;
      hbase = std::filesystem::canonical(hsrc, ec).filename().string();
    }
    RETURN_IF_ERROR(CheckBase(hbase, src));
    untar[2] = gpath;
    top = hbase;
  } else {
    RETURN_IF_ERROR(CheckBase(gbase, dst.path));
    if (k == "file" && S_ISDIR(st.st_mode)) {
      return Error(ErrorCode::kInvalidArgument,
                   "cannot copy the directory " + hsrc + " onto the file " + gpath + " in " +
                       dst.name,
                   "name a directory (or a new path) in the workspace");
    }
    untar[2] = gparent;
    top = gbase;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoError("socketpair", errno);
  }
  auto warn = [&cli](const std::string& w) { cli.err() << "cloister: warning: " << w << "\n"; };
  Result<transfer::TarStats> written = Error(ErrorCode::kInternal, "not run");
  std::thread writer([&] {
    written = transfer::WriteTar(sv[1], hsrc, top, warn);
    shutdown(sv[1], SHUT_WR);  // the guest's tar sees the end
  });
  auto run = RunInGuest(store, dst.name, untar, sv[0], -1);
  close(sv[0]);  // a writer still sending gets EPIPE (no SIGPIPE: MSG_NOSIGNAL)
  writer.join();
  close(sv[1]);
  if (!written.ok()) return written.error();
  if (!run.ok()) return run.error();
  if (run->exit.ShellCode() != 0) return GuestTarFailed(*run, "tar -x into " + untar[2]);
  cli.err() << Summary(*written, "to " + dst.name + ":" + gpath);
  return OkStatus();
}

// `_cp-in TOP NAME:PATH` (the remote end of a local -> remote cp): a tar on stdin whose entries
// all sit under TOP (the local source's name) lands at NAME:PATH by docker's rules, as
// CopyToGuest would put it. SECURITY: the stream is re-written through FilterTar (one top, the
// entry policy) before the guest's tar sees it, and renamed there when PATH is not a directory.
Status CopyTarInToGuest(Cli& cli, Store& store, const std::string& top, const Spec& dst) {
  RETURN_IF_ERROR(CheckBase(top, top));
  if (top.find('/') != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "_cp-in: TOP is one name, not a path");
  }
  std::string gpath = GuestPath(StripSlashes(dst.path));
  ASSIGN_OR_RETURN(std::string k, ProbeGuestPath(store, dst.name, gpath));
  auto [gparent, gbase] = SplitPath(gpath);
  transfer::EntryPolicy policy;
  policy.top = top;
  policy.warn = [&cli](const std::string& w) { cli.err() << "cloister: warning: " << w << "\n"; };
  std::vector<std::string> untar = {"tar", "-C", gpath, "-x", "-o", "-f", "-"};
  if (k != "dir") {
    RETURN_IF_ERROR(CheckBase(gbase, dst.path));
    untar[2] = gparent;
    policy.rename_top = gbase;
    policy.top_must_be_file = k == "file";  // a directory never replaces a file
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoError("socketpair", errno);
  Result<transfer::TarStats> filtered = Error(ErrorCode::kInternal, "not run");
  std::thread filter([&] {
    filtered = transfer::FilterTar(STDIN_FILENO, sv[1], policy);
    shutdown(sv[1], SHUT_WR);  // the guest's tar sees the end
  });
  auto run = RunInGuest(store, dst.name, untar, sv[0], -1);
  close(sv[0]);
  filter.join();
  close(sv[1]);
  if (!filtered.ok()) return filtered.error();
  if (!run.ok()) return run.error();
  if (run->exit.ShellCode() != 0) return GuestTarFailed(*run, "tar -x into " + untar[2]);
  cli.err() << Summary(*filtered, "to " + dst.name + ":" + gpath);
  return OkStatus();
}

// Both ends of a remote copy, on this machine.
int CopyFromRemote(Cli& cli, const RemoteTarget& t, const std::vector<std::string>& prefix,
                   const Spec& src, const std::string& dst) {
  if (dst == "-" && isatty(STDOUT_FILENO)) {
    return cli.Fail(Error(ErrorCode::kInvalidArgument, "refusing to write a tar stream to a terminal",
                          "redirect it: cloister cp " + src.name + ":" + src.path + " - > out.tar"));
  }
  std::string gparent, dest_dir;
  transfer::EntryPolicy policy;
  if (Status st = ResolveHostDestination(cli, src, dst, &gparent, &dest_dir, &policy); !st.ok()) {
    return cli.Fail(st.error());
  }
  // SECURITY: the remote's `cp NAME:PATH -` already filters, but the remote host and its guest
  // are not trusted here: this side extracts under its own policy, into dest_dir only.
  std::vector<std::string> args = prefix;
  args.insert(args.end(), {"cp", src.name + ":" + src.path, "-"});
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return cli.Fail(ErrnoError("socketpair", errno));
  }
  int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto pid = SpawnRemote(t, args, null_in, sv[1]);
  if (null_in >= 0) close(null_in);
  close(sv[1]);
  if (!pid.ok()) {
    close(sv[0]);
    return cli.Fail(pid.error());
  }
  Result<transfer::TarStats> copied = dst == "-" ? transfer::FilterTar(sv[0], STDOUT_FILENO, policy)
                                                 : transfer::ExtractTar(sv[0], dest_dir, policy);
  if (!copied.ok()) {
    // A remote that failed (no such path...) ends its stream early and says why on stderr: its
    // exit code is the answer then. One still sending was refused here: end the connection (not
    // the workspace), the refusal is the answer.
    bool ended = false;
    int status = 0;
    for (int i = 0; i < 40 && !ended; ++i) {
      ended = waitpid(*pid, &status, WNOHANG) == *pid;
      if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // bounded
    }
    close(sv[0]);
    if (ended && WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 255) {
      return WEXITSTATUS(status);
    }
    if (!ended) {
      kill(*pid, SIGTERM);
      waitpid(*pid, &status, 0);
    }
    return cli.Fail(copied.error());
  }
  close(sv[0]);
  int code = WaitRemote(t, *pid);
  if (code != 0) return code;  // the remote said why on stderr
  if (dst != "-") cli.err() << Summary(*copied, "to " + dst);
  return kExitOk;
}

int CopyToRemote(Cli& cli, const RemoteTarget& t, const std::vector<std::string>& prefix,
                 const std::string& src, const Spec& dst) {
  std::string hsrc = StripSlashes(src);
  struct stat st;
  if (lstat(hsrc.c_str(), &st) != 0) return cli.Fail(ErrnoError("cannot read " + hsrc, errno));
  auto [hparent, hbase] = SplitPath(hsrc);
  if (hbase == "." || hbase == ".." || hbase.empty()) {
    std::error_code ec;
    hbase = std::filesystem::canonical(hsrc, ec).filename().string();
  }
  if (Status s = CheckBase(hbase, src); !s.ok()) return cli.Fail(s.error());
  std::vector<std::string> args = prefix;
  args.insert(args.end(), {"_cp-in", hbase, dst.name + ":" + dst.path});
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return cli.Fail(ErrnoError("socketpair", errno));
  }
  auto pid = SpawnRemote(t, args, sv[1], -1);
  close(sv[1]);
  if (!pid.ok()) {
    close(sv[0]);
    return cli.Fail(pid.error());
  }
  auto warn = [&cli](const std::string& w) { cli.err() << "cloister: warning: " << w << "\n"; };
  auto written = transfer::WriteTar(sv[0], hsrc, hbase, warn);  // MSG_NOSIGNAL: no SIGPIPE
  shutdown(sv[0], SHUT_WR);  // the remote sees the end
  int code = WaitRemote(t, *pid);
  close(sv[0]);
  if (code != 0) return code;  // the remote said why on stderr (its summary too, on success)
  if (!written.ok()) return cli.Fail(written.error());
  return kExitOk;
}

}  // namespace

int RemoteCopy(const RemoteTarget& t, const std::vector<std::string>& prefix,
               const std::vector<std::string>& args) {
  Cli cli(std::cout, std::cerr, std::cin);
  std::vector<std::string> pos;
  for (const std::string& a : args) {
    if (a.size() > 1 && a[0] == '-') {  // --help and the like: the remote's own answer
      std::vector<std::string> all = prefix;
      all.push_back("cp");
      all.insert(all.end(), args.begin(), args.end());
      return RunRemote(t, all);
    }
    pos.push_back(a);
  }
  if (pos.size() == 2) {
    Spec src = ParseSpec(pos[0]), dst = ParseSpec(pos[1]);
    if (src.remote && !dst.remote && src.path != "-" && !dst.path.empty()) {
      return CopyFromRemote(cli, t, prefix, src, dst.path);
    }
    if (!src.remote && dst.remote && src.path != "-" && !src.path.empty() && dst.path != "-") {
      return CopyToRemote(cli, t, prefix, src.path, dst);
    }
  }
  // `cp - NAME:DIR < in.tar` and every usage error: the remote's verb as it is.
  std::vector<std::string> all = prefix;
  all.push_back("cp");
  all.insert(all.end(), args.begin(), args.end());
  return RunRemote(t, all);
}

void AddCpCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "cp", "Copy files and directories between the host and a workspace (NAME:PATH on one side)");
  struct Opts {
    std::string src, dst;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("SRC", o->src, "Host path, NAME:PATH, or - (a tar stream on stdin)")->required();
  cmd->add_option("DST", o->dst, "Host path, NAME:PATH, or - (a tar stream on stdout)")->required();
  cmd->footer(
      "Exactly one side is NAME:PATH (relative paths are from /home/dev); the workspace must be "
      "running. As with docker cp: into an existing directory the source keeps its name, "
      "otherwise it takes the destination's. Modes and mtimes are kept, symlinks are copied as "
      "symlinks (never followed). Out of a workspace, entries that would land outside the "
      "destination or go through a symlink stop the copy; devices, fifos and sockets are "
      "skipped; setuid bits and owners are not kept.");
  cmd->callback([&cli, o] {
    Spec src = ParseSpec(o->src), dst = ParseSpec(o->dst);
    if (src.remote == dst.remote) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument,
                                  src.remote ? "both sides name a workspace"
                                             : "neither side names a workspace",
                                  "cloister cp NAME:PATH HOSTPATH, or cloister cp HOSTPATH "
                                  "NAME:PATH (use ./a:b for a host path with a colon)"));
    }
    if ((src.remote && src.path == "-") || (dst.remote && dst.path == "-")) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "`-` is the host side's tar stream",
                                  "cloister cp NAME:PATH - > out.tar, or cloister cp - NAME:DIR < in.tar"));
    }
    // SECURITY: a tar stream out of the guest holds the guest's file bytes: never raw onto the
    // user's terminal (escape sequences). Nor is a terminal a tar stream to read.
    if (!dst.remote && dst.path == "-" && isatty(STDOUT_FILENO)) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument,
                                  "refusing to write a tar stream to a terminal",
                                  "redirect it: cloister cp " + o->src + " - > out.tar (or | tar -x)"));
    }
    if (!src.remote && src.path == "-" && isatty(STDIN_FILENO)) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument,
                                  "refusing to read a tar stream from a terminal",
                                  "redirect it: cloister cp - " + o->dst + " < in.tar"));
    }
    if ((!src.remote && src.path.empty()) || (!dst.remote && dst.path.empty())) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "an empty host path"));
    }
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    cli.out() << std::flush;
    Status st = src.remote ? CopyFromGuest(cli, **store, src, dst.path)
                           : CopyToGuest(cli, **store, src.path, dst);
    if (!st.ok()) return (void)cli.Fail(st.error());
  });

  auto* in = app.add_subcommand("_cp-in", "The remote end of a cp into a remote workspace (internal)");
  in->group("");  // hidden: a local cloister runs it over SSH (cli/remote.h)
  auto in_top = std::make_shared<std::string>();
  auto in_dst = std::make_shared<std::string>();
  in->add_option("TOP", *in_top)->required();
  in->add_option("DST", *in_dst)->required();
  in->callback([&cli, in_top, in_dst] {
    Spec dst = ParseSpec(*in_dst);
    if (!dst.remote || dst.path == "-") {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "_cp-in: DST is NAME:PATH"));
    }
    if (isatty(STDIN_FILENO)) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "_cp-in reads a tar stream, not a terminal"));
    }
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    Status st = CopyTarInToGuest(cli, **store, *in_top, dst);
    if (!st.ok()) return (void)cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

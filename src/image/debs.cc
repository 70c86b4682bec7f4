#include "image/debs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include "base/file_util.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "image/build_util.h"

namespace cloister::image {

namespace fs = std::filesystem;

namespace {


struct Candidate {
  std::string version, arch, depends;
  bool downloadable = false;  // has a Filename: an archive has it (not only dpkg's status file)
};

// Parses `apt-cache show` output: per package, the first entry (downloadable only if asked).
std::map<std::string, Candidate> ParseShow(const std::string& text, bool downloadable_only) {
  std::map<std::string, Candidate> found;
  std::string name;
  Candidate c;
  auto flush = [&] {
    if (!name.empty() && !found.count(name) && (c.downloadable || !downloadable_only)) {
      found[name] = c;
    }
    name.clear();
    c = Candidate();
  };
  for (const std::string& line : Split(text, '\n')) {
    if (line.empty()) flush();
    if (StartsWith(line, "Package: ")) name = Trim(line.substr(9));
    if (StartsWith(line, "Version: ")) c.version = Trim(line.substr(9));
    if (StartsWith(line, "Architecture: ")) c.arch = Trim(line.substr(14));
    if (StartsWith(line, "Depends: ")) c.depends = Trim(line.substr(9));
    if (StartsWith(line, "Filename: ")) c.downloadable = true;
  }
  flush();
  return found;
}

// One `apt-cache show` for all packages (each call loads apt's cache: about a second). A candidate
// that no archive has (a package installed from a vendor's repository that is now disabled, e.g. a
// newer Node.js) is replaced by the newest version an archive has: images take Debian's packages.
Result<std::map<std::string, Candidate>> ShowCandidates(const std::vector<std::string>& packages) {
  RunOptions opts;
  opts.env_set = {{"LC_ALL", "C"}};
  std::vector<std::string> argv{"apt-cache", "show", "--no-all-versions"};
  argv.insert(argv.end(), packages.begin(), packages.end());
  ASSIGN_OR_RETURN(auto r, RunProcess(argv, opts));
  std::map<std::string, Candidate> found = ParseShow(r.out, false);
  std::vector<std::string> local_only;
  for (const auto& p : packages) {
    auto it = found.find(p);
    if (it != found.end() && !it->second.downloadable) local_only.push_back(p);
  }
  if (!local_only.empty()) {
    std::vector<std::string> all{"apt-cache", "show"};
    all.insert(all.end(), local_only.begin(), local_only.end());
    ASSIGN_OR_RETURN(auto r2, RunProcess(all, opts));
    std::map<std::string, Candidate> archived = ParseShow(r2.out, true);
    for (const auto& p : local_only) {
      auto it = archived.find(p);
      if (it == archived.end()) {
        return Error(ErrorCode::kNotFound, "no archive has Debian package " + p,
                     "it is only installed locally; run `apt-get update`");
      }
      found[p] = it->second;
    }
  }
  for (const auto& p : packages) {
    auto it = found.find(p);
    if (it == found.end()) {
      return Error(ErrorCode::kNotFound, "Debian package not found: " + p,
                   "run `apt-get update` so apt knows Debian 12's packages");
    }
    if (it->second.version.empty() || it->second.arch.empty()) {
      return Error(ErrorCode::kCorrupt, "apt-cache show " + p + ": no Version/Architecture");
    }
  }
  return found;
}

// apt-get download names files NAME_VERSION_ARCH.deb with ':' (epoch) written as %3a.
std::string CacheFileName(const std::string& name, const Candidate& c) {
  std::string v;
  for (char ch : c.version) v += ch == ':' ? std::string("%3a") : std::string(1, ch);
  return name + "_" + v + "_" + c.arch + ".deb";
}

}  // namespace

Result<std::vector<DebPackage>> FetchDebs(const std::string& cache_dir,
                                          const std::vector<std::string>& packages) {
  RETURN_IF_ERROR(MakeDirs(cache_dir));
  ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::Acquire(cache_dir + "/.lock"));
  std::vector<DebPackage> out;
  std::vector<std::string> missing;
  ASSIGN_OR_RETURN(auto candidates, ShowCandidates(packages));
  for (const auto& name : packages) {
    const Candidate& c = candidates[name];
    DebPackage p{name, c.version, c.arch, cache_dir + "/" + CacheFileName(name, c)};
    if (access(p.path.c_str(), R_OK) != 0) missing.push_back(name + "=" + c.version);
    out.push_back(std::move(p));
  }
  if (!missing.empty()) {
    std::vector<std::string> argv{"apt-get", "download", "-q", "-o", "APT::Sandbox::User=root"};
    argv.insert(argv.end(), missing.begin(), missing.end());
    RunOptions opts;
    opts.cwd = cache_dir;
    opts.env_set = {{"LC_ALL", "C"}};
    auto r = RunProcessChecked(argv, opts);
    if (!r.ok()) {
      return r.error().WithContext("downloading Debian packages").WithHint(
          "check that apt can reach Debian's archive (apt-get update)");
    }
  }
  for (const auto& p : out) {
    if (access(p.path.c_str(), R_OK) != 0) {
      return Error(ErrorCode::kNotFound, "apt-get download did not produce " + p.path);
    }
  }
  return out;
}

std::vector<std::string> ParseSimulatedInstalls(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& line : Split(text, '\n')) {
    if (!StartsWith(line, "Inst ")) continue;
    std::string rest = line.substr(5);
    std::string name = rest.substr(0, rest.find(' '));
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

Result<std::vector<std::string>> DependencyClosure(const std::vector<std::string>& roots) {
  // An empty status file: apt plans the install onto an empty system, whatever this host has.
  std::vector<std::string> argv{"apt-get", "-s", "-q", "-o", "Dir::State::status=/dev/null",
                                "-o", "Debug::NoLocking=1", "--no-install-recommends",
                                "install"};
  argv.insert(argv.end(), roots.begin(), roots.end());
  RunOptions opts;
  opts.env_set = {{"LC_ALL", "C"}};
  auto r = RunProcessChecked(argv, opts);
  if (!r.ok()) {
    return r.error().WithContext("resolving the dependencies of " + Join(roots, " "))
        .WithHint("run `apt-get update` so apt knows Debian 12's packages");
  }
  std::vector<std::string> names = ParseSimulatedInstalls(r->out);
  for (const auto& root : roots) {
    if (std::find(names.begin(), names.end(), root) == names.end()) {
      return Error(ErrorCode::kNotFound, "apt would not install " + root,
                   "run `apt-get update` so apt knows Debian 12's packages");
    }
  }
  return names;
}

Result<std::string> StandardKernelPackage() {
  ASSIGN_OR_RETURN(auto candidates, ShowCandidates({"linux-image-amd64"}));
  const Candidate& c = candidates["linux-image-amd64"];
  for (const std::string& dep : Split(c.depends, ',')) {
    std::string name = Trim(dep.substr(0, dep.find('(')));
    if (StartsWith(name, "linux-image-") && EndsWith(name, "-amd64") &&
        name.find("cloud") == std::string::npos && name.find("-rt-") == std::string::npos) {
      return name;
    }
  }
  return Error(ErrorCode::kNotFound,
               "linux-image-amd64 does not depend on a standard amd64 kernel: " + c.depends);
}

Status ExtractDeb(const std::string& deb, const std::string& dir) {
  RETURN_IF_ERROR(MakeDirs(dir));
  auto r = RunProcessChecked({"dpkg-deb", "-x", deb, dir});
  if (!r.ok()) return r.error();
  return OkStatus();
}

Result<KernelTree> PrepareKernel(const std::string& cache_dir, const DebPackage& kernel_deb) {
  RETURN_IF_ERROR(MakeDirs(cache_dir));
  ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::Acquire(cache_dir + "/.lock"));
  std::string stem = fs::path(kernel_deb.path).stem().string();
  std::string dir = cache_dir + "/kernels/" + stem;
  if (access((dir + "/.complete").c_str(), F_OK) != 0) {
    std::string tmp = dir + ".tmp";
    RETURN_IF_ERROR(RemoveTree(tmp));
    RETURN_IF_ERROR(ExtractDeb(kernel_deb.path, tmp));
    std::string release;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(tmp + "/lib/modules", ec)) {
      release = e.path().filename().string();
    }
    if (release.empty()) {
      return Error(ErrorCode::kCorrupt, kernel_deb.path + " has no lib/modules/RELEASE");
    }
    auto d = RunProcessChecked({"depmod", "-b", tmp, release});
    if (!d.ok()) return d.error().WithContext("depmod");
    RETURN_IF_ERROR(WriteFile(tmp + "/.complete", release + "\n"));
    RETURN_IF_ERROR(RemoveTree(dir));
    fs::rename(tmp, dir, ec);
    if (ec) return ErrnoError("rename " + tmp, ec.value());
  }
  ASSIGN_OR_RETURN(std::string release, ReadFile(dir + "/.complete"));
  release = Trim(release);
  KernelTree k{dir, release, dir + "/boot/vmlinuz-" + release, dir + "/lib/modules/" + release};
  if (access(k.vmlinuz.c_str(), R_OK) != 0) {
    return Error(ErrorCode::kCorrupt, "kernel package has no " + k.vmlinuz);
  }
  return k;
}

}  // namespace cloister::image

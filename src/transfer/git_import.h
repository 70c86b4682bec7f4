// Host side of `cloister git pull`: a bundle the guest's git made, fetched into a host
// repository as refs/heads/cloister/<workspace>/<branch>.
//
// SECURITY: the bundle is hostile input and host git reads it as data only:
//   - its header is parsed with bounds first (transfer/git_bundle.h) and the bundle is refused
//     unless its references are exactly the one branch asked for;
//   - host git runs in a clean environment (env -i: PATH, LC_ALL=C, no HOME, no system or global
//     configuration, no terminal prompt) with -c core.hooksPath=/dev/null (no hook of the host
//     repository runs, even one planted through a share), core.fsmonitor off, and
//     fetch.fsckObjects/transfer.fsckObjects on (a malformed object, or a .gitmodules attack,
//     fails the fetch);
//   - `git bundle verify` runs before the fetch; the fetch names exactly one refspec, into the
//     cloister/<workspace>/ namespace, with no tags, no submodules and no FETCH_HEAD;
//   - nothing of the guest's repository but the bundle ever reaches the host: no configuration,
//     hooks, attributes or filters (a bundle cannot carry them), and no checkout is made.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "base/subprocess.h"

namespace cloister::transfer {

// The largest bundle `git pull` accepts from a guest.
inline constexpr uint64_t kMaxBundleBytes = 4ull << 30;

// Host git as data: argv after "git", run in `repo` with the clean environment and the -c
// options above.
Result<RunOutput> HostGit(const std::string& repo, const std::vector<std::string>& args);

struct GitImport {
  std::string host_repo;    // a host repository (work tree or bare)
  std::string bundle_path;  // the guest's bundle, already on the host
  std::string workspace;    // the ref namespace: refs/heads/cloister/<workspace>/<branch>
  std::string branch;       // the guest branch asked for ("main")
};

struct GitImported {
  std::string ref;  // "refs/heads/cloister/dev/main"
  std::string oid;
};

Result<GitImported> ImportBundle(const GitImport& request);

}  // namespace cloister::transfer

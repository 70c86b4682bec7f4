// What `cloister git push` does, for `create --from-repo` too (cli/cmd_git.cc).
#pragma once

#include <string>

#include "base/result.h"
#include "store/store.h"

namespace cloister::cli {

// Sends branch `branch` (default: the host repository's current one) of the host repository
// `host_repo` (default: the current directory's) into the running workspace NAME's repository
// `guest_repo` (default: /home/dev/<the host repository's folder name>) through a git bundle over
// the channel: cloned there if absent, else fetched into the branch. Records config.json's "git"
// key (guest_repo, branch, base: the commit sent, what `diff` compares against). Returns the
// commit.
Result<std::string> PushBranch(Store& store, const std::string& name, const std::string& host_repo,
                               const std::string& guest_repo, const std::string& branch);

}  // namespace cloister::cli

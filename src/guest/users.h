// User lookup from /etc/passwd and /etc/group without NSS: the agent is a static binary and the
// test image has no glibc NSS modules, so getpwnam() is not an option.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.h"

namespace cloister::guest {

struct UserInfo {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::string shell;
  std::vector<gid_t> groups;  // supplementary groups (from the group file), including gid
};

// Looks `name` up in `passwd_path` (and its supplementary groups in `group_path`, which may be
// missing). kNotFound names the user.
Result<UserInfo> LookupUser(const std::string& name, const std::string& passwd_path = "/etc/passwd",
                            const std::string& group_path = "/etc/group");

}  // namespace cloister::guest

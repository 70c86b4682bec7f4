#include "guest/users.h"

#include <fstream>

#include "base/strings.h"

namespace cloister::guest {
namespace {

bool ParseId(const std::string& s, unsigned long& out) {
  if (s.empty() || s.size() > 10) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<unsigned long>(c - '0');
  }
  return out <= 0xfffffffeUL;
}

}  // namespace

Result<UserInfo> LookupUser(const std::string& name, const std::string& passwd_path,
                            const std::string& group_path) {
  std::ifstream passwd(passwd_path);
  if (!passwd) return Error(ErrorCode::kNotFound, "cannot read " + passwd_path);
  std::string line;
  UserInfo u;
  bool found = false;
  while (std::getline(passwd, line)) {
    auto f = Split(line, ':');
    if (f.size() < 7 || f[0] != name) continue;
    unsigned long uid = 0, gid = 0;
    if (!ParseId(f[2], uid) || !ParseId(f[3], gid)) continue;
    u.name = name;
    u.uid = static_cast<uid_t>(uid);
    u.gid = static_cast<gid_t>(gid);
    u.home = f[5].empty() ? "/" : f[5];
    u.shell = f[6].empty() ? "/bin/sh" : f[6];
    found = true;
    break;
  }
  if (!found) return Error(ErrorCode::kNotFound, "no user '" + name + "' in " + passwd_path);
  u.groups.push_back(u.gid);
  std::ifstream group(group_path);
  while (group && std::getline(group, line)) {
    auto f = Split(line, ':');
    if (f.size() < 4) continue;
    unsigned long gid = 0;
    if (!ParseId(f[2], gid) || static_cast<gid_t>(gid) == u.gid) continue;
    for (const auto& member : Split(f[3], ',')) {
      if (member == name) {
        u.groups.push_back(static_cast<gid_t>(gid));
        break;
      }
    }
  }
  return u;
}

}  // namespace cloister::guest

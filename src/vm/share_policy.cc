#include "vm/share_policy.h"

#include <cerrno>

namespace cloister::vm {

bool EqualsFold(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool IsOneComponent(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (char c : name) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

bool NeedsHeadCheck(std::string_view name) {
  return EqualsFold(name, "objects") || EqualsFold(name, "refs") || EqualsFold(name, "commondir");
}

int CheckNewNameWith(std::string_view name, const NewNameContext& where) {
  if (!IsOneComponent(name)) return EPERM;
  if (EqualsFold(name, ".git")) return EPERM;
  if (!where.in_git_dir) {
    if (EqualsFold(name, "HEAD")) return EPERM;
    if (where.holds_head && NeedsHeadCheck(name)) return EPERM;
    return 0;
  }
  if (where.git_dir_top) {
    for (std::string_view p : {"config", "config.worktree", "commondir", "hooks", "info", "modules",
                               "worktrees"}) {
      if (EqualsFold(name, p)) return EPERM;
    }
  }
  return 0;
}

}  // namespace cloister::vm

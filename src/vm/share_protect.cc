#include "vm/share_protect.h"

#include <cerrno>

#include "vm/share_policy.h"

namespace cloister::vm {

void ProtectedNames::Add(DirId root, std::vector<std::string> components) {
  if (components.empty()) return;
  std::string name = std::move(components.front());
  components.erase(components.begin());
  std::vector<Rest>& rests = table_[root];
  for (const Rest& r : rests) {
    if (EqualsFold(r.name, name) && r.more == components) return;
  }
  rests.push_back({std::move(name), std::move(components)});
  ++count_;
}

int ProtectedNames::Check(DirId dir, std::string_view name, bool mkdir) const {
  auto it = table_.find(dir);
  if (it == table_.end()) return 0;
  size_t follow = 0;
  for (const Rest& r : it->second) {
    if (!EqualsFold(r.name, name)) continue;
    // The end of a protected path; or on the way to one, but not as a directory.
    if (r.more.empty() || !mkdir) return EPERM;
    ++follow;
  }
  // No room left to follow the new directory: refused rather than left unguarded.
  return count_ + follow > kMaxContinuations ? EPERM : 0;
}

void ProtectedNames::Made(DirId dir, std::string_view name, DirId made) {
  auto it = table_.find(dir);
  if (it == table_.end()) return;
  std::vector<std::vector<std::string>> below;
  for (const Rest& r : it->second) {
    if (EqualsFold(r.name, name) && !r.more.empty()) below.push_back(r.more);
  }
  for (std::vector<std::string>& more : below) Add(made, std::move(more));  // `it` may move
}

}  // namespace cloister::vm

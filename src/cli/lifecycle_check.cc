#include "cli/lifecycle_check.h"

namespace cloister::cli {

bool AppliesAtNextStart(Store& store, const std::string& name, lifecycle::Action action) {
  return lifecycle::Lookup(store.State(name), action).verdict == lifecycle::Verdict::kDeferred;
}

}  // namespace cloister::cli

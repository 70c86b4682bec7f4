// Helpers for the CLI's tests (tests only): drive the CLI in-process against a temporary store.
#pragma once

#include <string>
#include <vector>

namespace cloister::cli::testing {

struct Outcome {
  int code = -1;
  std::string out, err;
};

// Runs `cloister --store ROOT ARGS...` in-process (RunCli) with `input` on stdin.
Outcome RunIn(const std::string& store_root, const std::vector<std::string>& args,
              const std::string& input = "");

// A temporary store directory, removed with everything in it at destruction.
class TempStore {
 public:
  explicit TempStore(const std::string& tag = "cli");
  ~TempStore();
  TempStore(const TempStore&) = delete;
  TempStore& operator=(const TempStore&) = delete;
  const std::string& root() const { return root_; }

  // Creates workspace `name` directly through the store (no CLI hooks, so no SSH key): a sparse
  // 16 MiB raw base beside it and a 64 MiB home. A real workspace that verbs find through the
  // store. Returns "" or the error.
  std::string CreateWorkspace(const std::string& name);

  Outcome Run(const std::vector<std::string>& args, const std::string& input = "") const {
    return RunIn(root_, args, input);
  }

 private:
  std::string root_;
};

}  // namespace cloister::cli::testing

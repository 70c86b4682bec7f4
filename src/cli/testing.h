// Helpers for the CLI's tests (tests only): drive the CLI in-process against a temporary store.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace cloister::cli::testing {

struct Outcome {
  int code = -1;
  std::string out, err;
  nlohmann::json json() const { return nlohmann::json::parse(out, nullptr, false); }
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

// The fixture of the verb tests that make workspaces through the real CLI (create's hooks and
// all): a temporary directory dir_ (removed after each test) holding a sparse 64 MiB raw base
// image base_ and the store store_. `prefix` is the mkdtemp prefix (short where a test puts
// sockets under the store).
class SparseBaseTest : public ::testing::Test {
 protected:
  explicit SparseBaseTest(std::string prefix = "/tmp/cloister-cli-test.")
      : prefix_(std::move(prefix)) {}
  void SetUp() override;
  void TearDown() override;

  Outcome Run(const std::vector<std::string>& args, const std::string& input = "") const {
    return RunIn(store_, args, input);
  }
  // `cloister create NAME --image base_ --home-size 64M`.
  Outcome Create(const std::string& name) const;

  std::string dir_, base_, store_;

 private:
  std::string prefix_;
};

}  // namespace cloister::cli::testing

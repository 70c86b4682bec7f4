// FaultInjectionEnv: an Env wrapper for crash tests (as LevelDB's db/fault_injection_test.cc).
//
// It counts mutating steps (see env.h). With CrashAtStep(n), step n and every later operation
// fail, reads included, as if the process had been killed with SIGKILL just before step n: the
// files already written stay as they are. Locks taken before the crash are released when their
// FileLock is destroyed, as the kernel releases a killed process's locks.
// FailStepWith(n, error) fails only step n (a full disk, an EIO) and lets the caller go on.
// FakeFreeSpace() overrides FreeSpace() to test the "disk full" precheck.
//
// Not thread-safe: one test thread drives it.
#pragma once

#include <cstdint>
#include <optional>

#include "store/env.h"

namespace cloister {

class FaultInjectionEnv : public Env {
 public:
  explicit FaultInjectionEnv(Env* base) : base_(base) {}

  // Steps are numbered from 0. -1: never crash.
  void CrashAtStep(int64_t step) { crash_at_ = step; }
  void FailStepWith(int64_t step, Error error) { fail_at_ = step; fail_error_.emplace(error); }
  void FakeFreeSpace(std::optional<uint64_t> bytes) { free_space_ = bytes; }
  void ResetCounter() { steps_ = 0; crashed_ = false; }

  int64_t steps() const { return steps_; }
  bool crashed() const { return crashed_; }

  Result<std::string> ReadFile(const std::string& path, size_t max_bytes = 16 << 20) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<uint64_t> FreeSpace(const std::string& path) override;
  Status WriteFile(const std::string& path, const std::string& data, uint32_t mode = 0644) override;
  Status SyncFile(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to, bool no_replace = false) override;
  Status Link(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status CreateDir(const std::string& path, uint32_t mode = 0755) override;
  Status Truncate(const std::string& path, uint64_t size) override;
  Status CloneFile(const std::string& from, const std::string& to) override;
  Result<CopyMethod> CopyFile(const std::string& from, const std::string& to,
                              const std::function<void(uint64_t)>& progress = {}) override;
  Result<RunOutput> RunTool(const std::vector<std::string>& argv,
                            const RunOptions& options = {}) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path, bool wait) override;

 private:
  // Called before each mutating step: the error to return instead of running it, if any.
  std::optional<Error> Step(const std::string& what);
  std::optional<Error> Dead() const;

  Env* base_;
  int64_t steps_ = 0;
  int64_t crash_at_ = -1;
  int64_t fail_at_ = -1;
  std::optional<Error> fail_error_;
  std::optional<uint64_t> free_space_;
  bool crashed_ = false;
};

}  // namespace cloister

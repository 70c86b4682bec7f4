#include "store/fault_injection_env.h"

namespace cloister {

std::optional<Error> FaultInjectionEnv::Dead() const {
  if (crashed_) return Error(ErrorCode::kIo, "simulated crash (fault injection)");
  return std::nullopt;
}

std::optional<Error> FaultInjectionEnv::Step(const std::string& what) {
  if (auto dead = Dead()) return dead;
  int64_t n = steps_++;
  if (n == crash_at_) {
    crashed_ = true;
    return Error(ErrorCode::kIo, "simulated crash at step " + std::to_string(n) + " (" + what + ")");
  }
  if (n == fail_at_ && fail_error_) return *fail_error_;
  return std::nullopt;
}

#define FI_READ_GUARD() \
  if (auto e = Dead()) return *e
#define FI_STEP(what) \
  if (auto e = Step(what)) return *e

Result<std::string> FaultInjectionEnv::ReadFile(const std::string& path, size_t max_bytes) {
  FI_READ_GUARD();
  return base_->ReadFile(path, max_bytes);
}
Result<FileInfo> FaultInjectionEnv::Stat(const std::string& path) {
  FI_READ_GUARD();
  return base_->Stat(path);
}
Result<std::vector<std::string>> FaultInjectionEnv::ListDir(const std::string& path) {
  FI_READ_GUARD();
  return base_->ListDir(path);
}
Result<uint64_t> FaultInjectionEnv::FreeSpace(const std::string& path) {
  FI_READ_GUARD();
  if (free_space_) return *free_space_;
  return base_->FreeSpace(path);
}
Status FaultInjectionEnv::WriteFile(const std::string& path, const std::string& data,
                                    uint32_t mode) {
  FI_STEP("write " + path);
  return base_->WriteFile(path, data, mode);
}
Status FaultInjectionEnv::SyncFile(const std::string& path) {
  FI_STEP("fsync " + path);
  return base_->SyncFile(path);
}
Status FaultInjectionEnv::SyncDir(const std::string& path) {
  FI_STEP("fsync dir " + path);
  return base_->SyncDir(path);
}
Status FaultInjectionEnv::Rename(const std::string& from, const std::string& to, bool no_replace) {
  FI_STEP("rename " + from + " " + to);
  return base_->Rename(from, to, no_replace);
}
Status FaultInjectionEnv::Link(const std::string& from, const std::string& to) {
  FI_STEP("link " + from + " " + to);
  return base_->Link(from, to);
}
Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  FI_STEP("unlink " + path);
  return base_->RemoveFile(path);
}
Status FaultInjectionEnv::RemoveDir(const std::string& path) {
  FI_STEP("rmdir " + path);
  return base_->RemoveDir(path);
}
Status FaultInjectionEnv::CreateDir(const std::string& path, uint32_t mode) {
  FI_STEP("mkdir " + path);
  return base_->CreateDir(path, mode);
}
Status FaultInjectionEnv::Truncate(const std::string& path, uint64_t size) {
  FI_STEP("truncate " + path);
  return base_->Truncate(path, size);
}
Status FaultInjectionEnv::CloneFile(const std::string& from, const std::string& to) {
  FI_STEP("clone " + from + " " + to);
  return base_->CloneFile(from, to);
}
Result<Env::CopyMethod> FaultInjectionEnv::CopyFile(const std::string& from, const std::string& to,
                                                   const std::function<void(uint64_t)>& progress) {
  FI_STEP("copy " + from + " " + to);
  return base_->CopyFile(from, to, progress);
}
Result<RunOutput> FaultInjectionEnv::RunTool(const std::vector<std::string>& argv,
                                             const RunOptions& options) {
  FI_STEP("run " + (argv.empty() ? std::string() : argv[0]));
  return base_->RunTool(argv, options);
}
Result<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(const std::string& path, bool wait) {
  FI_READ_GUARD();
  return base_->LockFile(path, wait);
}

}  // namespace cloister

#include "vault/keys.h"

#include "base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "base/strings.h"
#include "base/subprocess.h"
#include "vault/crypto.h"

namespace cloister::vault {
namespace {

constexpr size_t kKeySize = 32;

// Creates `path` exclusively with 0600 and `content`. kAlreadyExists if present.
Status CreateExclusive(const std::string& path, std::string_view content) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("create " + path, errno);
  if (Status st = WriteAll(fd, content, path); !st.ok()) {
    close(fd);
    unlink(path.c_str());
    return st.error();
  }
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    unlink(path.c_str());
    return ErrnoError("fsync " + path, e);
  }
  close(fd);
  return OkStatus();
}

// Reads a fixed-size secret file, or creates it from fresh random bytes.
Result<std::string> LoadOrCreateRandomFile(const std::string& keys_dir, const char* name) {
  RETURN_IF_ERROR(EnsurePrivateDir(keys_dir));
  std::string path = keys_dir + "/" + name;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto existing = ReadSmallFile(path, 4096);
    if (existing.ok()) {
      struct stat st;
      if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
        return Error(ErrorCode::kPermissionDenied, path + " is readable by other users",
                     "run `chmod 600 " + path + "`");
      }
      if (existing->size() != kKeySize) {
        return Error(ErrorCode::kCorrupt, path + " has the wrong size");
      }
      return std::move(existing).value();
    }
    if (existing.error().code() != ErrorCode::kNotFound) return existing.error();
    ASSIGN_OR_RETURN(std::string fresh, RandomBytes(kKeySize));
    Status st = CreateExclusive(path, fresh);
    if (st.ok()) return fresh;
    SecureWipe(fresh);
    if (st.error().code() != ErrorCode::kAlreadyExists) return st.error();
    // Lost a race with another process: read theirs.
  }
  return Error(ErrorCode::kIo, "could not create " + path);
}

bool SecretServiceAvailable() {
  const char* bus = std::getenv("DBUS_SESSION_BUS_ADDRESS");
  return bus && *bus && ProgramExists("secret-tool");
}

Result<MasterKey> SecretServiceKey(const std::string& keys_dir) {
  if (!SecretServiceAvailable()) {
    return Error(ErrorCode::kUnavailable, "no Secret Service (session bus or secret-tool missing)",
                 "install libsecret-tools and run inside a desktop session, or set "
                 "CLOISTER_VAULT_KEY_BACKEND=file");
  }
  std::error_code ec;
  std::string install = std::filesystem::weakly_canonical(keys_dir, ec).string();
  std::vector<std::string> attrs = {"application", "cloister", "install", install};
  std::vector<std::string> lookup = {"secret-tool", "lookup"};
  lookup.insert(lookup.end(), attrs.begin(), attrs.end());
  RunOptions quiet;
  quiet.timeout = std::chrono::seconds(20);
  ASSIGN_OR_RETURN(RunOutput out, RunProcess(lookup, quiet));
  std::string hex = Trim(out.out);
  if (!out.success() || hex.empty()) {
    ASSIGN_OR_RETURN(std::string fresh, RandomBytes(kKeySize));
    RunOptions store = quiet;
    store.stdin_data = HexEncode(fresh);  // SECURITY: via stdin, never argv
    SecureWipe(fresh);
    std::vector<std::string> argv = {"secret-tool", "store", "--label=cloister vault key"};
    argv.insert(argv.end(), attrs.begin(), attrs.end());
    Status st = RunProcessChecked(argv, store).ok()
                    ? OkStatus()
                    : Error(ErrorCode::kUnavailable, "secret-tool store failed");
    SecureWipe(store.stdin_data);
    RETURN_IF_ERROR(st);
    ASSIGN_OR_RETURN(out, RunProcessChecked(lookup, quiet));
    hex = Trim(out.out);
  }
  SecureWipe(out.out);
  auto bytes = HexDecode(hex);
  SecureWipe(hex);
  if (!bytes.ok() || bytes->size() != kKeySize) {
    return Error(ErrorCode::kCorrupt, "the Secret Service holds a malformed cloister key");
  }
  return MasterKey{std::move(bytes).value(), "secret-service"};
}

}  // namespace

KeyBackend KeyBackendFromEnv() {
  const char* v = std::getenv("CLOISTER_VAULT_KEY_BACKEND");
  std::string s = v ? v : "";
  if (s == "file") return KeyBackend::kFile;
  if (s == "secret-service") return KeyBackend::kSecretService;
  return KeyBackend::kAuto;
}

Status EnsurePrivateDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error(ErrorCode::kIo, "create " + dir + ": " + ec.message());
  if (chmod(dir.c_str(), 0700) != 0) return ErrnoError("chmod " + dir, errno);
  return OkStatus();
}

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  return ReadFileBounded(path, max_bytes);
}

Status WriteFileAtomic(const std::string& path, std::string_view content, int mode) {
  return cloister::WriteFileAtomic(path, content, static_cast<mode_t>(mode));
}

Result<MasterKey> LoadOrCreateMasterKey(const std::string& keys_dir, KeyBackend backend) {
  std::string file = keys_dir + "/" + kVaultKeyFile;
  bool file_exists = access(file.c_str(), F_OK) == 0;
  if (backend == KeyBackend::kSecretService ||
      (backend == KeyBackend::kAuto && !file_exists && SecretServiceAvailable())) {
    auto key = SecretServiceKey(keys_dir);
    if (key.ok() || backend == KeyBackend::kSecretService) return key;
    // kAuto: the bus was there but refused (locked keyring, no daemon): fall back to the file.
  }
  ASSIGN_OR_RETURN(std::string bytes, LoadOrCreateRandomFile(keys_dir, kVaultKeyFile));
  return MasterKey{std::move(bytes), "file"};
}

Result<std::string> LoadOrCreateSalt(const std::string& keys_dir) {
  return LoadOrCreateRandomFile(keys_dir, kPlaceholderSaltFile);
}

}  // namespace cloister::vault

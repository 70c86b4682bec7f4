#include "image/npm_tarball.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "base/subprocess.h"
#include "image/build_util.h"

namespace cloister::image {

namespace fs = std::filesystem;

std::string NpmCacheDir() {
  if (const char* c = std::getenv("CLOISTER_NPM_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/cloister/npm";
  const char* h = std::getenv("HOME");
  return std::string(h && *h ? h : "/root") + "/.cache/cloister/npm";
}

Result<std::string> NpmIntegrityOfFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return ErrnoError("open " + path, errno);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha512(), nullptr) != 1) {
    return Error(ErrorCode::kInternal, "EVP_DigestInit sha512 failed");
  }
  std::vector<unsigned char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    EVP_DigestUpdate(ctx.get(), buf.data(), n);
  }
  if (std::ferror(f.get())) return ErrnoError("read " + path, errno);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string b64(4 * ((len + 2) / 3) + 1, '\0');
  int w = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), md, static_cast<int>(len));
  b64.resize(static_cast<size_t>(w));
  return "sha512-" + b64;
}

Result<std::string> VerifiedNpmTarball(const NpmTarball& t, const std::string& cache_dir) {
  std::string path = cache_dir + "/" + std::string(t.file);
  if (access(path.c_str(), R_OK) != 0) {
    return Error(ErrorCode::kNotFound,
                 "npm tarball " + std::string(t.name) + "@" + std::string(t.version) +
                     " is not in the cache " + cache_dir,
                 "run `scripts/install-deps.sh test` (it runs `npm pack` into that cache)");
  }
  ASSIGN_OR_RETURN(std::string got, NpmIntegrityOfFile(path));
  if (got != t.integrity) {
    return Error(ErrorCode::kCorrupt,
                 path + ": integrity " + got + " is not the pinned " + std::string(t.integrity),
                 "delete it and run `scripts/install-deps.sh test` again");
  }
  return path;
}

Status UnpackNpmTarball(const std::string& tarball, const std::string& dest) {
  std::error_code ec;
  if (fs::exists(dest, ec)) return Error(ErrorCode::kAlreadyExists, dest + " already exists");
  std::string tmp = dest + ".unpack";
  RETURN_IF_ERROR(RemoveTree(tmp));
  RETURN_IF_ERROR(MakeDirs(tmp));
  // npm tarballs hold one top directory, `package/`; owners and modes are normalised.
  auto r = RunProcessChecked({"tar", "-xzf", tarball, "-C", tmp, "--no-same-owner",
                              "--no-same-permissions", "--delay-directory-restore"});
  if (!r.ok()) return r.error().WithContext("unpacking " + tarball);
  if (!fs::is_directory(tmp + "/package", ec)) {
    return Error(ErrorCode::kCorrupt, tarball + " has no package/ directory");
  }
  RETURN_IF_ERROR(MakeDirs(fs::path(dest).parent_path().string()));
  fs::rename(tmp + "/package", dest, ec);
  if (ec) return Error(ErrorCode::kInternal, "rename to " + dest + ": " + ec.message());
  return RemoveTree(tmp);
}

}  // namespace cloister::image

#include "image/npm_tarball.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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
                 "an image build fetches it with `npm pack`; so does `scripts/install-deps.sh test`");
  }
  ASSIGN_OR_RETURN(std::string got, NpmIntegrityOfFile(path));
  if (got != t.integrity) {
    return Error(ErrorCode::kCorrupt,
                 path + ": integrity " + got + " is not the pinned " + std::string(t.integrity),
                 "delete it; the next image build fetches it again");
  }
  return path;
}

Result<std::string> EnsureNpmTarball(const NpmTarball& t, const std::string& cache_dir,
                                     const std::function<void(const std::string&)>& progress) {
  const std::string spec = std::string(t.name) + "@" + std::string(t.version);
  const std::string path = cache_dir + "/" + std::string(t.file);
  if (access(path.c_str(), F_OK) == 0) return VerifiedNpmTarball(t, cache_dir);
  if (!ProgramExists("npm")) {
    return Error(ErrorCode::kUnavailable,
                 "npm tarball " + spec + " is not in the cache " + cache_dir +
                     ", and npm is not installed to fetch it",
                 "install npm (`scripts/install-deps.sh run` does), or put " +
                     std::string(t.file) + " there");
  }
  RETURN_IF_ERROR(MakeDirs(cache_dir));
  // SECURITY: the fetched bytes are untrusted until their digest equals the pin; they stay in a
  // directory of their own until then and are deleted on any failure.
  std::string tmpl = cache_dir + "/.fetch-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return ErrnoError("mkdtemp in " + cache_dir, errno);
  const std::string tmp = tmpl;
  auto fail = [&](Error e) -> Result<std::string> {
    (void)RemoveTree(tmp);
    return e;
  };
  if (progress) progress("image: fetching " + spec + " into " + cache_dir + " (npm pack, once) ...");
  RunOptions o;
  o.env_set = {{"npm_config_update_notifier", "false"}, {"npm_config_fund", "false"},
               {"npm_config_audit", "false"}};
  o.timeout = std::chrono::minutes(10);
  auto r = RunProcess({"npm", "pack", "--silent", "--pack-destination", tmp, spec}, o);
  if (!r.ok()) return fail(r.error().WithContext("npm pack " + spec));
  if (!r->success()) {
    std::string err = r->err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (err.size() > 400) err = "..." + err.substr(err.size() - 400);
    return fail(Error(ErrorCode::kUnavailable,
                      "npm pack " + spec + " failed" + (r->timed_out ? " (timed out)" : "") +
                          (err.empty() ? "" : ": " + err),
                      "check npm's registry and proxy settings (npm config list), then build "
                      "again"));
  }
  const std::string fetched = tmp + "/" + std::string(t.file);
  auto got = NpmIntegrityOfFile(fetched);
  if (!got.ok()) {
    return fail(got.error().WithContext("npm pack " + spec + " wrote no " + std::string(t.file)));
  }
  if (*got != t.integrity) {
    return fail(Error(ErrorCode::kCorrupt,
                      "npm pack " + spec + " fetched a tarball whose integrity " + *got +
                          " is not the pinned " + std::string(t.integrity) + "; nothing was kept",
                      "the registry served other bytes for a pinned version: do not use them"));
  }
  std::error_code ec;
  uint64_t size = fs::file_size(fetched, ec);
  fs::rename(fetched, path, ec);
  if (ec) return fail(Error(ErrorCode::kInternal, "rename to " + path + ": " + ec.message()));
  (void)RemoveTree(tmp);
  if (progress) {
    progress("image: fetched " + spec + " (" + std::to_string(size >> 10) +
             " KiB), integrity checked against the pin");
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

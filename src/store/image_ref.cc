#include "store/image_ref.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <unistd.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "base/json_util.h"
#include "base/strings.h"
#include "store/layout.h"

namespace cloister {

Result<std::string> Sha256File(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::string buf(1 << 20, '\0');
  while (true) {
    ssize_t r = read(fd, buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return ErrnoError("read " + path, err);
    }
    if (r == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(r));
  }
  close(fd);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  return HexEncode(std::string(reinterpret_cast<char*>(digest), len));
}

Result<ImageIdentity> IdentifyRawImage(Env* env, const std::string& spec) {
  char* real = realpath(spec.c_str(), nullptr);
  if (!real) {
    return Error(ErrorCode::kNotFound, "image not found: " + spec,
                 "pass --image with the path of an existing raw disk image");
  }
  std::string path = real;
  free(real);
  ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
  if (!info.is_regular) {
    return Error(ErrorCode::kInvalidArgument, "image " + path + " is not a regular file",
                 "pass --image with the path of a raw disk image file");
  }
  if (info.apparent == 0 || info.apparent % 512 != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "image " + path + " is not a raw disk image (size is not a multiple of 512)",
                 "pass a raw disk image (qemu-img convert -O raw)");
  }
  {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open " + path, errno);
    char magic[4] = {};
    ssize_t r = pread(fd, magic, 4, 0);
    close(fd);
    if (r == 4 && std::string(magic, 4) == std::string("QFI\xfb", 4)) {
      return Error(ErrorCode::kInvalidArgument, "image " + path + " is qcow2, not raw",
                   "convert it: qemu-img convert -O raw IMAGE base.raw");
    }
  }
  ImageIdentity id;
  id.name = BaseName(path);
  id.path = path;
  id.size = info.apparent;
  id.mtime_ns = info.mtime_ns;
  return id;
}

Result<ImageIdentity> ResolveImage(Env* env, const std::string& images_dir,
                                   const std::string& spec) {
  if (spec.empty()) {
    return Error(ErrorCode::kInvalidArgument, "no base image given",
                 "pass --image /path/to/base.raw (a raw disk image)");
  }
  ASSIGN_OR_RETURN(ImageIdentity id, IdentifyRawImage(env, spec));
  const std::string& path = id.path;
  ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));

  // The hash cache: a lost or damaged cache only costs a re-hash.
  std::string cache_path = JoinPath(images_dir, layout::kImageHashCacheFile);
  nlohmann::json cache = nlohmann::json::object();
  if (env->Exists(cache_path)) {
    Result<std::string> text = env->ReadFile(cache_path);
    if (text.ok()) {
      nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
      if (!doc.is_discarded() && doc.is_object()) cache = doc;
    }
  }
  auto key_matches = [&](const nlohmann::json& e) {
    return e.is_object() && JsonInt<uint64_t>(e, "size", 0) == info.apparent &&
           JsonInt<int64_t>(e, "mtime_ns", 0) == info.mtime_ns &&
           JsonInt<uint64_t>(e, "inode", 0) == info.inode && e.contains("sha256") &&
           e["sha256"].is_string();
  };
  if (cache.contains(path) && key_matches(cache[path])) {
    id.sha256 = cache[path]["sha256"].get<std::string>();
    return id;
  }
  ASSIGN_OR_RETURN(id.sha256, Sha256File(path));
  cache[path] = {{"size", info.apparent},
                 {"mtime_ns", info.mtime_ns},
                 {"inode", info.inode},
                 {"sha256", id.sha256}};
  RETURN_IF_ERROR(env->CreateDirs(images_dir));
  RETURN_IF_ERROR(env->AtomicWriteFile(cache_path, cache.dump(2) + "\n"));
  return id;
}

Status CheckBaseUnchanged(Env* env, const ImageIdentity& identity) {
  ASSIGN_OR_RETURN(FileInfo info, env->Stat(identity.path));
  if (!info.exists) {
    return Error(ErrorCode::kNotFound, "base image " + identity.path + " is gone",
                 "put the image back, or `cloister rm` the workspace");
  }
  if (info.apparent != identity.size || info.mtime_ns != identity.mtime_ns) {
    return Error(ErrorCode::kFailedPrecondition,
                 "base image " + identity.path + " changed since the workspace was created",
                 "restore the original image; a base image must never be modified");
  }
  return OkStatus();
}

}  // namespace cloister

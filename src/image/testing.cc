#include "image/testing.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>

#include "catalog/names.h"
#include "catalog/sha256.h"
#include "image/boot_hook.h"
#include "image/builder.h"

namespace cloister::image::testing {
namespace {

std::string TestCacheRoot() {
  const char* b = std::getenv("CLOISTER_BINARY_DIR");
  return b && *b ? std::string(b) + "/test-cache" : std::string("/tmp/cloister-test-cache");
}

}  // namespace

std::string TestCacheDir() { return TestCacheRoot() + "/debs"; }

Result<SharedImage> SharedTestImage() {
  std::string root = TestCacheRoot();
  RETURN_IF_ERROR(MakeDirs(root));
  std::string lock_path = root + "/image-test.lock";
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open " + lock_path, errno);
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int e = errno;
      close(fd);
      return ErrnoError("flock " + lock_path, e);
    }
  }
  SharedImage img;
  img.dir = root + "/image-test";
  std::string marker = img.dir + "/.recipe";
  auto have = ReadFile(marker);
  bool fresh = have.ok() && *have == std::string(kTestRecipeVersion) + "\n";
  Status status;
  if (!fresh) {
    BuildOptions o;
    o.out_dir = img.dir;
    o.work_dir = root + "/image-test.work";
    o.cache_dir = TestCacheDir();
    o.progress = [](const std::string& l) { std::cerr << l << "\n"; };
    (void)RemoveTree(img.dir);
    auto e = BuildTestImage(o);
    if (e.ok()) {
      img.entry = *e;
      status = WriteFile(marker, std::string(kTestRecipeVersion) + "\n");
    } else {
      status = e.error();
    }
  } else {
    img.entry.name = kTestImageName;
    img.entry.arch = "amd64";
    img.entry.kernel_cmdline = kKernelCmdline;
    for (auto [role, file] : {std::pair{catalog::kRoleDisk, catalog::names::kDiskFile},
                              std::pair{catalog::kRoleKernel, catalog::names::kKernelFile},
                              std::pair{catalog::kRoleInitrd, catalog::names::kInitrdFile}}) {
      auto d = catalog::Sha256File(img.dir + "/" + file);
      if (!d.ok()) {
        status = d.error();
        break;
      }
      img.entry.artifacts.push_back({role, file, d->size, d->sha256});
    }
  }
  close(fd);
  if (!status.ok()) return status.error();
  return img;
}

}  // namespace cloister::image::testing

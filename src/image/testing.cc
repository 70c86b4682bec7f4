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
#include "base/file_util.h"
#include "base/subprocess.h"

namespace cloister::image::testing {
namespace {

Status HashArtifacts(SharedImage& img, const char* name = kTestImageName) {
  img.entry.name = name;
  if (img.entry.version.empty()) img.entry.version = "cached";  // the recipe's marker says which
  img.entry.arch = "amd64";
  img.entry.kernel_cmdline = kKernelCmdline;
  img.entry.artifacts.clear();
  for (auto [role, file] : {std::pair{catalog::kRoleDisk, catalog::names::kDiskFile},
                            std::pair{catalog::kRoleKernel, catalog::names::kKernelFile},
                            std::pair{catalog::kRoleInitrd, catalog::names::kInitrdFile}}) {
    ASSIGN_OR_RETURN(auto d, catalog::Sha256File(img.dir + "/" + file));
    img.entry.artifacts.push_back({role, file, d.size, d.sha256});
  }
  return Status();
}

std::string TestCacheRoot() {
  const char* b = std::getenv("CLOISTER_BINARY_DIR");
  return b && *b ? std::string(b) + "/test-cache" : std::string("/tmp/cloister-test-cache");
}

}  // namespace

std::string TestCacheDir() { return TestCacheRoot() + "/debs"; }

namespace {

// A recipe's image, built once per build tree into TEST-CACHE/image-<tag>/ under a lock.
Result<SharedImage> SharedRecipeImage(const std::string& tag, const char* name,
                                      const char* recipe_version,
                                      Result<catalog::ImageEntry> (*build)(const BuildOptions&)) {
  std::string root = TestCacheRoot();
  RETURN_IF_ERROR(MakeDirs(root));
  ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::Acquire(root + "/image-" + tag + ".lock"));
  SharedImage img;
  img.dir = root + "/image-" + tag;
  std::string marker = img.dir + "/.recipe";
  auto have = ReadFile(marker);
  bool fresh = have.ok() && *have == std::string(recipe_version) + "\n";
  Status status;
  if (!fresh) {
    BuildOptions o;
    o.out_dir = img.dir;
    o.work_dir = root + "/image-" + tag + ".work";
    o.cache_dir = TestCacheDir();
    o.progress = [](const std::string& l) { std::cerr << l << "\n"; };
    (void)RemoveTree(img.dir);
    auto e = build(o);
    if (e.ok()) {
      img.entry = *e;
      status = WriteFile(marker, std::string(recipe_version) + "\n");
    } else {
      status = e.error();
    }
  } else {
    status = HashArtifacts(img, name);
  }
  if (!status.ok()) return status.error();
  return img;
}

}  // namespace

Result<SharedImage> SharedTestImage() {
  return SharedRecipeImage("test", kTestImageName, kTestRecipeVersion, &BuildTestImage);
}

Result<SharedImage> SharedBrowserTestImage() {
  return SharedRecipeImage("browser", kBrowserImageName, kBrowserRecipeVersion,
                           &BuildBrowserImage);
}

Result<SharedImage> SharedBuilderTestImage() {
  return SharedRecipeImage("builder", kBuilderImageName, kBuilderRecipeVersion,
                           &BuildBuilderImage);
}

Result<SharedImage> SharedTestImageWithDisk(uint64_t disk_bytes) {
  ASSIGN_OR_RETURN(SharedImage base, SharedTestImage());
  std::string root = TestCacheRoot();
  std::string tag = "image-test-" + std::to_string(disk_bytes >> 20) + "m";
  ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::Acquire(root + "/" + tag + ".lock"));
  SharedImage img;
  img.dir = root + "/" + tag;
  std::string marker = img.dir + "/.recipe";
  std::string want = std::string(kTestRecipeVersion) + "\n" + base.entry.artifacts[0].sha256 + "\n";
  auto have = ReadFile(marker);
  Status status;
  if (!have.ok() || *have != want) {
    std::cerr << "image: growing a copy of the test image to " << (disk_bytes >> 20) << " MiB\n";
    std::string tmp = img.dir + ".tmp";
    status = [&]() -> Status {
      RETURN_IF_ERROR(RemoveTree(tmp));
      RETURN_IF_ERROR(RemoveTree(img.dir));
      RETURN_IF_ERROR(MakeDirs(tmp));
      std::string disk = tmp + "/" + catalog::names::kDiskFile;
      RETURN_IF_ERROR(RunProcessChecked({"cp", "--sparse=always", base.dir + "/" +
                                         catalog::names::kDiskFile, disk}));
      RETURN_IF_ERROR(RunProcessChecked({"truncate", "-s", std::to_string(disk_bytes), disk}));
      RETURN_IF_ERROR(RunProcessChecked({"e2fsck", "-f", "-p", disk}));
      RETURN_IF_ERROR(RunProcessChecked({"resize2fs", disk}));
      for (const char* f : {catalog::names::kKernelFile, catalog::names::kInitrdFile}) {
        RETURN_IF_ERROR(CopyFile(base.dir + "/" + f, tmp + "/" + f));
      }
      RETURN_IF_ERROR(WriteFile(tmp + "/.recipe", want));
      std::error_code ec;
      std::filesystem::rename(tmp, img.dir, ec);
      if (ec) return Error(ErrorCode::kIo, "rename " + tmp + ": " + ec.message());
      return Status();
    }();
  }
  if (status.ok()) status = HashArtifacts(img);
  if (!status.ok()) return status.error();
  return img;
}

}  // namespace cloister::image::testing

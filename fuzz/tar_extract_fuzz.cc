// Fuzzes the host side of `cloister cp NAME:PATH ...`: a guest's tar stream through ExtractTar
// (into a fresh temporary directory, removed afterwards) and FilterTar (to /dev/null). Checks the
// containment property too: nothing may appear beside the destination directory.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "transfer/tar.h"

using namespace cloister::transfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 20) return 0;
  static struct Root {
    Root() {
      char tmpl[] = "/tmp/cloister-tar-fuzz-XXXXXX";
      if (mkdtemp(tmpl) == nullptr) abort();
      path = tmpl;
    }
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
    std::string path;
  } scratch;
  const std::string& root = scratch.path;
  std::string dest = root + "/dest";
  std::filesystem::create_directories(dest);
  int fd = memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  EntryPolicy policy;
  policy.top = "top";
  lseek(fd, 0, SEEK_SET);
  (void)ExtractTar(fd, dest, policy);
  // Containment: the root holds only dest (an escape would leave a file beside it).
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (e.path().filename() != "dest") abort();
  }
  std::error_code ec;
  std::filesystem::remove_all(dest, ec);
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  lseek(fd, 0, SEEK_SET);
  policy.rename_top = "renamed";
  (void)FilterTar(fd, null, policy);
  close(null);
  close(fd);
  return 0;
}

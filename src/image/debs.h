// Debian packages for image builds: resolved with apt-cache, fetched with `apt-get download` into a
// cache directory (reused by later builds), extracted with dpkg-deb.
//
// The cache is shared by concurrent builds (tests run in parallel): every operation on it holds an
// exclusive flock on CACHE/.lock.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace cloister::image {

struct DebPackage {
  std::string name;     // "tmux"
  std::string version;  // "3.3a-3"
  std::string arch;     // "amd64" / "all"
  std::string path;     // the .deb in the cache
};

// The candidate version of each package (as apt would install it), from the cache or downloaded.
Result<std::vector<DebPackage>> FetchDebs(const std::string& cache_dir,
                                          const std::vector<std::string>& packages);

// The packages an install of `roots` onto an empty system needs (Depends and Pre-Depends, no
// Recommends), as apt itself resolves them: `apt-get -s --no-install-recommends install` against
// an empty dpkg status, in apt's install order. Same archive state in, same list out.
Result<std::vector<std::string>> DependencyClosure(const std::vector<std::string>& roots);
// The package names of the "Inst NAME (...)" lines of `apt-get -s` output (DependencyClosure).
std::vector<std::string> ParseSimulatedInstalls(const std::string& apt_output);

// Debian's standard amd64 kernel package ("linux-image-6.1.0-NN-amd64"), the one that
// linux-image-amd64 currently depends on. Never the cloud flavour (it lacks 9p).
Result<std::string> StandardKernelPackage();

// dpkg-deb -x DEB DIR.
Status ExtractDeb(const std::string& deb, const std::string& dir);

struct KernelTree {
  std::string root;     // extracted package (boot/, lib/modules/RELEASE/ with modules.dep)
  std::string release;  // "6.1.0-57-amd64"
  std::string vmlinuz;  // root/boot/vmlinuz-RELEASE
  std::string modules;  // root/lib/modules/RELEASE
};

// Extracts the kernel package once into CACHE/kernels/<deb name>/ and runs depmod there.
Result<KernelTree> PrepareKernel(const std::string& cache_dir, const DebPackage& kernel_deb);

}  // namespace cloister::image

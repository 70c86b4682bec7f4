// cloister-ext4-times IMAGE EPOCH: the builder VM's last step on an image's disk (image/oci/):
// every inode's times and the superblock's write time set to EPOCH (image/ext4_times.h), the
// same normalisation the host's recipes apply. Linked statically; pushed into the builder VM.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "image/ext4_times.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cloister-ext4-times IMAGE EPOCH\n");
    return 2;
  }
  char* end = nullptr;
  long long epoch = std::strtoll(argv[2], &end, 10);
  if (!end || *end || epoch < 0) {
    std::fprintf(stderr, "cloister-ext4-times: EPOCH must be a number of seconds\n");
    return 2;
  }
  cloister::Status s = cloister::image::NormalizeExt4Times(argv[1], epoch);
  if (!s.ok()) {
    std::fprintf(stderr, "cloister-ext4-times: %s\n", s.error().ToString().c_str());
    return 1;
  }
  return 0;
}

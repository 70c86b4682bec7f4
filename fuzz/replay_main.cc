// Replays a fuzz corpus through LLVMFuzzerTestOneInput without libFuzzer, so every CI run (and any
// compiler) exercises each parser on its corpus. Usage: NAME_replay DIR_OR_FILE...
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void RunOne(const std::filesystem::path& p, int& count) {
  std::ifstream f(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ++count;
}

int main(int argc, char** argv) {
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      for (const auto& f : files) RunOne(f, count);
    } else {
      RunOne(p, count);
    }
  }
  // Also the degenerate inputs every parser must survive.
  LLVMFuzzerTestOneInput(nullptr, 0);
  const uint8_t one = 0xff;
  LLVMFuzzerTestOneInput(&one, 1);
  if (count == 0) {
    std::fprintf(stderr, "no corpus files found\n");
    return 1;
  }
  std::printf("replayed %d corpus files\n", count);
  return 0;
}

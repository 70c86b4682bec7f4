// Fuzzes vm/git_config_paths.h: the listing `git config --list --show-origin -z` prints of
// configuration files a guest may have written (an include target in a shared folder), then the
// paths each entry names (shell words of commands, `~` and relative paths). Every named path must
// be absolute and lexically normal.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vm/git_config_paths.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view listing(reinterpret_cast<const char*>(data), size);
  auto entries = cloister::vm::ParseGitConfigList(listing);
  if (!entries.ok()) return 0;
  cloister::vm::GitPathBase base;
  base.base = "/share/repo";
  base.homes = {"/home/u"};
  base.user_home = [](const std::string& user) -> std::optional<std::string> { return "/home/" + user; };
  for (const cloister::vm::GitConfigEntry& e : *entries) {
    for (const cloister::vm::NamedPath& p : cloister::vm::PathsNamedBy(e, base)) {
      if (p.path.empty() || p.path[0] != '/' || cloister::vm::NormalizeAbsolute(p.path) != p.path) __builtin_trap();
    }
    (void)cloister::vm::ShellWords(e.value);
  }
  return 0;
}

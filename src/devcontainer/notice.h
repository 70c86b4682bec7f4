// What reading a devcontainer.json (or a Feature's devcontainer-feature.json) left unapplied:
// each key cloister does not act on is reported once, with its line, never dropped silently.
#pragma once

#include <string>
#include <vector>

namespace cloister::devcontainer {

struct Notice {
  std::string source;  // "devcontainer.json", "./go/devcontainer-feature.json"
  int line = 0;        // 0: unknown
  std::string key;     // the key as written
  std::string why;     // what cloister does instead ("not applied: ...")
  // "devcontainer.json:12: \"runArgs\": not applied: ..."
  std::string ToString() const {
    return source + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": \"" + key +
           "\": " + why;
  }
};

using Notices = std::vector<Notice>;

}  // namespace cloister::devcontainer

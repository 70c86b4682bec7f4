// A build context's .dockerignore, as Docker reads it: one pattern per line, `#` comments, blank
// lines ignored; each pattern is cleaned (leading and trailing '/', "./" and "." removed) and
// matched against a path relative to the context, segment by segment: `*` and `?` and `[...]`
// within a segment (fnmatch), `**` any number of segments; a pattern that matches a folder
// excludes everything under it; `!PATTERN` includes again what an earlier pattern excluded. The
// last pattern that matches decides.
//
// SECURITY: the file is the repository's: bounded (kMaxDockerignoreBytes, kMaxPatterns); a
// pattern only ever removes paths from what is copied, never names a path outside the context.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::devcontainer {

inline constexpr size_t kMaxDockerignoreBytes = 64 * 1024;
inline constexpr size_t kMaxPatterns = 1024;

class DockerIgnore {
 public:
  static Result<DockerIgnore> Parse(std::string_view text);
  // `path`: relative to the context, '/'-separated, no leading "./".
  bool Excluded(const std::string& path) const;
  // Whether some `!` pattern could include a path under an excluded folder (so the folder must
  // still be walked).
  bool HasExceptions() const { return has_exceptions_; }
  bool empty() const { return patterns_.empty(); }

 private:
  struct Pattern {
    std::vector<std::string> segments;
    bool exception = false;
  };
  std::vector<Pattern> patterns_;
  bool has_exceptions_ = false;
};

}  // namespace cloister::devcontainer

#include "devcontainer/dockerignore.h"

#include <fnmatch.h>

#include <cstdint>
#include <functional>

#include "base/strings.h"

namespace cloister::devcontainer {
namespace {

// Whether `pat` matches `path` or one of its parent folders (a prefix of its segments): `**` any
// number of segments, every other segment by fnmatch. Memoised: linear in |pat| * |path|.
bool MatchesOrParent(const std::vector<std::string>& pat, const std::vector<std::string>& path) {
  const size_t n = pat.size(), m = path.size();
  std::vector<int8_t> memo((n + 1) * (m + 1), -1);  // -1 unknown, 0 no, 1 yes
  std::function<bool(size_t, size_t)> match = [&](size_t i, size_t j) -> bool {
    int8_t& r = memo[i * (m + 1) + j];
    if (r >= 0) return r == 1;
    bool ok;
    if (i == n) {
      ok = true;  // the rest of `path` lies under what the pattern matched
    } else if (pat[i] == "**") {
      ok = match(i + 1, j) || (j < m && match(i, j + 1));
    } else {
      ok = j < m && fnmatch(pat[i].c_str(), path[j].c_str(), 0) == 0 && match(i + 1, j + 1);
    }
    r = ok ? 1 : 0;
    return ok;
  };
  return match(0, 0);
}

}  // namespace

Result<DockerIgnore> DockerIgnore::Parse(std::string_view text) {
  if (text.size() > kMaxDockerignoreBytes) {
    return Error(ErrorCode::kInvalidArgument,
                 ".dockerignore is larger than " + std::to_string(kMaxDockerignoreBytes) + " bytes");
  }
  DockerIgnore d;
  for (std::string line : Split(text, '\n')) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    line = Trim(line);
    Pattern p;
    if (!line.empty() && line[0] == '!') {
      p.exception = true;
      line = Trim(line.substr(1));
    }
    for (const std::string& s : Split(line, '/')) {
      if (s.empty() || s == ".") continue;
      if (s == ".." ) {
        if (!p.segments.empty()) p.segments.pop_back();
        continue;
      }
      p.segments.push_back(s);
    }
    if (p.segments.empty()) continue;
    if (p.segments.size() > 64) {
      return Error(ErrorCode::kInvalidArgument, ".dockerignore has a pattern of more than 64 folders");
    }
    if (d.patterns_.size() >= kMaxPatterns) {
      return Error(ErrorCode::kInvalidArgument,
                   ".dockerignore has more than " + std::to_string(kMaxPatterns) + " patterns");
    }
    d.has_exceptions_ |= p.exception;
    d.patterns_.push_back(std::move(p));
  }
  return d;
}

bool DockerIgnore::Excluded(const std::string& path) const {
  std::vector<std::string> parts;
  for (const std::string& s : Split(path, '/')) {
    if (!s.empty() && s != ".") parts.push_back(s);
  }
  bool excluded = false;
  for (const Pattern& p : patterns_) {
    if (MatchesOrParent(p.segments, parts)) excluded = !p.exception;
  }
  return excluded;
}

}  // namespace cloister::devcontainer

#include "transfer/git_bundle.h"

#include <algorithm>
#include <set>

#include "base/terminal_text.h"

namespace cloister::transfer {
namespace {

Error Bad(const std::string& why) {
  return Error(ErrorCode::kCorrupt, "the workspace's git bundle is malformed: " + why,
               "nothing was fetched; check the repository in the workspace with `cloister exec`");
}

bool IsHexOid(std::string_view s, const std::string& format) {
  size_t want = format == "sha256" ? 64 : 40;
  if (s.size() != want) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

bool ValidRefName(std::string_view name) {
  if (name == "HEAD") return true;
  if (name.size() < 6 || name.size() > 1024 || name.substr(0, 5) != "refs/") return false;
  if (name.back() == '/' || name.back() == '.') return false;
  if (name.find("..") != std::string_view::npos || name.find("@{") != std::string_view::npos ||
      name.find("//") != std::string_view::npos) {
    return false;
  }
  for (char c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == ' ' || c == '~' || c == '^' || c == ':' || c == '?' ||
        c == '*' || c == '[' || c == '\\') {
      return false;
    }
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view comp = name.substr(start, end - start);
    if (comp.empty() || comp[0] == '.') return false;
    if (comp.size() >= 5 && comp.substr(comp.size() - 5) == ".lock") return false;
    start = end + 1;
  }
  return true;
}

// SECURITY: parses the guest's bytes; every bound is checked before the data is used.
Result<BundleHeader> ParseBundleHeader(std::string_view bytes) {
  BundleHeader h;
  size_t pos = 0;
  auto next_line = [&](std::string_view* line) -> Status {
    if (pos >= bytes.size() || pos >= kMaxBundleHeader) {
      return Bad("the header does not end within " + std::to_string(kMaxBundleHeader) + " bytes");
    }
    size_t nl = bytes.find('\n', pos);
    if (nl == std::string_view::npos) return Bad("the header is cut short");
    if (nl - pos > kMaxBundleLine) return Bad("a header line is too long");
    if (nl + 1 > kMaxBundleHeader) return Bad("the header is too long");
    *line = bytes.substr(pos, nl - pos);
    pos = nl + 1;
    return OkStatus();
  };
  std::string_view line;
  RETURN_IF_ERROR(next_line(&line));
  if (line == "# v2 git bundle") {
    h.version = 2;
  } else if (line == "# v3 git bundle") {
    h.version = 3;
  } else {
    return Bad("not a v2 or v3 git bundle");
  }
  bool in_refs = false;
  while (true) {
    RETURN_IF_ERROR(next_line(&line));
    if (line.empty()) break;
    if (line[0] == '@') {
      if (h.version != 3 || in_refs || !h.prerequisites.empty()) {
        return Bad("a capability line out of place");
      }
      if (line == "@object-format=sha1" || line == "@object-format=sha256") {
        h.object_format = std::string(line.substr(15));
        continue;
      }
      return Bad("unsupported capability '" + TerminalSafe(std::string(line.substr(0, 64)), false) +
                 "' (only object-format is accepted)");
    }
    if (line[0] == '-') {
      if (in_refs) return Bad("a prerequisite after the references");
      std::string_view rest = line.substr(1);
      std::string_view oid = rest.substr(0, rest.find(' '));
      if (!IsHexOid(oid, h.object_format)) return Bad("a prerequisite is not an object id");
      if (h.prerequisites.size() >= kMaxBundleRefs) return Bad("too many prerequisites");
      h.prerequisites.emplace_back(oid);
      continue;
    }
    in_refs = true;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) return Bad("a reference line without a name");
    std::string_view oid = line.substr(0, sp), name = line.substr(sp + 1);
    if (!IsHexOid(oid, h.object_format)) return Bad("a reference's object id is malformed");
    if (!ValidRefName(name)) return Bad("a reference name is not a valid git reference");
    if (h.refs.size() >= kMaxBundleRefs) return Bad("too many references");
    h.refs.push_back({std::string(oid), std::string(name)});
  }
  if (h.refs.empty()) return Bad("it holds no reference");
  h.header_size = pos;
  return h;
}

Status CheckBundleRefs(const BundleHeader& header, const std::vector<std::string>& wanted) {
  std::set<std::string> want(wanted.begin(), wanted.end()), seen;
  for (const BundleRef& r : header.refs) {
    if (!want.count(r.name)) {
      return Error(ErrorCode::kPermissionDenied,
                   "the workspace's bundle holds " + r.name + ", which was not asked for",
                   "nothing was fetched: only the requested branch may come back");
    }
    if (!seen.insert(r.name).second) {
      return Error(ErrorCode::kCorrupt, "the workspace's bundle names " + r.name + " twice");
    }
  }
  for (const std::string& w : want) {
    if (!seen.count(w)) {
      return Error(ErrorCode::kNotFound, "the workspace's bundle does not hold " + w,
                   "check the branch name in the workspace: `cloister exec NAME -- git branch`");
    }
  }
  return OkStatus();
}

}  // namespace cloister::transfer

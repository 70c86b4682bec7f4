#include "image/kmod.h"

#include <functional>
#include <map>
#include <set>

#include "base/strings.h"

namespace cloister::image {
namespace {

std::string Normalize(std::string_view name) {
  std::string n(name);
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  return n;
}

}  // namespace

std::string ModuleNameFromPath(std::string_view path) {
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  size_t ko = base.find(".ko");
  if (ko != std::string_view::npos) base = base.substr(0, ko);
  return Normalize(base);
}

bool IsBuiltin(std::string_view modules_builtin, const std::string& name) {
  std::string want = Normalize(name);
  for (const std::string& line : Split(modules_builtin, '\n')) {
    std::string t = Trim(line);
    if (!t.empty() && ModuleNameFromPath(t) == want) return true;
  }
  return false;
}

Result<std::vector<std::string>> ModuleLoadOrder(std::string_view modules_dep,
                                                 const std::vector<std::string>& wanted) {
  std::map<std::string, std::string> path_by_name;
  std::map<std::string, std::vector<std::string>> deps_by_path;
  int line_no = 0;
  for (const std::string& raw : Split(modules_dep, '\n')) {
    ++line_no;
    std::string line = Trim(raw);
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) {
      return Error(ErrorCode::kCorrupt,
                   "modules.dep line " + std::to_string(line_no) + ": missing 'module:'");
    }
    std::string path = line.substr(0, colon);
    std::vector<std::string> deps;
    for (const std::string& d : Split(line.substr(colon + 1), ' ')) {
      if (!d.empty()) deps.push_back(d);
    }
    path_by_name[ModuleNameFromPath(path)] = path;
    deps_by_path[path] = std::move(deps);
  }

  std::vector<std::string> order;
  std::set<std::string> done;
  std::set<std::string> visiting;
  std::function<Status(const std::string&)> visit = [&](const std::string& path) -> Status {
    if (done.count(path)) return OkStatus();
    if (visiting.count(path)) {
      return Error(ErrorCode::kCorrupt, "modules.dep: dependency cycle through " + path);
    }
    visiting.insert(path);
    auto it = deps_by_path.find(path);
    if (it == deps_by_path.end()) {
      return Error(ErrorCode::kCorrupt, "modules.dep: dependency " + path + " has no entry");
    }
    // The list is nearest-first; load the farthest first (as modprobe does).
    for (auto d = it->second.rbegin(); d != it->second.rend(); ++d) RETURN_IF_ERROR(visit(*d));
    visiting.erase(path);
    done.insert(path);
    order.push_back(path);
    return OkStatus();
  };
  for (const std::string& name : wanted) {
    auto it = path_by_name.find(Normalize(name));
    if (it == path_by_name.end()) {
      return Error(ErrorCode::kNotFound, "kernel module not found in modules.dep: " + name);
    }
    RETURN_IF_ERROR(visit(it->second));
  }
  return order;
}

}  // namespace cloister::image

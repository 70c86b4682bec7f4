#include "supervisor/environment.h"

#include <cstdlib>

namespace cloister::vm {

namespace {

// PATH and LANG=C, the base of every child's environment.
std::vector<std::string> BaseEnvironment(const EnvLookup& lookup) {
  const char* path = lookup("PATH");
  return {"PATH=" + std::string(path && *path ? path : kDefaultPath), "LANG=C"};
}

const char* GetEnv(const char* name) { return std::getenv(name); }

}  // namespace

std::vector<std::string> SupervisorEnvironment(const EnvLookup& lookup) {
  std::vector<std::string> env = BaseEnvironment(lookup);
  for (std::string_view name : kSupervisorVariables) {
    std::string n(name);
    const char* v = lookup(n.c_str());
    if (v && *v) env.push_back(n + "=" + v);
  }
  return env;
}

std::vector<std::string> SupervisorEnvironment() { return SupervisorEnvironment(GetEnv); }

std::vector<std::string> QemuEnvironment(const EnvLookup& lookup) { return BaseEnvironment(lookup); }

std::vector<std::string> QemuEnvironment() { return QemuEnvironment(GetEnv); }

}  // namespace cloister::vm

#include "bench/vm_bench_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "supervisor/launcher.h"
#include "supervisor/state.h"

namespace cloister::bench {

namespace fs = std::filesystem;

namespace {
std::string BuildDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return self.parent_path().parent_path().string();  // BUILD/bench/X -> BUILD
}
}  // namespace

std::string FindCloister() {
  std::string exe;
  if (const char* e = getenv("CLOISTER_EXE"); e && *e) exe = e;
  std::string build = BuildDir();
  if (exe.empty() && !build.empty()) exe = build + "/src/cli/cloister";
  if (exe.empty() || access(exe.c_str(), X_OK) != 0) return "";
  setenv("CLOISTER_EXE", exe.c_str(), 1);
  if (!getenv("CLOISTER_BINARY_DIR") && !build.empty()) {
    setenv("CLOISTER_BINARY_DIR", build.c_str(), 1);
  }
  return exe;
}

std::string DefaultTestImageDir() {
  std::string dir = BuildDir() + "/test-cache/image-test";
  return access((dir + "/disk.raw").c_str(), R_OK) == 0 ? dir : "";
}

std::string DefaultFullImageDir() {
  std::string d = DefaultStoreRoot() + "/images/debian-12";
  return access((d + "/disk.raw").c_str(), R_OK) == 0 ? d : "";
}

std::unique_ptr<BenchStore> BenchStore::Make() {
  char tmpl[] = "/tmp/clb-XXXXXX";
  if (!mkdtemp(tmpl)) return nullptr;
  auto s = std::unique_ptr<BenchStore>(new BenchStore());
  s->root_ = tmpl;
  auto st = Store::Open(s->root_);
  if (!st.ok()) {
    std::cerr << st.error().ToString() << "\n";
    return nullptr;
  }
  s->store_ = std::move(*st);
  return s;
}

BenchStore::~BenchStore() {
  for (const std::string& n : names_) ForceStop(n);
  std::error_code ec;
  fs::remove_all(root_, ec);
}

RunOutput BenchStore::Cli(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env, const std::string& input) {
  std::vector<std::string> argv = {getenv("CLOISTER_EXE") ? getenv("CLOISTER_EXE") : "cloister",
                                   "--store", root_};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions ro;
  ro.env_set = env;
  ro.stdin_data = input;
  ro.timeout = std::chrono::minutes(15);
  auto r = RunProcess(argv, ro);
  if (!r.ok()) {
    RunOutput out;
    out.err = r.error().ToString();
    return out;
  }
  return *r;
}

bool BenchStore::Create(const std::string& name, const std::string& image_dir, int memory_mib,
                        int cpus) {
  auto r = Cli({"create", name, "--image", image_dir + "/disk.raw", "--memory",
                std::to_string(memory_mib), "--cpus", std::to_string(cpus)});
  if (!r.success()) {
    std::cerr << "create " << name << ": " << r.err << "\n";
    return false;
  }
  names_.push_back(name);
  return true;
}

std::string BenchStore::Exec(const std::string& name, const std::string& script, int* code,
                             const std::string& user) {
  auto r = Cli({"exec", name, "-u", user, "--", "sh", "-c", script});
  if (code) *code = r.exit_code;
  if (!r.success()) std::cerr << "exec " << name << " (" << r.exit_code << "): " << r.err << "\n";
  return r.out;
}

pid_t BenchStore::QemuPid(const std::string& name) {
  vm::VmStatus status = vm::WorkspaceStatus(*store_, name);
  return status.info.value("qemu_pid", -1);
}

void BenchStore::ForceStop(const std::string& name) {
  (void)Cli({"stop", name, "--force"});
}

long ProcKib(pid_t pid, const std::string& file, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/" + file);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) {
      std::istringstream in(line.substr(field.size()));
      long kb = -1;
      in >> kb;
      return kb;
    }
  }
  return -1;
}

bool ParseFree(const std::string& out, long* used, long* cache) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Mem:", 0) != 0) continue;
    std::istringstream l(line.substr(4));
    long total = 0, u = 0, fr = 0, shared = 0, bc = 0;
    if (!(l >> total >> u >> fr >> shared >> bc)) return false;
    *used = u;
    *cache = bc;
    return true;
  }
  return false;
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return "load " + a + " " + b + " " + c + " (" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) +
         " cores)";
}

}  // namespace cloister::bench

// Tests only: Debian's chromium, headless, driven over the DevTools protocol by testdata/cdp.py
// (CDP over --remote-debugging-pipe), for the dashboard's browser tests (browser_test.cc with a
// store and no VM, ui_vm_test.cc against a real running workspace).
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace cloister::ui::testing {

using json = nlohmann::json;

// testdata/cdp.py as a child: one JSON command per line in, one answer per line out.
// Start(CdpScript()); every call waits for its answer.
class Browser {
 public:
  bool Start(const std::string& script) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      execlp("python3", "python3", script.c_str(), nullptr);
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
    return Read().value("ready", false);
  }
  ~Browser() {
    if (to_) {
      fputs("{\"op\":\"quit\"}\n", to_);
      fclose(to_);
    }
    if (from_) fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  json Call(const json& cmd) {
    std::string line = cmd.dump() + "\n";
    fputs(line.c_str(), to_);
    fflush(to_);
    return Read();
  }
  json Eval(const std::string& expr) {
    json r = Call({{"op", "eval"}, {"expr", expr}});
    EXPECT_TRUE(r.value("ok", false)) << expr << ": " << r.dump();
    return r.value("value", json());
  }
  // Waits (bounded: the machine is shared) until `expr` is truthy in the page.
  json Wait(const std::string& expr, int seconds = 60) {
    json r = Call({{"op", "wait"}, {"expr", expr}, {"timeout", seconds}});
    EXPECT_TRUE(r.value("ok", false)) << r.dump();
    return r.value("value", json());
  }
  void Go(const std::string& url) { EXPECT_TRUE(Call({{"op", "navigate"}, {"url", url}})["ok"]); }
  // Screenshots go to `dir` (created): the VM test's real run writes docs/ui/, the fake-data
  // browser test its build tree (so it never replaces the real ones). CLOISTER_UI_SCREENSHOTS=0
  // skips them.
  void ShotsTo(std::string dir) { shot_dir_ = std::move(dir); }
  void Shot(const std::string& name) {
    const char* want = std::getenv("CLOISTER_UI_SCREENSHOTS");
    if ((want && std::string(want) == "0") || shot_dir_.empty()) return;
    std::string mk = "mkdir -p '" + shot_dir_ + "'";
    EXPECT_EQ(std::system(mk.c_str()), 0) << mk;
    std::string path = shot_dir_ + "/" + name;
    EXPECT_TRUE(Call({{"op", "screenshot"}, {"path", path}})["ok"]) << path;
  }

 private:
  json Read() {
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n = from_ ? getline(&line, &cap, from_) : -1;
    std::string s = n > 0 ? std::string(line, n) : "";
    free(line);
    json j = json::parse(s, nullptr, false);
    return j.is_object() ? j : json{{"ok", false}, {"error", "driver said: " + s}};
  }
  std::string shot_dir_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

// $CLOISTER_SOURCE_DIR/src/ui/testdata/cdp.py (ctest sets CLOISTER_SOURCE_DIR).
inline std::string CdpScript() {
  const char* src = std::getenv("CLOISTER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/src/ui/testdata/cdp.py";
}

}  // namespace cloister::ui::testing

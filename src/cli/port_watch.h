// The live published ports of a running workspace, for the views that show them: `describe`
// (and through it the dashboard), and the attach terminal (`attach`, `run`), where an automatic
// forward's host port, which the host picks (supervisor/ports.h), is announced on a line.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace cloister::cli {

// The supervisor's forwards (control op "ports", action "ls": supervisor/ports.h ForwardInfoJson
// each) through `socket`; an empty array when nobody answers (not running).
nlohmann::json LiveForwards(const std::string& socket);

// "127.0.0.1:41234 -> guest port 5173 (auto)" for one ForwardInfoJson.
std::string ForwardLine(const nlohmann::json& forward);

// While it lives, writes one line on `out` for every automatic forward of the workspace whose
// control socket is `socket`: those there when it starts, then each new one (polled every
// `every`). Lines end in "\r\n" when `raw_terminal` (an attached terminal is in raw mode).
class AutoPortAnnouncer {
 public:
  AutoPortAnnouncer(std::string workspace, std::string socket, std::ostream& out, bool raw_terminal,
                    std::chrono::milliseconds every = std::chrono::seconds(2));
  ~AutoPortAnnouncer();  // stops and joins
  AutoPortAnnouncer(const AutoPortAnnouncer&) = delete;
  AutoPortAnnouncer& operator=(const AutoPortAnnouncer&) = delete;

 private:
  void Loop();
  const std::string workspace_, socket_;
  std::ostream& out_;
  const bool raw_;
  const std::chrono::milliseconds every_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<std::string> shown_;  // host ip:port -> guest port, already announced
  std::thread thread_;
};

// An announcer for NAME when its config has --auto-ports and `out` is the terminal's stderr
// (raw: a session is attached); null otherwise.
std::unique_ptr<AutoPortAnnouncer> AnnounceAutoPorts(Store& store, const std::string& name,
                                                     std::ostream& out);

}  // namespace cloister::cli

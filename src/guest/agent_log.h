// The agent's log lines: to AgentOptions::log when set (tests), else to stderr, which the boot
// hook's unit sends to the journal and the serial console. Shared by the agent's setup
// (guest/agent.cc) and its boot sequence (guest/boot.cc); not part of the module's API.
#pragma once

#include <functional>
#include <iostream>
#include <string>
#include <string_view>

namespace cloister::guest {

class Logger {
 public:
  explicit Logger(std::function<void(std::string_view)> sink) : sink_(std::move(sink)) {}
  void operator()(const std::string& line) const {
    if (sink_) {
      sink_(line);
    } else {
      std::cerr << "cloister-agent: " << line << std::endl;
    }
  }

 private:
  std::function<void(std::string_view)> sink_;
};

}  // namespace cloister::guest

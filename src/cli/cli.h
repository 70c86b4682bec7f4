// Shared plumbing for the cloister CLI. One file per verb (cmd_<verb>.cc, as in lima's cmd/):
// each defines `void Add<Verb>Command(CLI::App& app, Cli& cli)` and is listed in main.cc.
// Verbs are thin: they parse flags, call a module (store, catalog, vm...), and print.
#pragma once

#include <functional>
#include <optional>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::cli {

// Process exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

class Cli {
 public:
  Cli(std::ostream& out, std::ostream& err, std::istream& in) : out_(out), err_(err), in_(in) {}

  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }
  std::istream& in() { return in_; }

  // Store root from --home, else $CLOISTER_HOME, else $XDG_DATA_HOME/cloister, else
  // ~/.local/share/cloister.
  std::string StoreRoot() const;
  std::string& store_flag() { return store_flag_; }

  // Prints "cloister: error: MESSAGE" and "Hint: HINT" on stderr; returns the exit code to use.
  int Fail(const Error& error);

  // Asks "PROMPT [y/N]" on the terminal. `assume_yes` (from -f/--yes) skips the question. Without
  // a terminal and without assume_yes the answer is an error telling the user to pass --yes.
  Status Confirm(const std::string& prompt, bool assume_yes);

  // Prints a JSON document (pretty, one trailing newline).
  void PrintJson(const nlohmann::json& doc);

  // Set by a verb's callback; main returns it.
  int exit_code = kExitOk;

  // Test seam: whether stdin is a terminal.
  std::function<bool()> stdin_is_tty;

  // Everything after the first bare "--" on the command line (`exec NAME -- CMD...`, `run [NAME]
  // -- CMD...`). RunCli strips it before CLI11 parses, so a command never fills an optional
  // positional such as run's NAME. nullopt when there was no "--".
  std::optional<std::vector<std::string>> after_dashes;

 private:
  std::ostream& out_;
  std::ostream& err_;
  std::istream& in_;
  std::string store_flag_;
};

// Runs the CLI with argv (argv[0] is the program name); returns the process exit code.
// Tests call this directly with their own streams.
int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
           std::istream& in);

}  // namespace cloister::cli

// The list of verbs. Each Add*Command lives in its own cmd_*.cc file.
#pragma once

#include <CLI/CLI.hpp>

namespace cloister::cli {

class Cli;

void AddVersionCommand(CLI::App& app, Cli& cli);
void AddCredCommand(CLI::App& app, Cli& cli);
void AddImageCommand(CLI::App& app, Cli& cli);

// Registers every verb above on `app`.
void AddAllCommands(CLI::App& app, Cli& cli);

}  // namespace cloister::cli

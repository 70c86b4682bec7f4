#include <iostream>

#include "cli/cli.h"
#include "cli/remote.h"

int main(int argc, char** argv) {
  // A remote host or context selected: the verb runs there (cli/remote.h).
  std::vector<std::string> rest;
  auto remote = cloister::cli::SelectRemote(argc, argv, &rest);
  if (!remote.ok()) {
    std::cerr << "cloister: error: " << remote.error().message() << "\n";
    if (!remote.error().hint().empty()) std::cerr << "Hint: " << remote.error().hint() << "\n";
    return cloister::cli::kExitUsage;
  }
  if (*remote) return cloister::cli::RunRemoteVerb(**remote, rest);
  return cloister::cli::RunCli(argc, argv, std::cout, std::cerr, std::cin);
}

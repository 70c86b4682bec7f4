#include <iostream>

#include "cli/cli.h"

int main(int argc, char** argv) {
  return cloister::cli::RunCli(argc, argv, std::cout, std::cerr, std::cin);
}

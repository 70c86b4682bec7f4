// The verbs of `cloister cred` (cmd_cred.cc makes the command): one function per sub-verb, in a
// file per family (cmd_cred.cc: add, rm; cmd_cred_import.cc; cmd_cred_ls.cc; cmd_cred_policy.cc:
// policy, revoke). Each adds its sub-verb to `cred`.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli.h"

namespace cloister::cli {

void AddCredAddVerb(CLI::App& cred, Cli& cli);
void AddCredImportVerb(CLI::App& cred, Cli& cli);
void AddCredLsVerb(CLI::App& cred, Cli& cli);
void AddCredRmVerb(CLI::App& cred, Cli& cli);
void AddCredPolicyVerb(CLI::App& cred, Cli& cli);
void AddCredRevokeVerb(CLI::App& cred, Cli& cli);

// "2026-01-02T03:04:05Z", "-" for 0 (what `cred ls` and `cred import` print for login times).
std::string CredTime(int64_t unix_seconds);

}  // namespace cloister::cli

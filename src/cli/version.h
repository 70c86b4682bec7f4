// cloister's version, and the version of the protocol between a local CLI and a remote cloister
// it drives over SSH (cli/remote.h). A remote refuses a client whose either number differs.
#pragma once

namespace cloister::cli {

inline constexpr char kCloisterVersion[] = "0.1.0";
// The `cloister _remote PROTOCOL VERSION -- ARGS...` command line and its behaviour (remote.h).
inline constexpr int kRemoteProtocolVersion = 1;

}  // namespace cloister::cli

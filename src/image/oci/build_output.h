// The host's reading of the builder VM's output (image/oci/builder_script.h): lines that begin
// with "cloister-build: " are the build's progress, facts and errors; every other line is a tool's
// chatter (shown only on request).
//
// SECURITY: this is guest output. The builder VM runs the image's code (a Dockerfile's RUN, a
// feature's install.sh), so every byte may be chosen by an attacker. The splitter holds a line to
// kMaxLineBytes (the rest of a longer line is dropped, never buffered) and the reader takes only
// the words it knows, each value checked (a digest is sha256 and 64 hex digits, an architecture
// a short lower-case word, flags 0 or 1, sizes decimal); a malformed fact is an error, text for
// the terminal goes through base/terminal_text.h at the caller. Nothing read here decides where
// a file goes or what runs on the host: the facts are recorded (provenance) and shown.
// Fuzzed by fuzz/oci_build_output_fuzz.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::image::oci {

inline constexpr size_t kMaxLineBytes = 4096;
inline constexpr size_t kMaxErrorBytes = 1024;

// Splits a byte stream into lines of at most kMaxLineBytes (without the newline).
class LineSplitter {
 public:
  // Appends the complete lines in `bytes` to `out`.
  void Feed(std::string_view bytes, std::vector<std::string>& out);
  // The last line, if the stream ended without a newline.
  std::optional<std::string> Finish();

 private:
  std::string line_;
  bool overlong_ = false;
};

enum class OutputKind {
  kStage,     // "stage NAME": a stage began (grow, pull, unpack, build, base NAME, finish, disk)
  kProgress,  // "progress TEXT": a tool's progress (skopeo's blobs)
  kLog,       // "log TEXT": a step's or a Dockerfile's output (on request, or a failure's tail)
  kStep,      // "step N NAME": step N began
  kNote,      // "note TEXT"
  kFact,      // digest, pulled, unpacked, has, disk, result: folded into BuildFacts
  kError,     // "error KIND TEXT": the build failed
  kChatter,   // not a line for the host
};

struct OutputLine {
  OutputKind kind = OutputKind::kChatter;
  std::string word;  // the first word after the prefix
  std::string text;  // the rest
};

OutputLine ClassifyLine(std::string_view line);

// What the build reported about itself.
struct BuildFacts {
  std::string digest;  // "sha256:<64 hex>": the source's manifest
  std::string arch;    // "amd64"
  uint64_t pulled_bytes = 0;
  uint64_t unpacked_bytes = 0;
  uint64_t rootfs_bytes = 0;
  std::optional<bool> tmux, sshd, sh;  // what the finished rootfs has
  bool result = false;                 // the last line came: the disk is written
  std::string error_kind;  // "unreachable", "not-found", "arch", "auth", "pull", "unpack", "step", "finish", "disk",
                           // "build", "user"...: [a-z-]{1,16}
  std::string error_text;  // at most kMaxErrorBytes, as the guest wrote it
};

// Folds one kFact or kError line into `facts`; kCorrupt on a malformed value.
Status ApplyLine(const OutputLine& line, BuildFacts& facts);

// What a failed build means for the user, with its fix: from the error the builder reported
// (its text made terminal-safe), or, when it reported none, the script's exit status `rc`.
Error BuildError(const BuildFacts& facts, int rc);

}  // namespace cloister::image::oci

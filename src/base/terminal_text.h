// Guest-chosen text made safe to print on the user's terminal. The one helper every CLI output of
// such text goes through (trace, logs, ports, consent questions, `ls`/`describe` notes, cp's
// warnings, error messages: cli::Cli::Fail), unless the user asked for --raw or --json.
#pragma once

#include <string>
#include <string_view>

namespace cloister {

// SECURITY: `text` comes from the guest. Every byte that could drive a terminal is escaped as
// `\xNN`: C0 controls, DEL, C1 controls (U+0080..U+009F, which some terminals take as CSI/OSC
// even UTF-8 encoded), the bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069,
// which reorder what the user reads) and invalid UTF-8 (overlong forms, surrogates, truncated
// sequences). Kept: printable ASCII, other valid UTF-8 from U+00A0, and with `keep_newlines` \n
// and \t; "\r\n" becomes "\n" then (a serial console's line ends).
std::string TerminalSafe(std::string_view text, bool keep_newlines = false);

}  // namespace cloister

// Guest-written text made safe to print on the user's terminal (`cloister logs`, cp's warnings).
#pragma once

#include <string>
#include <string_view>

namespace cloister::transfer {

// SECURITY: `text` comes from the guest. Every byte that could drive a terminal is escaped as
// `\xNN`: C0 controls, DEL, C1 controls (U+0080..U+009F, which some terminals take as CSI/OSC
// even UTF-8 encoded) and invalid UTF-8 (overlong forms, surrogates, truncated sequences). Kept:
// printable ASCII, valid UTF-8 from U+00A0, and with `keep_newlines` \n and \t; "\r\n" becomes
// "\n" then (a serial console's line ends).
std::string TerminalSafe(std::string_view text, bool keep_newlines = false);

}  // namespace cloister::transfer

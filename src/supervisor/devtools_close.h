// Chromium's orderly shutdown over DevTools (`Browser.close`), for `browser stop` of a kept
// profile: Chromium ends at once on SIGTERM (measured: under 0.25 s, cookies not committed), while
// Browser.close runs the shutdown that has its network service commit the cookie store.
//
// SECURITY: the other end is the browser VM, whose Chromium renders hostile pages: its answers are
// read bounded (64 KiB), the WebSocket path it names must be `/devtools/browser/<id>` of at most
// 128 safe characters, and nothing it says is used beyond that path. The two parsers of its
// answers are pure so that a unit test and a fuzz target (fuzz/devtools_close_fuzz.cc) reach them
// without a socket.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::vm {

// The most read of any one answer of the guest's DevTools: the /json/version body, one WebSocket
// message (Chromium's are a few hundred bytes).
inline constexpr size_t kMaxDevToolsAnswer = 64 * 1024;

// From the body of the guest's `GET /json/version`: the path of its `webSocketDebuggerUrl`, which
// must be `ws://<authority>/devtools/browser/<id>` with `<id>` letters, digits and '-' and the path
// at most 128 bytes; anything else (no JSON object, no such string, a page target, `..`, a query)
// is kCorrupt. The authority is not returned: the WebSocket goes over the stream already open.
Result<std::string> BrowserTargetPath(std::string_view json_version_body);

// One WebSocket message of the guest's DevTools after `{"id":1,"method":"Browser.close"}`: true
// when it is the answer to that command, false when it is something else (an event, another id,
// not JSON: keep reading), kUnavailable when the answer is an error and kCorrupt when the message
// is larger than kMaxDevToolsAnswer.
Result<bool> IsBrowserCloseAnswer(std::string_view ws_message);

// `http_fd` and `ws_fd`: two streams to the browser VM's 127.0.0.1:9222 (the channel's tcp
// service), both taken over (closed on return). Asks /json/version for the browser target, sends
// Browser.close on a WebSocket to it, and returns once Chromium closed that WebSocket (it does as
// it shuts down) or answered the command. Blocking: the caller bounds it (the guest may never
// answer; supervisor/kept_profile.h gives it a thread and stops waiting after 30 s).
Status CloseChromiumOverDevTools(int http_fd, int ws_fd);

}  // namespace cloister::vm

// Chromium's orderly shutdown over DevTools (`Browser.close`), for `browser stop` of a kept
// profile: Chromium ends at once on SIGTERM (measured: under 0.25 s, cookies not committed), while
// Browser.close runs the shutdown that has its network service commit the cookie store.
//
// SECURITY: the other end is the browser VM, whose Chromium renders hostile pages: its answers are
// read bounded (64 KiB), the WebSocket path it names must be `/devtools/browser/<id>` of at most
// 128 safe characters, and nothing it says is used beyond that path.
#pragma once

#include "base/result.h"

namespace cloister::vm {

// `http_fd` and `ws_fd`: two streams to the browser VM's 127.0.0.1:9222 (the channel's tcp
// service), both taken over (closed on return). Asks /json/version for the browser target, sends
// Browser.close on a WebSocket to it, and returns once Chromium closed that WebSocket (it does as
// it shuts down) or answered the command.
Status CloseChromiumOverDevTools(int http_fd, int ws_fd);

}  // namespace cloister::vm

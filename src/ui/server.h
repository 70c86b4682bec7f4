// `cloister ui`'s HTTP server: Boost.Beast on 127.0.0.1, one thread per connection (bounded),
// the embedded page (ui/assets.h), the JSON API over a Backend, and server-sent events for the
// live traffic view.
//
// SECURITY (docs/threat-model.md, "Dashboard"): any web page the user opens can make the browser
// send requests to this port, and the API can wipe workspaces. Every request must carry a Host
// header naming this loopback port (DNS rebinding), no foreign Origin (and a POST must carry our
// own), and the session cookie that only the printed URL's token gives (HttpOnly,
// SameSite=Strict); every POST also carries the CSRF token (X-CSRF-Token, which a form cannot
// set) and a JSON content type. No CORS header is ever sent. Destructive actions need
// "confirm": true in the body, which the page sends only after showing the CLI's confirmation.
// Heads are bounded (8 KiB) and bodies too (kMaxBodyBytes). The token, cookie and CSRF token are
// 32 random bytes each (OpenSSL), compared in constant time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "ui/backend.h"

namespace cloister::ui {

struct ServerOptions {
  uint16_t port = 0;  // 0: a random free port
  size_t max_connections = 32;
  std::chrono::milliseconds tail_interval{250};  // how often the live view looks for new lines
};

class Server {
 public:
  // Binds 127.0.0.1:port and starts serving in background threads. `backend` must outlive the
  // server.
  static Result<std::unique_ptr<Server>> Start(Backend& backend, ServerOptions options);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  // http://127.0.0.1:PORT/?token=TOKEN: what `cloister ui` prints.
  std::string Url() const;
  // Closes the listener and every open connection (live streams end), and joins the threads.
  void Stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cloister::ui

// `cloister ui`'s HTTP server: Boost.Beast on 127.0.0.1, one thread per connection (bounded),
// the embedded page (ui/assets.h), the JSON API over a Backend, and server-sent events for the
// live traffic view.
//
// SECURITY (docs/threat-model.md, "Dashboard"): any web page the user opens can make the browser
// send requests to this port, other local users can connect to it, and the API can wipe
// workspaces.
//   - Only the user's own connections are served: at accept, the peer socket's owner (peer_uid.h)
//     must be ServerOptions::user, else the connection is closed unread; a request must arrive,
//     and each write complete, within io_timeout (a reaper shuts the socket), so connections held
//     open cannot starve the dashboard (a consent question still reaches the user).
//   - The server is named per run: "<32 hex>.localhost" (browsers resolve *.localhost to
//     loopback); every request's Host must be exactly that name and port (DNS rebinding; not
//     127.0.0.1 or localhost, whose cookies every local web app on any port would get), and an
//     Origin, required on POST, must be ours.
//   - The printed URL's token buys ONE session, once (a second use is refused): the session
//     cookie (HttpOnly, SameSite=Strict, host-only: sent to this run's name only, never to a dev
//     server on 127.0.0.1). Every POST also carries the CSRF token (X-CSRF-Token, which a form
//     cannot set) and a JSON content type. No CORS header is ever sent.
//   - Destructive actions need "confirm": true in the body, which the page sends only after
//     showing the CLI's confirmation. Heads are bounded (8 KiB) and bodies too (kMaxBodyBytes).
// The token, cookie, CSRF token and run name are random (OpenSSL), compared in constant time.
#pragma once

#include <atomic>
#include <chrono>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/result.h"
#include "ui/backend.h"

namespace cloister::ui {

struct ServerOptions {
  uint16_t port = 0;  // 0: a random free port
  size_t max_connections = 32;
  std::chrono::milliseconds tail_interval{250};  // how often the live view looks for new lines
  // A request must arrive (head and body), and each write complete, within this.
  std::chrono::milliseconds io_timeout{10000};
  uid_t user = getuid();  // whose connections are served (every other uid's is closed at accept)
  // Called once, from a connection thread, when the token bought the session (cmd_ui removes the
  // page `--open` wrote).
  std::function<void()> on_session;
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
  // This run's host name, "<32 hex>.localhost".
  const std::string& host_name() const;
  // http://NAME.localhost:PORT/?token=TOKEN: what `cloister ui` prints (the token works once).
  std::string Url() const;
  // Closes the listener and every open connection (live streams end), and joins the threads.
  void Stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cloister::ui

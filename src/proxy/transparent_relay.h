// Test and bench support: what the guest agent does for a redirected connection, on the host.
// Listens on 127.0.0.1:0; for each accepted client it makes a socketpair, hands one end to
// Proxy::ServeTransparent, writes the header line "<host> <port>\n" on the other, then copies bytes
// both ways (with half-close) until both directions end. Point a client at it with curl's
// --connect-to NAME:PORT:127.0.0.1:RELAY so TLS SNI and Host name the real destination.
// Never used by the product.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "proxy/proxy.h"

namespace cloister::proxy::testing {

class TransparentRelay {
 public:
  // `header` is written verbatim (normally "host port\n"); `proxy` must outlive the relay.
  // With `transparent` false the streams go to Proxy::Serve instead (proxy mode, no header): the
  // same relay hop in front of both modes, for the bench.
  static Result<std::unique_ptr<TransparentRelay>> Start(Proxy* proxy, std::string header,
                                                         bool transparent = true);
  ~TransparentRelay();
  uint16_t port() const { return port_; }

 private:
  TransparentRelay() = default;
  void AcceptLoop();
  void Pump(int client, int stream);
  Proxy* proxy_ = nullptr;
  std::string header_;
  bool transparent_ = true;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace cloister::proxy::testing

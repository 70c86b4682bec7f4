// TLS interception: the client's TLS is terminated with a leaf certificate for the SNI name (or
// the CONNECT host) minted by the per-install CA, ALPN http/1.1 only. The session (session.cc)
// then serves HTTP inside with the HTTP driver (http_driver.h).
//
// Owned by Proxy::Impl (one per proxy); the SSL_CTX is shared by every event loop.
#pragma once

#include <memory>
#include <string>

#include "base/result.h"
#include "proxy/ca.h"
#include "proxy/exchange.h"
#include "proxy/net.h"

namespace cloister::proxy {

class TlsInterceptor {
 public:
  TlsInterceptor() : ctx_(ssl::context::tls_server) {}

  // TLS 1.2+, the certificate callback (leaves from `ca`), ALPN, a server session cache.
  Status Init(std::shared_ptr<CertAuthority> ca);
  ssl::context& context() { return ctx_; }

  // Completes the server handshake on `tls` (the ClientHello's bytes are in `cbuf`, consumed as
  // used) and sets origin.sni. An error says why the connection must close: the client went away
  // (kUnavailable), the handshake failed (kInvalidArgument), or, in transparent mode, the SNI
  // names another host than the one the connection is for (kPermissionDenied).
  awaitable<Status> Handshake(ClientTls& tls, beast::flat_buffer& cbuf, Origin& origin);

 private:
  static int CertCallback(SSL* ssl, void* arg);
  static int AlpnSelect(SSL*, const unsigned char** out, unsigned char* outlen,
                        const unsigned char* in, unsigned int inlen, void*);

  std::shared_ptr<CertAuthority> ca_;
  ssl::context ctx_;
};

}  // namespace cloister::proxy

#include "proxy/tls_intercept.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <string.h>

#include "base/strings.h"

namespace cloister::proxy {
namespace {

bool ValidSni(const char* sni) {
  if (!sni) return false;
  std::string_view s(sni);
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

// The CONNECT host of a client handshake in progress, for CertCallback. Kept in SSL ex data of
// our own index, never in the SSL's app data: Asio's SSL engine owns that slot (its verify
// callback) and deletes whatever it holds when the stream is destroyed, which a session torn down
// mid-handshake (proxy shutdown) would otherwise turn into a delete of a std::string*.
int ConnectHostIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}
}  // namespace

Status TlsInterceptor::Init(std::shared_ptr<CertAuthority> ca) {
  if (!ca) return Error(ErrorCode::kInvalidArgument, "proxy: no CA");
  ca_ = std::move(ca);
  SSL_CTX* sctx = ctx_.native_handle();
  SSL_CTX_set_min_proto_version(sctx, TLS1_2_VERSION);
  SSL_CTX_set_cert_cb(sctx, &TlsInterceptor::CertCallback, this);
  SSL_CTX_set_alpn_select_cb(sctx, &TlsInterceptor::AlpnSelect, nullptr);
  SSL_CTX_set_session_cache_mode(sctx, SSL_SESS_CACHE_SERVER);
  SSL_CTX_set_session_id_context(sctx, reinterpret_cast<const unsigned char*>("cloister"), 8);
  return OkStatus();
}

int TlsInterceptor::AlpnSelect(SSL*, const unsigned char** out, unsigned char* outlen,
                              const unsigned char* in, unsigned int inlen, void*) {
  // SECURITY: `in` is the client's ALPN list (length-prefixed strings); walk it bounded.
  for (unsigned i = 0; i < inlen;) {
    unsigned len = in[i];
    if (i + 1 + len > inlen) break;
    if (len == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
      *out = in + i + 1;
      *outlen = 8;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

int TlsInterceptor::CertCallback(SSL* ssl, void* arg) {
  auto* self = static_cast<TlsInterceptor*>(arg);
  const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  std::string host;
  if (ValidSni(sni)) {
    host = ToLower(sni);
  } else if (auto* connect_host =
                 static_cast<std::string*>(SSL_get_ex_data(ssl, ConnectHostIndex()))) {
    host = *connect_host;
  }
  if (host.empty()) return 0;
  auto leaf = self->ca_->Leaf(host);
  if (!leaf.ok()) return 0;
  if (SSL_use_certificate(ssl, leaf->get()) != 1 ||
      SSL_use_PrivateKey(ssl, self->ca_->leaf_key()) != 1) {
    return 0;
  }
  return 1;
}

awaitable<Status> TlsInterceptor::Handshake(ClientTls& tls, beast::flat_buffer& cbuf,
                                            Origin& origin) {
  std::string connect_host = origin.connect.host;
  SSL_set_ex_data(tls.native_handle(), ConnectHostIndex(), &connect_host);
  auto [hec, used] = co_await tls.async_handshake(ssl::stream_base::server, cbuf.data(), kTok);
  SSL_set_ex_data(tls.native_handle(), ConnectHostIndex(), nullptr);
  if (hec == asio::error::eof || hec == asio::error::connection_reset ||
      hec == asio::error::broken_pipe || hec == ssl::error::stream_truncated) {
    co_return Error(ErrorCode::kUnavailable, "the client went away during the TLS handshake");
  }
  if (hec) co_return Error(ErrorCode::kInvalidArgument, "TLS handshake with the client failed");
  cbuf.consume(used);
  const char* sni = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
  if (ValidSni(sni)) origin.sni = ToLower(sni);
  if (!origin.sni.empty() && origin.sni.back() == '.') origin.sni.pop_back();
  if (origin.transparent && !origin.sni.empty() && origin.sni != origin.connect.host) {
    // SECURITY: the guest resolved one name and names another in TLS: refuse rather than guess
    // which one the request is for.
    co_return Error(ErrorCode::kPermissionDenied, "TLS SNI " + origin.sni +
                                                      " does not match the connection's name " +
                                                      origin.connect.host);
  }
  co_return OkStatus();
}

}  // namespace cloister::proxy

#include "proxy/tls_stream.h"

#include <string.h>

#include <algorithm>
#include <boost/asio/ssl/error.hpp>

namespace cloister::proxy::tls_detail {
namespace {

// A key update answered while a write is in flight is a few bytes; this much means a peer that
// makes us write without reading (refused: the stream fails).
constexpr size_t kMaxDeferred = 1 << 20;

TlsIo* Io(BIO* b) { return static_cast<TlsIo*>(BIO_get_data(b)); }

int BioRead(BIO* b, char* buf, size_t len, size_t* got) {
  TlsIo* io = Io(b);
  BIO_clear_retry_flags(b);
  *got = 0;
  if (io->prefix_off < io->prefix.size()) {
    size_t n = std::min(len, io->prefix.size() - io->prefix_off);
    memcpy(buf, io->prefix.data() + io->prefix_off, n);
    io->prefix_off += n;
    if (io->prefix_off == io->prefix.size()) {
      io->prefix = std::string();
      io->prefix_off = 0;
    }
    *got = n;
    return 1;
  }
  if (io->in_pos < io->in_end) {
    size_t n = std::min(len, io->in_end - io->in_pos);
    memcpy(buf, io->in.get() + io->in_pos, n);
    io->in_pos += n;
    *got = n;
    return 1;
  }
  if (!io->in) io->in = std::make_unique_for_overwrite<char[]>(kTlsReadBuffer);
  for (;;) {
    ssize_t r = ::recv(io->fd, io->in.get(), kTlsReadBuffer, MSG_DONTWAIT);
    ++io->recvs;
    if (r > 0) {
      size_t n = std::min(len, static_cast<size_t>(r));
      memcpy(buf, io->in.get(), n);
      io->in_pos = n;
      io->in_end = static_cast<size_t>(r);
      *got = n;
      return 1;
    }
    if (r == 0) {
      io->eof = true;  // BIO_eof: OpenSSL reports an end without close_notify as truncation
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BIO_set_retry_read(b);
      return 0;
    }
    io->read_errno = errno;
    return -1;
  }
}

int BioWrite(BIO* b, const char* data, size_t len, size_t* written) {
  TlsIo* io = Io(b);
  BIO_clear_retry_flags(b);
  std::string& to = io->sending ? io->deferred : io->out;
  if (io->sending && to.size() + len > kMaxDeferred) return -1;
  to.append(data, len);
  *written = len;
  return 1;
}

long BioCtrl(BIO* b, int cmd, long, void*) {
  switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;  // sending is the stream's (one send per batch)
    case BIO_CTRL_EOF: return Io(b)->eof ? 1 : 0;
    case BIO_CTRL_WPENDING: return static_cast<long>(Io(b)->out.size());
    default: return 0;
  }
}

int BioCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

int BioDestroy(BIO*) { return 1; }

BIO_METHOD* Method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "cloister tls io");
    if (!m) return m;
    BIO_meth_set_read_ex(m, BioRead);
    BIO_meth_set_write_ex(m, BioWrite);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    BIO_meth_set_destroy(m, BioDestroy);
    return m;
  }();
  return method;
}

}  // namespace

BIO* NewBio(TlsIo* io) {
  BIO_METHOD* m = Method();
  if (!m) return nullptr;
  BIO* b = BIO_new(m);
  if (b) BIO_set_data(b, io);
  return b;
}

bool TrySend(int fd, std::string& buf, uint64_t& sends) {
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    ++sends;
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;  // the rest goes with the next write
    } else {
      return false;
    }
  }
  buf.erase(0, off);
  return true;
}

boost::system::error_code SslError(SSL* ssl, int ret, const TlsIo& io) {
  namespace asio = boost::asio;
  int err = SSL_get_error(ssl, ret);
  if (err == SSL_ERROR_ZERO_RETURN) return asio::error::eof;
  unsigned long e = ERR_peek_error();
  if (io.read_errno != 0 && (err == SSL_ERROR_SYSCALL || e == 0)) {
    return {io.read_errno, boost::system::system_category()};
  }
  if (e == 0) {
    // SSL_ERROR_SYSCALL with nothing queued: the peer went away without close_notify.
    return asio::ssl::error::stream_truncated;
  }
  if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    return asio::ssl::error::stream_truncated;
  }
  return {static_cast<int>(e), asio::error::get_ssl_category()};
}

SSL* NewSsl(SSL_CTX* ctx, TlsIo* io) {
  SSL* s = SSL_new(ctx);
  if (!s) return nullptr;
  BIO* b = NewBio(io);
  if (!b) {
    SSL_free(s);
    return nullptr;
  }
  SSL_set_bio(s, b, b);  // one BIO both ways; the SSL owns it
  // No read-ahead: OpenSSL asks the BIO for a record's header, then its body, served from the
  // stream's buffer (one recv takes several records). With read-ahead OpenSSL memmoves whatever
  // follows the record it reads to its buffer's front, for every record.
  SSL_set_read_ahead(s, 0);
  // Whole writes (the BIO never refuses one), and buffers kept for the connection's life.
  SSL_clear_mode(s, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_RELEASE_BUFFERS);
  return s;
}

}  // namespace cloister::proxy::tls_detail

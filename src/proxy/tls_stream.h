// The proxy's TLS stream for both legs (the guest's TLS it terminates, the upstream's it opens), in
// place of asio::ssl::stream. Same use (Beast reads and writes it; async_handshake; native_handle
// for SNI and verification; next_layer), but its I/O is batched:
//   reads   one recv() takes as much ciphertext as the socket holds (up to kTlsReadBuffer) into
//           the stream's own buffer, which OpenSSL reads one record at a time (no read-ahead: with
//           it, OpenSSL moved every buffered byte to its buffer's front before each record, a
//           quadratic memmove that was 6% of the proxy's CPU on a bulk download), and one
//           read_some returns as many records' plaintext as fit the caller's buffer; asio's stream
//           did one recv per record (17 KiB)
//   writes  one write_some encrypts everything it is given (up to kTlsWriteBatch) into records and
//           sends them with one send(); asio's did one record (16 KiB) and one send per call
// and OpenSSL keeps its buffers (no SSL_MODE_RELEASE_BUFFERS: asio freed and reallocated them
// around every record). docs/design.md ("Bulk through the proxy") has the figures.
//
// Owned by: proxy (only proxy_impl.h's TlsStream and ClientTls use it). One read and one write may
// be outstanding at once (the WebSocket pump needs both), like asio's stream; not thread safe.
// SECURITY: the bytes read are the peer's (the guest's, on the client leg): they only ever reach
// OpenSSL, which parses them; every length here is bounded by the buffers' sizes.
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/ssl/context.hpp>
#include <cerrno>
#include <limits>
#include <memory>
#include <string>
#include <utility>

namespace cloister::proxy {

// The stream's ciphertext buffer, the most one recv takes: four full records (16 KiB + 22 bytes
// each in TLS 1.3) and room to spare.
inline constexpr size_t kTlsReadBuffer = 96 * 1024;
inline constexpr size_t kTlsWriteBatch = 256 * 1024;  // plaintext one write_some takes at most

// The I/O state one SSL object's BIO works on (tls_stream.cc). Not for use outside this header.
struct TlsIo {
  int fd = -1;
  std::string prefix;  // ciphertext read from the socket before the stream took it over
  size_t prefix_off = 0;
  // Ciphertext one recv brought (kTlsReadBuffer, allocated at the first read), not yet handed to
  // OpenSSL: [in_pos, in_end).
  std::unique_ptr<char[]> in;
  size_t in_pos = 0, in_end = 0;
  std::string out;       // ciphertext OpenSSL wrote, not yet sent
  std::string deferred;  // what a read produced while a write's send was in flight (key updates)
  bool sending = false;  // a write's send of `out` is in flight: appends go to `deferred`
  int read_errno = 0;    // the errno of a failed recv (0: none)
  bool eof = false;      // recv saw the end of the stream
  uint64_t recvs = 0, sends = 0;  // recv and send calls made (tests)
  // Ciphertext read from the socket that OpenSSL has not taken yet.
  bool buffered() const { return prefix_off < prefix.size() || in_pos < in_end; }
};

namespace tls_detail {

// asio::async_write's default condition (transfer_all) caps each write_some at 64 KiB
// (default_max_transfer_size): a batch of four full records (65,624 bytes) went out as a send of
// 65,536 bytes and one of 88. This condition asks for everything that is left in one send, and
// counts the sends (async_write asks it before each one).
struct TransferAllAtOnce {
  uint64_t* sends;
  size_t operator()(const boost::system::error_code& ec, size_t) {
    if (ec) return 0;
    ++*sends;
    return std::numeric_limits<size_t>::max();
  }
};

// A BIO over `io`: reads take `io->prefix` first, then `io->in`, refilled by one
// recv(io->fd, MSG_DONTWAIT) when empty; writes append to `io->out` (or `io->deferred`) and never
// block. The caller owns `io` (it outlives the BIO).
BIO* NewBio(TlsIo* io);
// Non-blocking send of as much of `buf` as the socket takes; false on a hard error.
bool TrySend(int fd, std::string& buf, uint64_t& sends);
// The error of a failed SSL call (`ret` its return value), as asio::ssl::stream reports it: a
// close_notify is asio::error::eof, an end of stream without one ssl::error::stream_truncated.
boost::system::error_code SslError(SSL* ssl, int ret, const TlsIo& io);
// SSL_new on `ctx` with the stream's settings (buffers kept, whole writes) and the BIO over `io`.
SSL* NewSsl(SSL_CTX* ctx, TlsIo* io);

}  // namespace tls_detail

template <class Socket>
class BatchedTlsStream {
 public:
  using executor_type = typename Socket::executor_type;
  using next_layer_type = Socket;
  using lowest_layer_type = typename Socket::lowest_layer_type;

  BatchedTlsStream(Socket sock, boost::asio::ssl::context& ctx) : sock_(std::move(sock)) {
    io_.fd = sock_.native_handle();
    ssl_ = tls_detail::NewSsl(ctx.native_handle(), &io_);
  }
  ~BatchedTlsStream() {
    if (ssl_) SSL_free(ssl_);
  }
  BatchedTlsStream(const BatchedTlsStream&) = delete;
  BatchedTlsStream& operator=(const BatchedTlsStream&) = delete;

  executor_type get_executor() { return sock_.get_executor(); }
  Socket& next_layer() { return sock_; }
  lowest_layer_type& lowest_layer() { return sock_.lowest_layer(); }
  SSL* native_handle() { return ssl_; }
  const TlsIo& io_state() const { return io_; }

  // Completes with (error_code).
  template <class Token>
  auto async_handshake(boost::asio::ssl::stream_base::handshake_type type, Token&& token) {
    return boost::asio::async_compose<Token, void(boost::system::error_code)>(
        HandshakeOp<false>{this, type, 0, 0, {}, false}, token, sock_);
  }
  // A server handshake whose first bytes were already read (`prefix`); completes with
  // (error_code, bytes of `prefix` used): always all of them, as they are the peer's TLS bytes.
  template <class ConstBuffers, class Token>
  auto async_handshake(boost::asio::ssl::stream_base::handshake_type type,
                       const ConstBuffers& prefix, Token&& token) {
    size_t n = 0;
    for (auto it = boost::asio::buffer_sequence_begin(prefix);
         it != boost::asio::buffer_sequence_end(prefix); ++it) {
      boost::asio::const_buffer b = *it;
      io_.prefix.append(static_cast<const char*>(b.data()), b.size());
      n += b.size();
    }
    return boost::asio::async_compose<Token, void(boost::system::error_code, size_t)>(
        HandshakeOp<true>{this, type, n, 0, {}, false}, token, sock_);
  }
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_compose<Token, void(boost::system::error_code, size_t)>(
        ReadOp<MutableBuffers>{this, buffers, 0, {}, 0, false}, token, sock_);
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_compose<Token, void(boost::system::error_code, size_t)>(
        WriteOp<ConstBuffers>{this, buffers, 0, {}, 0, false}, token, sock_);
  }

 private:
  using error_code = boost::system::error_code;

  // No op completes inside the call that started it (asio's rule for composed operations; a
  // coroutine resumed from inside its own initiation would nest): an op done at once is posted,
  // one resumed by a wait or a send (`resumed`) completes there, without another trip.
  template <bool kWithUsed>
  struct HandshakeOp {
    BatchedTlsStream* s;
    boost::asio::ssl::stream_base::handshake_type type;
    size_t used = 0;
    int state = 0;  // 0 start, 1 waiting to read, 3 sending a flight, 2 done
    error_code result;
    bool resumed = false;
    template <class Self>
    void operator()(Self& self, error_code ec = {}, size_t = 0) {
      if (state == 2) {
        if constexpr (kWithUsed) {
          self.complete(result, used);
        } else {
          self.complete(result);
        }
        return;
      }
      if (state == 0) {
        if (!s->ssl_) return Done(self, boost::asio::error::no_memory);
        if (type == boost::asio::ssl::stream_base::client) {
          SSL_set_connect_state(s->ssl_);
        } else {
          SSL_set_accept_state(s->ssl_);
        }
      } else if (state == 3) {
        s->FinishSend();
      }
      if (ec) return Done(self, ec);
      for (;;) {
        if (!s->io_.out.empty()) {  // a flight to send before anything else
          state = 3;
          resumed = true;
          s->StartSend(std::move(self));
          return;
        }
        ERR_clear_error();
        int r = SSL_do_handshake(s->ssl_);
        if (r == 1) {
          if (!s->io_.out.empty()) continue;  // the last flight (and session tickets)
          return Done(self, {});
        }
        int err = SSL_get_error(s->ssl_, r);
        if (err == SSL_ERROR_WANT_READ && s->io_.out.empty()) {
          state = 1;
          resumed = true;
          s->sock_.async_wait(Socket::wait_read, std::move(self));
          return;
        }
        if (err == SSL_ERROR_WANT_READ) continue;
        return Done(self, tls_detail::SslError(s->ssl_, r, s->io_));
      }
    }
    template <class Self>
    void Done(Self& self, error_code ec) {
      result = ec;
      state = 2;
      if (resumed) return (*this)(self);  // already a continuation: complete now
      boost::asio::post(s->sock_.get_executor(), std::move(self));
    }
  };

  template <class MutableBuffers>
  struct ReadOp {
    BatchedTlsStream* s;
    MutableBuffers buffers;
    int state = 0;  // 0 start, 2 done
    error_code result;
    size_t total = 0;
    bool resumed = false;
    template <class Self>
    void operator()(Self& self, error_code ec = {}, size_t = 0) {
      if (state == 2) return self.complete(result, total);
      if (ec) return Done(self, ec);
      if (!s->ssl_) return Done(self, boost::asio::error::no_memory);
      if (s->read_error_) return Done(self, s->read_error_);
      bool want_read = false;
      // Fill the caller's buffers with as many records' plaintext as OpenSSL holds (one recv at
      // most: when its buffer is empty, the next SSL_read would be another syscall).
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers) && !want_read && !result; ++it) {
        boost::asio::mutable_buffer b = *it;
        char* p = static_cast<char*>(b.data());
        size_t left = b.size();
        while (left > 0) {
          if (total > 0 && !SSL_has_pending(s->ssl_) && !s->io_.buffered()) {
            want_read = true;  // what there was is read; return it rather than recv again
            break;
          }
          ERR_clear_error();
          size_t n = 0;
          int r = SSL_read_ex(s->ssl_, p, left, &n);
          if (r == 1) {
            p += n;
            left -= n;
            total += n;
            continue;
          }
          int err = SSL_get_error(s->ssl_, r);
          if (err == SSL_ERROR_WANT_READ) {
            want_read = true;
            break;
          }
          // An end or an error: what was read first is returned first; the error comes next.
          s->read_error_ = err == SSL_ERROR_ZERO_RETURN
                               ? error_code(boost::asio::error::eof)
                               : tls_detail::SslError(s->ssl_, r, s->io_);
          if (total == 0) result = s->read_error_;
          break;
        }
        if (left > 0) break;
      }
      s->SendControl();
      if (total > 0 || result) return Done(self, result);
      bool empty = true;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        empty &= boost::asio::mutable_buffer(*it).size() == 0;
      }
      if (empty) return Done(self, {});
      resumed = true;
      s->sock_.async_wait(Socket::wait_read, std::move(self));
    }
    template <class Self>
    void Done(Self& self, error_code ec) {
      result = ec;
      state = 2;
      if (resumed) return (*this)(self);  // already a continuation: complete now
      boost::asio::post(s->sock_.get_executor(), std::move(self));
    }
  };

  template <class ConstBuffers>
  struct WriteOp {
    BatchedTlsStream* s;
    ConstBuffers buffers;
    int state = 0;  // 0 start, 1 sending, 2 done
    error_code result;
    size_t total = 0;
    bool resumed = false;
    template <class Self>
    void operator()(Self& self, error_code ec = {}, size_t = 0) {
      if (state == 2) return self.complete(result, total);
      if (state == 1) {
        s->FinishSend();
        if (ec) return Done(self, ec);
        if (!s->io_.out.empty()) return s->StartSend(std::move(self));
        return Done(self, {});
      }
      state = 1;
      if (!s->ssl_) return Done(self, boost::asio::error::no_memory);
      // Small pieces (a head's parts) are gathered into one record; large ones go as they are.
      std::string& gather = s->gather_;
      gather.clear();
      auto write = [&](const char* p, size_t n) -> bool {
        ERR_clear_error();
        size_t w = 0;
        int r = SSL_write_ex(s->ssl_, p, n, &w);  // all of it: the BIO never refuses a write
        if (r != 1) {
          result = tls_detail::SslError(s->ssl_, r, s->io_);
          return false;
        }
        total += w;
        return true;
      };
      bool ok = true;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           ok && it != boost::asio::buffer_sequence_end(buffers) && total + gather.size() <
                                                                         kTlsWriteBatch;
           ++it) {
        boost::asio::const_buffer b = *it;
        size_t n = std::min(b.size(), kTlsWriteBatch - total - gather.size());
        const char* p = static_cast<const char*>(b.data());
        if (n < 16384) {
          gather.append(p, n);
          continue;
        }
        if (!gather.empty()) {
          ok = write(gather.data(), gather.size());
          gather.clear();
        }
        if (ok) ok = write(p, n);
      }
      if (ok && !gather.empty()) ok = write(gather.data(), gather.size());
      if (gather.capacity() > 64 * 1024) gather = std::string();
      if (!ok) return Done(self, result);
      if (s->io_.out.empty()) return Done(self, {});
      resumed = true;
      s->StartSend(std::move(self));
    }
    template <class Self>
    void Done(Self& self, error_code ec) {
      result = ec;
      state = 2;
      if (resumed) return (*this)(self);  // already a continuation: complete now
      boost::asio::post(s->sock_.get_executor(), std::move(self));
    }
  };

  // Sends all of `out` (one send() unless the socket's buffer is full); while it is in flight what
  // OpenSSL writes goes to `deferred`.
  template <class Handler>
  void StartSend(Handler&& h) {
    io_.sending = true;
    boost::asio::async_write(sock_, boost::asio::buffer(io_.out),
                             tls_detail::TransferAllAtOnce{&io_.sends}, std::forward<Handler>(h));
  }
  void FinishSend() {
    io_.sending = false;
    io_.out.clear();
    if (!io_.deferred.empty()) {  // a read's key update goes next
      io_.out.swap(io_.deferred);
      io_.deferred.clear();
    }
  }
  // What a read made OpenSSL write (a key update's answer): sent now if no write is in flight,
  // else the write in flight sends it after its own bytes.
  void SendControl() {
    if (io_.sending || io_.out.empty()) return;
    if (!tls_detail::TrySend(io_.fd, io_.out, io_.sends)) io_.out.clear();
  }

  Socket sock_;
  TlsIo io_;
  SSL* ssl_ = nullptr;
  std::string gather_;
  error_code read_error_;
};

}  // namespace cloister::proxy

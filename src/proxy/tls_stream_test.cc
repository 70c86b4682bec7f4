// BatchedTlsStream (tls_stream.h) against a peer whose every byte on the wire the test decides:
// the peer is OpenSSL on memory BIOs, so records can be cut anywhere across TCP sends, and the
// stream's reads and writes are checked at their boundaries (partial records, several records per
// read, reads smaller than a record, one write of many records), its prefix handshake, key
// updates while reading, and how the stream ends (close_notify, a bare close, garbage).
#include "proxy/tls_stream.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <sys/ioctl.h>

#include <boost/asio/use_future.hpp>
#include <thread>

#include "proxy/ca.h"

namespace cloister::proxy {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Stream = BatchedTlsStream<tcp::socket>;

// The peer: a TLS client on memory BIOs over a blocking socket.
class MemPeer {
 public:
  MemPeer(int fd, const std::string& ca_pem) : fd_(fd) {
    timeval limit{10, 0};  // a stream that never answers fails the test instead of hanging it
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ctx_ = SSL_CTX_new(TLS_client_method());
    BIO* b = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
    X509* ca = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), ca);
    X509_free(ca);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    ssl_ = SSL_new(ctx_);
    rbio_ = BIO_new(BIO_s_mem());
    wbio_ = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_, rbio_, wbio_);
    SSL_set_connect_state(ssl_);
    SSL_set_tlsext_host_name(ssl_, "t.test");
    SSL_set1_host(ssl_, "t.test");
  }
  ~MemPeer() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }
  // The ClientHello's bytes (not sent).
  std::string Hello() {
    SSL_do_handshake(ssl_);
    return Drain();
  }
  bool Handshake() {
    for (;;) {
      int r = SSL_do_handshake(ssl_);
      SendAll(Drain());
      if (r == 1) return true;
      if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ || !Pull()) return false;
    }
  }
  // `plain` as records of at most `record` bytes; returns their ciphertext (not sent).
  std::string Encrypt(const std::string& plain, size_t record) {
    for (size_t off = 0; off < plain.size(); off += record) {
      size_t n = std::min(record, plain.size() - off);
      EXPECT_EQ(SSL_write(ssl_, plain.data() + off, static_cast<int>(n)), static_cast<int>(n));
    }
    return Drain();
  }
  // Sends `bytes` in sends of the sizes in `cuts` (cycled).
  void SendCut(const std::string& bytes, const std::vector<size_t>& cuts) {
    size_t off = 0;
    for (size_t i = 0; off < bytes.size(); ++i) {
      size_t n = std::min(cuts[i % cuts.size()], bytes.size() - off);
      SendAll(bytes.substr(off, n));
      off += n;
    }
  }
  void SendAll(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // Reads and decrypts until `n` plaintext bytes came (or the stream ends).
  std::string ReadPlain(size_t n) {
    std::string out;
    char buf[16384];
    while (out.size() < n) {
      int r = SSL_read(ssl_, buf, sizeof buf);
      if (r > 0) {
        out.append(buf, r);
        continue;
      }
      if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ || !Pull()) break;
    }
    SendAll(Drain());
    return out;
  }
  SSL* ssl() { return ssl_; }
  std::string Drain() {
    std::string out;
    char buf[16384];
    int n;
    while ((n = BIO_read(wbio_, buf, sizeof buf)) > 0) out.append(buf, n);
    return out;
  }

 private:
  bool Pull() {
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    BIO_write(rbio_, buf, static_cast<int>(n));
    return true;
  }
  int fd_;
  SSL_CTX* ctx_;
  SSL* ssl_;
  BIO* rbio_;
  BIO* wbio_;
};

class TlsStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = *CertAuthority::CreateInMemory("tls stream test CA");
    auto leaf = ca_->Leaf("t.test");
    ASSERT_TRUE(leaf.ok());
    ASSERT_EQ(SSL_CTX_use_certificate(server_ctx_.native_handle(), leaf->get()), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey(server_ctx_.native_handle(), ca_->leaf_key()), 1);
    tcp::acceptor acc(io_, {asio::ip::make_address("127.0.0.1"), 0});
    client_.connect(acc.local_endpoint());
    acc.accept(server_sock_);
    peer_.emplace(client_.native_handle(), ca_->cert_pem());
    work_.emplace(io_.get_executor());
    runner_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    work_.reset();
    io_.stop();
    runner_.join();
    stream_.reset();  // after the loop stopped: a failed test may leave an operation pending
  }
  // The stream over the accepted socket, handshake done with the peer.
  void Establish() {
    stream_.emplace(std::move(server_sock_), server_ctx_);
    auto hs = stream_->async_handshake(asio::ssl::stream_base::server, asio::use_future);
    ASSERT_TRUE(peer_->Handshake());
    hs.get();
  }
  // Reads from the stream, `chunk` bytes at most per read, until `n` bytes came.
  std::string ReadN(size_t n, size_t chunk) {
    std::string out;
    std::vector<char> buf(chunk);
    while (out.size() < n) {
      try {
        size_t got = stream_->async_read_some(asio::buffer(buf), asio::use_future).get();
        out.append(buf.data(), got);
      } catch (const boost::system::system_error& e) {
        ADD_FAILURE() << "read after " << out.size() << " bytes: " << e.code().message();
        break;
      }
    }
    return out;
  }
  // Waits until the stream's socket holds `n` unread bytes.
  void WaitQueued(size_t n) {
    for (int i = 0; i < 2000; ++i) {
      int q = 0;
      ioctl(stream_->next_layer().native_handle(), FIONREAD, &q);
      if (static_cast<size_t>(q) >= n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // Four full records of 16 KiB, all queued on the stream's socket before a read; their plaintext.
  std::string QueueFourRecords() {
    std::string plain = Pattern(64 * 1024);
    std::string wire = peer_->Encrypt(plain, 16384);
    peer_->SendAll(wire);
    WaitQueued(wire.size());
    return plain;
  }
  static std::string Pattern(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7919 + i / 26) % 26);
    return s;
  }

  asio::io_context io_;
  asio::ssl::context server_ctx_{asio::ssl::context::tls_server};
  std::shared_ptr<CertAuthority> ca_;
  tcp::socket client_{io_};
  tcp::socket server_sock_{io_};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread runner_;
  std::optional<MemPeer> peer_;
  std::optional<Stream> stream_;
};

TEST_F(TlsStreamTest, ReadsTheSameBytesWhereverTheWireCutsTheRecords) {
  Establish();
  // Records of several sizes, their ciphertext cut into sends that split headers, tags and bodies.
  std::string plain = Pattern(300 * 1024);
  std::string wire = peer_->Encrypt(plain.substr(0, 100 * 1024), 16384);  // in this order
  wire += peer_->Encrypt(plain.substr(100 * 1024, 100 * 1024), 777);
  wire += peer_->Encrypt(plain.substr(200 * 1024), 5000);
  std::thread sender([&] { peer_->SendCut(wire, {1, 4, 5, 17, 300, 16389, 2, 40000, 70000}); });
  // Reads smaller than a record: a record's plaintext spans reads.
  std::string got = ReadN(150 * 1024, 7000);
  // Reads larger than what arrives at once.
  got += ReadN(plain.size() - got.size(), 200 * 1024);
  sender.join();
  ASSERT_EQ(got.size(), plain.size());
  EXPECT_TRUE(got == plain) << "bytes differ at " << std::mismatch(got.begin(), got.end(),
                                                                   plain.begin()).first - got.begin();
}

TEST_F(TlsStreamTest, OneReadReturnsEveryRecordThatArrived) {
  Establish();
  // Four full records, all queued on the socket before the read: asio's stream returned one
  // record (16 KiB) per read; this one returns them all (one recv into the stream's buffer).
  std::string plain = QueueFourRecords();
  uint64_t recvs = stream_->io_state().recvs;
  std::vector<char> buf(64 * 1024);
  size_t got = stream_->async_read_some(asio::buffer(buf), asio::use_future).get();
  EXPECT_EQ(got, plain.size());
  EXPECT_EQ(std::string(buf.data(), got), plain);
  EXPECT_EQ(stream_->io_state().recvs - recvs, 1u);
}

TEST_F(TlsStreamTest, RecordsLeftInTheStreamsBufferComeWithTheNextReadWithoutARecv) {
  Establish();
  // One recv takes all four records into the stream's buffer; OpenSSL takes them one at a time
  // (no read-ahead), so after a short read the next read must go on into the buffered records
  // although OpenSSL itself holds nothing more.
  std::string plain = QueueFourRecords();
  uint64_t recvs = stream_->io_state().recvs;
  std::vector<char> buf(64 * 1024);
  size_t first = stream_->async_read_some(asio::buffer(buf.data(), 20000), asio::use_future).get();
  EXPECT_EQ(first, 20000u);
  size_t rest = stream_->async_read_some(asio::buffer(buf.data() + first, buf.size() - first),
                                         asio::use_future)
                    .get();
  EXPECT_EQ(first + rest, plain.size());
  EXPECT_TRUE(std::string(buf.data(), first + rest) == plain);
  EXPECT_EQ(stream_->io_state().recvs - recvs, 1u);
}

TEST_F(TlsStreamTest, OneWriteSendsAllItsRecordsAtOnce) {
  Establish();
  // Room for the whole batch in the socket, so that one send can take it (asio's async_write
  // cut it into sends of 64 KiB).
  stream_->next_layer().set_option(asio::socket_base::send_buffer_size(4 << 20));
  std::string plain = Pattern(200 * 1024);
  uint64_t sends = stream_->io_state().sends;
  // A gathered head (small pieces: one record) and a large body in one write_some.
  std::string head = "HTTP/1.1 200 OK\r\n";
  std::string fields = "Content-Length: 204800\r\n\r\n";
  std::vector<asio::const_buffer> bufs = {asio::buffer(head), asio::buffer(fields),
                                          asio::buffer(plain)};
  auto written = stream_->async_write_some(bufs, asio::use_future);
  std::string expect = head + fields + plain;
  std::string got = peer_->ReadPlain(expect.size());
  EXPECT_EQ(written.get(), expect.size());  // asio's stream took one record (16 KiB) per call
  EXPECT_EQ(stream_->io_state().sends - sends, 1u);
  EXPECT_TRUE(got == expect);
}

TEST_F(TlsStreamTest, HandshakeTakesBytesAlreadyReadAsItsStart) {
  // What the proxy does: it read the ClientHello's first bytes (to tell TLS from HTTP) before
  // the stream existed.
  std::string hello = peer_->Hello();
  ASSERT_GT(hello.size(), 10u);
  peer_->SendAll(hello.substr(0, 5));
  std::string first(5, '\0');
  asio::read(server_sock_, asio::buffer(first));
  peer_->SendAll(hello.substr(5));
  stream_.emplace(std::move(server_sock_), server_ctx_);
  auto hs = stream_->async_handshake(asio::ssl::stream_base::server, asio::buffer(first),
                                     asio::use_future);
  ASSERT_TRUE(peer_->Handshake()) << "the stream did not take the prefix as the hello's start";
  EXPECT_EQ(hs.get(), 5u);
  peer_->SendAll(peer_->Encrypt("ping", 16384));
  EXPECT_EQ(ReadN(4, 100), "ping");
}

TEST_F(TlsStreamTest, AKeyUpdateWhileReadingIsAnsweredAndWritesGoOn) {
  Establish();
  ASSERT_EQ(SSL_key_update(peer_->ssl(), SSL_KEY_UPDATE_REQUESTED), 1);
  peer_->SendAll(peer_->Encrypt("after the update", 16384));
  EXPECT_EQ(ReadN(16, 100), "after the update");
  std::string reply = Pattern(100 * 1024);
  auto w = asio::async_write(*stream_, asio::buffer(reply), asio::use_future);
  EXPECT_TRUE(peer_->ReadPlain(reply.size()) == reply);
  EXPECT_EQ(w.get(), reply.size());
  // The peer got our key update: its next write under its new keys still reads.
  peer_->SendAll(peer_->Encrypt("again", 16384));
  EXPECT_EQ(ReadN(5, 100), "again");
}

TEST_F(TlsStreamTest, AReadAndAWriteAtOnce) {
  Establish();
  std::vector<char> buf(1024);
  auto r = stream_->async_read_some(asio::buffer(buf), asio::use_future);
  std::string out = Pattern(50000);
  auto w = asio::async_write(*stream_, asio::buffer(out), asio::use_future);
  EXPECT_TRUE(peer_->ReadPlain(out.size()) == out);
  EXPECT_EQ(w.get(), out.size());
  peer_->SendAll(peer_->Encrypt("in", 16384));
  size_t n = r.get();
  EXPECT_EQ(std::string(buf.data(), n), "in");
}

TEST_F(TlsStreamTest, CloseNotifyIsEndOfStreamAfterTheLastBytes) {
  Establish();
  std::string wire = peer_->Encrypt("last", 16384);
  SSL_shutdown(peer_->ssl());
  peer_->SendAll(wire + peer_->Drain());
  WaitQueued(wire.size() + 10);
  EXPECT_EQ(ReadN(4, 100), "last");
  std::vector<char> buf(100);
  boost::system::error_code ec;
  try {
    stream_->async_read_some(asio::buffer(buf), asio::use_future).get();
  } catch (const boost::system::system_error& e) {
    ec = e.code();
  }
  EXPECT_EQ(ec, asio::error::eof);
}

TEST_F(TlsStreamTest, ABareCloseIsTruncation) {
  Establish();
  peer_->SendAll(peer_->Encrypt("cut", 16384));
  client_.shutdown(tcp::socket::shutdown_send);  // a FIN, no close_notify
  EXPECT_EQ(ReadN(3, 100), "cut");
  std::vector<char> buf(100);
  boost::system::error_code ec;
  try {
    stream_->async_read_some(asio::buffer(buf), asio::use_future).get();
  } catch (const boost::system::system_error& e) {
    ec = e.code();
  }
  EXPECT_EQ(ec, asio::ssl::error::stream_truncated);
}

TEST_F(TlsStreamTest, GarbageInsteadOfAHandshakeIsAnError) {
  stream_.emplace(std::move(server_sock_), server_ctx_);
  auto hs = stream_->async_handshake(asio::ssl::stream_base::server, asio::use_future);
  peer_->SendAll(std::string("\x16\x03\x01\xff\xff", 5) + std::string(3000, 'G'));
  client_.shutdown(tcp::socket::shutdown_send);
  EXPECT_THROW(hs.get(), boost::system::system_error);
}

}  // namespace
}  // namespace cloister::proxy

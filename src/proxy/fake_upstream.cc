#include "proxy/fake_upstream.h"

#include <openssl/ssl.h>
#include <pthread.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <fstream>

#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::proxy::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::ip::tcp;

namespace {

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    default: return "Status";
  }
}

std::string Head(int status, const std::map<std::string, std::string>& headers) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  return h;
}

// The ALPN list the client offered in the handshake running on this thread.
thread_local std::string tls_alpn_offered;

template <class Stream>
class Writer : public ResponseWriter {
 public:
  Writer(Stream& s, beast::flat_buffer& buf) : s_(s), buf_(buf) {}
  bool Send(int status, const std::map<std::string, std::string>& headers,
            const std::string& body) override {
    NoteClose(headers);
    return Write(Head(status, headers) + "Content-Length: " + std::to_string(body.size()) +
                 "\r\n\r\n" + body);
  }
  bool StartChunked(int status, const std::map<std::string, std::string>& headers) override {
    NoteClose(headers);
    return Write(Head(status, headers) + "Transfer-Encoding: chunked\r\n\r\n");
  }
  bool Chunk(const std::string& data) override {
    char len[32];
    snprintf(len, sizeof len, "%zx\r\n", data.size());
    return Write(std::string(len) + data + "\r\n");
  }
  bool End() override { return Write("0\r\n\r\n"); }
  bool SendBulk(int status, uint64_t total) override {
    if (!Write(Head(status, {{"Content-Type", "application/octet-stream"}}) +
               "Content-Length: " + std::to_string(total) + "\r\n\r\n")) {
      return false;
    }
    std::string block(256 * 1024, 'x');
    while (total > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(total, block.size()));
      boost::system::error_code ec;
      asio::write(s_, asio::buffer(block.data(), n), ec);
      if (ec) return false;
      total -= n;
    }
    return true;
  }
  bool UpgradeEcho() override {
    if (!Write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")) {
      return false;
    }
    boost::system::error_code ec;
    if (buf_.size() > 0) {
      asio::write(s_, buf_.data(), ec);
      buf_.consume(buf_.size());
      if (ec) return false;
    }
    char b[16384];
    for (;;) {
      size_t n = s_.read_some(asio::buffer(b), ec);
      if (ec) return true;
      asio::write(s_, asio::buffer(b, n), ec);
      if (ec) return true;
    }
  }

  void DropAfter() override { closing_ = true; }
  // The handler answered with Connection: close (or dropped): the server closes after this
  // response.
  bool closing() const { return closing_; }

 private:
  void NoteClose(const std::map<std::string, std::string>& headers) {
    for (const auto& [k, v] : headers) {
      if (ToLower(k) == "connection" && ToLower(v) == "close") closing_ = true;
    }
  }
  bool closing_ = false;
  bool Write(const std::string& data) {
    boost::system::error_code ec;
    asio::write(s_, asio::buffer(data), ec);
    return !ec;
  }
  Stream& s_;
  beast::flat_buffer& buf_;
};

}  // namespace

class FakeUpstream::Impl {
 public:
  Impl(std::shared_ptr<CertAuthority> ca, Handler handler)
      : ca_(std::move(ca)), handler_(std::move(handler)), ctx_(ssl::context::tls_server),
        acceptor_(io_) {}

  ~Impl() {
    stopping_ = true;
    boost::system::error_code ec;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes the blocking accept()
    if (accept_thread_.joinable()) accept_thread_.join();
    acceptor_.close(ec);
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    for (auto& t : conn_threads_) {
      if (t.joinable()) t.join();
    }
  }

  Result<uint16_t> Start() {
    if (ca_) {
      SSL_CTX_set_cert_cb(ctx_.native_handle(), &Impl::CertCb, this);
      static const auto alpn = [](SSL*, const unsigned char** out, unsigned char* outlen,
                                  const unsigned char* in, unsigned int inlen, void*) -> int {
        tls_alpn_offered.clear();
        for (unsigned i = 0; i < inlen;) {
          unsigned len = in[i];
          if (i + 1 + len > inlen) break;
          if (!tls_alpn_offered.empty()) tls_alpn_offered += ",";
          tls_alpn_offered.append(reinterpret_cast<const char*>(in + i + 1), len);
          i += 1 + len;
        }
        *out = reinterpret_cast<const unsigned char*>("http/1.1");
        *outlen = 8;
        return SSL_TLSEXT_ERR_OK;
      };
      SSL_CTX_set_alpn_select_cb(ctx_.native_handle(), alpn, nullptr);
    }
    boost::system::error_code ec;
    acceptor_.open(tcp::v4(), ec);
    if (!ec) acceptor_.bind(tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0), ec);
    if (!ec) acceptor_.listen(64, ec);
    if (ec) return Error(ErrorCode::kIo, "fake upstream listen: " + ec.message());
    uint16_t port = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return port;
  }

  std::vector<SeenRequest> requests() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }
  size_t connections() {
    std::lock_guard<std::mutex> l(mu_);
    return fds_.size();
  }
  bool WaitFor(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return seen_.size() >= n; });
  }

 private:
  static int CertCb(SSL* ssl, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    auto leaf = self->ca_->Leaf(sni ? sni : "127.0.0.1");
    if (!leaf.ok()) return 0;
    return SSL_use_certificate(ssl, leaf->get()) == 1 &&
           SSL_use_PrivateKey(ssl, self->ca_->leaf_key()) == 1;
  }

  void AcceptLoop() {
    while (!stopping_) {
      boost::system::error_code ec;
      tcp::socket s(io_);
      acceptor_.accept(s, ec);
      if (ec) return;
      s.set_option(tcp::no_delay(true), ec);
      std::lock_guard<std::mutex> l(mu_);
      fds_.push_back(s.native_handle());
      conn_threads_.emplace_back([this, sock = std::move(s)]() mutable {
        pthread_setname_np(pthread_self(), "fake-upstream");
        Serve(std::move(sock));
      });
    }
  }

  void Serve(tcp::socket sock) {
    if (ca_) {
      ssl::stream<tcp::socket> tls(std::move(sock), ctx_);
      boost::system::error_code ec;
      tls_alpn_offered.clear();
      tls.handshake(ssl::stream_base::server, ec);
      if (ec) return;
      const char* sni = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
      Loop(tls, sni ? sni : "", tls_alpn_offered);
    } else {
      Loop(sock, "", "");
    }
  }

  template <class Stream>
  void Loop(Stream& s, const std::string& sni, const std::string& alpn) {
    beast::flat_buffer buf;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(256 << 20);
      boost::system::error_code ec;
      http::read(s, buf, parser, ec);
      if (ec) return;
      auto& req = parser.get();
      SeenRequest seen;
      seen.sni = sni;
      seen.alpn_offered = alpn;
      seen.method = std::string(req.method_string());
      seen.target = std::string(req.target());
      for (const auto& f : req) {
        std::string name = ToLower(std::string(f.name_string()));
        std::string& slot = seen.headers[name];
        slot += (slot.empty() ? "" : ", ") + std::string(f.value());
      }
      seen.body = std::move(req.body());
      bool keep = req.keep_alive();
      {
        std::lock_guard<std::mutex> l(mu_);
        seen_.push_back(seen);
        cv_.notify_all();
      }
      Writer<Stream> w(s, buf);
      handler_(seen, w);
      if (!keep || w.closing()) return;
    }
  }

  std::shared_ptr<CertAuthority> ca_;
  Handler handler_;
  asio::io_context io_;
  ssl::context ctx_;
  tcp::acceptor acceptor_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> conn_threads_;
  std::vector<int> fds_;
  std::vector<SeenRequest> seen_;
};

Result<std::unique_ptr<FakeUpstream>> FakeUpstream::Start(std::shared_ptr<CertAuthority> ca,
                                                          Handler handler) {
  std::unique_ptr<FakeUpstream> f(new FakeUpstream());
  f->impl_ = std::make_unique<Impl>(std::move(ca), std::move(handler));
  ASSIGN_OR_RETURN(f->port_, f->impl_->Start());
  return f;
}

FakeUpstream::~FakeUpstream() = default;

std::vector<SeenRequest> FakeUpstream::requests() { return impl_->requests(); }
size_t FakeUpstream::connections() { return impl_->connections(); }
bool FakeUpstream::WaitForRequests(size_t n, std::chrono::milliseconds timeout) {
  return impl_->WaitFor(n, timeout);
}

namespace {

// Runs `git http-backend` as a CGI for one request.
void GitCgi(const std::string& root, const SeenRequest& r, ResponseWriter& w) {
  std::string path = r.target.substr(0, r.target.find('?'));
  std::string query = r.target.find('?') == std::string::npos ? "" : r.target.substr(r.target.find('?') + 1);
  RunOptions o;
  o.stdin_data = r.body;
  o.env_set = {{"GIT_PROJECT_ROOT", root}, {"GIT_HTTP_EXPORT_ALL", "1"},
               {"PATH_INFO", path}, {"QUERY_STRING", query},
               {"REQUEST_METHOD", r.method}, {"CONTENT_TYPE", r.Header("content-type")},
               {"CONTENT_LENGTH", std::to_string(r.body.size())},
               {"HTTP_CONTENT_ENCODING", r.Header("content-encoding")},
               {"GIT_PROTOCOL", r.Header("git-protocol")},
               {"REMOTE_USER", "x-access-token"}, {"REMOTE_ADDR", "127.0.0.1"},
               {"GIT_CONFIG_NOSYSTEM", "1"}, {"HOME", root}};
  o.timeout = std::chrono::seconds(60);
  auto out = RunProcess({"git", "http-backend"}, o);
  if (!out.ok() || out->out.empty()) {
    w.Send(500, {}, "cgi failed");
    return;
  }
  size_t sep = out->out.find("\r\n\r\n");
  size_t skip = 4;
  if (sep == std::string::npos) {
    sep = out->out.find("\n\n");
    skip = 2;
  }
  std::map<std::string, std::string> headers;
  int status = 200;
  for (const std::string& line : Split(out->out.substr(0, sep), '\n')) {
    std::string l = Trim(line);
    size_t colon = l.find(':');
    if (colon == std::string::npos) continue;
    std::string name = l.substr(0, colon), value = Trim(l.substr(colon + 1));
    if (ToLower(name) == "status") status = std::atoi(value.c_str());
    else headers[name] = value;
  }
  w.Send(status, headers, out->out.substr(sep + skip));
}

}  // namespace

Handler GitHttpBackend(const std::string& project_root, const std::string& authorization) {
  return [project_root, authorization](const SeenRequest& r, ResponseWriter& w) {
    if (r.Header("authorization") != authorization) {
      w.Send(401, {{"WWW-Authenticate", "Basic realm=\"git\""}}, "auth required");
      return;
    }
    GitCgi(project_root, r, w);
  };
}

std::string WriteTempFile(const std::string& dir, const std::string& name,
                          const std::string& content) {
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  return path;
}

}  // namespace cloister::proxy::testing

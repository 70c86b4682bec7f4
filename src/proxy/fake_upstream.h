// Test and bench support: a small HTTP/1.1 server (TLS or plain) on 127.0.0.1:0 that records what
// it receives. It plays api.anthropic.com, api.github.com, a git server... reached through the
// proxy's resolve override. Never used by the product.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "proxy/ca.h"

namespace cloister::proxy::testing {

struct SeenRequest {
  std::string sni;
  std::string alpn_offered;  // the client's ALPN list, comma-separated ("" when none; TLS only)
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // lower-case names; repeated ones joined by ", "
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// Writes one response. Either Send() once, or StartChunked() + Chunk()* + End().
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual bool Send(int status, const std::map<std::string, std::string>& headers,
                    const std::string& body) = 0;
  virtual bool StartChunked(int status, const std::map<std::string, std::string>& headers) = 0;
  virtual bool Chunk(const std::string& data) = 0;
  virtual bool End() = 0;
  // Writes `total` bytes of body with a Content-Length header, generated in pieces (bench).
  virtual bool SendBulk(int status, uint64_t total) = 0;
  // Answers 101 (Upgrade: websocket) and then echoes every byte it reads, prefixed by nothing,
  // until the client closes (a WebSocket server in miniature: bytes only, no framing).
  virtual bool UpgradeEcho() = 0;
  // Closes the connection after this response without saying so (no Connection: close), as a
  // server does with a keep-alive connection it lets go while idle.
  virtual void DropAfter() = 0;
};

using Handler = std::function<void(const SeenRequest&, ResponseWriter&)>;

class FakeUpstream {
 public:
  // `ca` signs the server's certificates (leaf per SNI); null for plain HTTP.
  static Result<std::unique_ptr<FakeUpstream>> Start(std::shared_ptr<CertAuthority> ca,
                                                     Handler handler);
  ~FakeUpstream();

  uint16_t port() const { return port_; }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<SeenRequest> requests();
  // Connections accepted so far (keep-alive reuse shows as fewer connections than requests).
  size_t connections();
  // Waits until at least n requests were seen (bounded).
  bool WaitForRequests(size_t n, std::chrono::milliseconds timeout);

  class Impl;

 private:
  FakeUpstream() = default;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

// A gate a handler can wait on and a test can open (bounded waits, no sleeps).
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A git server over smart HTTP: `git http-backend` as a CGI per request, serving the bare
// repositories under `project_root` (pushes need http.receivepack true in the repository). Every
// request must carry exactly `authorization` (e.g. "Basic base64(x-access-token:REAL)"), else 401
// with a Basic challenge, as GitHub answers.
Handler GitHttpBackend(const std::string& project_root, const std::string& authorization);

// Writes `content` to a new file in `dir` and returns its path.
std::string WriteTempFile(const std::string& dir, const std::string& name, const std::string& content);

}  // namespace cloister::proxy::testing

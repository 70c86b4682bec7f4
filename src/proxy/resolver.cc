#include "proxy/resolver.h"

#include <ares.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <mutex>

namespace cloister::proxy {
namespace {

using Clock = std::chrono::steady_clock;

std::once_flag g_ares_init;

}  // namespace

class Resolver::Impl {
 public:
  explicit Impl(asio::io_context& io) : io_(io), timer_(io) {}
  ~Impl() {
    if (channel_) {
      // Fails what is in flight (ARES_EDESTRUCTION) and closes c-ares' sockets: our watchers
      // release them first (SockState with neither flag).
      ares_destroy(channel_);
      channel_ = nullptr;
    }
    error_code ec;
    timer_.cancel(ec);
    for (auto& [fd, w] : watchers_) Forget(*w);
  }

  Status Init(const std::string& servers) {
    std::call_once(g_ares_init, [] { ares_library_init(ARES_LIB_INIT_ALL); });
    ares_options opts{};
    opts.sock_state_cb = &Impl::SockState;
    opts.sock_state_cb_data = this;
    // A server that does not answer one query (a dropped reply) is asked again after 2 s, not 5.
    opts.timeout = 2000;
    opts.tries = 3;
    int rc = ares_init_options(&channel_, &opts,
                               ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
    if (rc != ARES_SUCCESS) {
      return Error(ErrorCode::kUnavailable, std::string("DNS resolver: ") + ares_strerror(rc));
    }
    if (!servers.empty()) {
      rc = ares_set_servers_ports_csv(channel_, servers.c_str());
      if (rc != ARES_SUCCESS) {
        return Error(ErrorCode::kInvalidArgument,
                     "DNS servers " + servers + ": " + ares_strerror(rc));
      }
    }
    return OkStatus();
  }

  // One name's cache entry, and the lookup in flight for it (waiters sleep on `done` until the
  // answer cancels it).
  struct Entry {
    explicit Entry(asio::io_context& io) : done(io) {}
    asio::steady_timer done;
    bool in_flight = false;
    int status = ARES_SUCCESS;
    std::vector<asio::ip::address> addresses;
    Clock::time_point expires{};
  };

  awaitable<Result<std::vector<asio::ip::address>>> Resolve(Resolver& owner,
                                                             const std::string& host) {
    error_code ec;
    auto literal = asio::ip::make_address(host, ec);
    if (!ec) co_return std::vector<asio::ip::address>{literal};
    if (entries_.size() >= kMaxEntries && !entries_.count(host)) Prune();
    std::shared_ptr<Entry>& slot = entries_[host];
    if (!slot) slot = std::make_shared<Entry>(io_);
    std::shared_ptr<Entry> e = slot;
    if (!e->in_flight && e->status == ARES_SUCCESS && !e->addresses.empty() &&
        Clock::now() < e->expires) {
      co_return e->addresses;  // fresh in the cache
    }
    if (!e->in_flight) {
      e->in_flight = true;
      e->addresses.clear();
      e->done.expires_at(Clock::time_point::max());
      ++owner.queries_;
      ares_addrinfo_hints hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      auto* arg = new Pending{this, e};
      ares_getaddrinfo(channel_, host.c_str(), nullptr, &hints, &Impl::Answered, arg);
      ArmTimer();
    }
    while (e->in_flight) {
      auto [wec] = co_await e->done.async_wait(kTok);
      (void)wec;  // cancelled by the answer (or by the resolver going away)
    }
    if (e->status != ARES_SUCCESS || e->addresses.empty()) {
      std::string why = e->status != ARES_SUCCESS ? ares_strerror(e->status) : "no address";
      co_return Error(ErrorCode::kUnavailable, "resolve " + host + ": " + why);
    }
    co_return e->addresses;
  }

 private:
  // SECURITY: the names are the guest's choice: the cache holds at most kMaxEntries of them.
  static constexpr size_t kMaxEntries = 4096;

  // Drops expired entries, and if that is not enough, every one not in flight.
  void Prune() {
    auto now = Clock::now();
    for (bool all : {false, true}) {
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (!it->second->in_flight && (all || it->second->expires <= now)) {
          it = entries_.erase(it);
        } else {
          ++it;
        }
      }
      if (entries_.size() < kMaxEntries) return;
    }
  }

  struct Pending {
    Impl* self;
    std::shared_ptr<Entry> entry;
  };

  // A socket c-ares wants watched, wrapped for Asio without taking it over.
  struct Watcher {
    Watcher(asio::io_context& io, int fd) : fd(fd), d(io, fd) {}
    int fd;
    asio::posix::stream_descriptor d;
    bool want_read = false, want_write = false;
    bool reading = false, writing = false;
    bool live = true;
  };

  static void Answered(void* arg, int status, int, ares_addrinfo* res) {
    std::unique_ptr<Pending> p(static_cast<Pending*>(arg));
    Entry& e = *p->entry;
    e.status = status;
    int ttl = static_cast<int>(kMaxCacheTtl.count());
    if (status == ARES_SUCCESS && res) {
      for (ares_addrinfo_node* n = res->nodes; n; n = n->ai_next) {
        ttl = std::min(ttl, std::max(0, n->ai_ttl));
        if (n->ai_family == AF_INET) {
          const auto* sin = reinterpret_cast<const sockaddr_in*>(n->ai_addr);
          asio::ip::address_v4::bytes_type b;
          std::memcpy(b.data(), &sin->sin_addr, 4);
          e.addresses.push_back(asio::ip::address_v4(b));
        } else if (n->ai_family == AF_INET6) {
          const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(n->ai_addr);
          asio::ip::address_v6::bytes_type b;
          std::memcpy(b.data(), &sin6->sin6_addr, 16);
          e.addresses.push_back(asio::ip::address_v6(b, sin6->sin6_scope_id));
        }
      }
    }
    if (res) ares_freeaddrinfo(res);
    // TTL 0 (or a failure): answered now, kept for no one after.
    e.expires = Clock::now() + std::chrono::seconds(ttl);
    if (ttl == 0) e.expires = Clock::time_point{};
    e.in_flight = false;
    error_code ec;
    e.done.cancel(ec);
  }

  static void SockState(void* data, ares_socket_t fd, int readable, int writable) {
    auto* self = static_cast<Impl*>(data);
    auto it = self->watchers_.find(fd);
    if (!readable && !writable) {
      if (it != self->watchers_.end()) {
        Forget(*it->second);
        self->watchers_.erase(it);
      }
      return;
    }
    if (it == self->watchers_.end()) {
      it = self->watchers_.emplace(fd, std::make_shared<Watcher>(self->io_, fd)).first;
    }
    std::shared_ptr<Watcher> w = it->second;
    w->want_read = readable;
    w->want_write = writable;
    self->Watch(w);
  }

  // Stops watching without closing: the socket is c-ares'.
  static void Forget(Watcher& w) {
    w.live = false;
    error_code ec;
    w.d.cancel(ec);
    w.d.release();
  }

  void Watch(const std::shared_ptr<Watcher>& w) {
    if (w->want_read && !w->reading) {
      w->reading = true;
      w->d.async_wait(asio::posix::descriptor_base::wait_read, [this, w](error_code ec) {
        w->reading = false;
        if (!w->live || ec) return;
        ares_process_fd(channel_, w->fd, ARES_SOCKET_BAD);
        if (w->live) Watch(w);
        ArmTimer();
      });
    }
    if (w->want_write && !w->writing) {
      w->writing = true;
      w->d.async_wait(asio::posix::descriptor_base::wait_write, [this, w](error_code ec) {
        w->writing = false;
        if (!w->live || ec) return;
        ares_process_fd(channel_, ARES_SOCKET_BAD, w->fd);
        if (w->live) Watch(w);
        ArmTimer();
      });
    }
  }

  // c-ares' own timeouts and retries: process when its next one is due.
  void ArmTimer() {
    if (!channel_) return;
    timeval tv{};
    if (!ares_timeout(channel_, nullptr, &tv)) {
      error_code ec;
      timer_.cancel(ec);
      return;
    }
    timer_.expires_after(std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec));
    timer_.async_wait([this](error_code ec) {
      if (ec || !channel_) return;
      ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
      ArmTimer();
    });
  }

  asio::io_context& io_;
  asio::steady_timer timer_;
  ares_channel channel_ = nullptr;
  std::map<ares_socket_t, std::shared_ptr<Watcher>> watchers_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
};

Resolver::Resolver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Resolver::~Resolver() = default;

Result<std::unique_ptr<Resolver>> Resolver::Create(asio::io_context& io, const std::string& servers) {
  auto impl = std::make_unique<Impl>(io);
  RETURN_IF_ERROR(impl->Init(servers));
  return std::unique_ptr<Resolver>(new Resolver(std::move(impl)));
}

awaitable<Result<std::vector<asio::ip::address>>> Resolver::Resolve(const std::string& host) {
  co_return co_await impl_->Resolve(*this, host);
}

}  // namespace cloister::proxy

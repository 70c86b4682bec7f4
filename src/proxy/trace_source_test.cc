// The trace's `source` (proxy/trace.h): every record of a stream handed over with
// Serve(fd, source) / ServeTransparent(fd, source) carries it (the workspace's browser VM,
// supervisor/browser_vm.h), in proxy mode (absolute-form HTTP, CONNECT) and transparent mode;
// a stream handed over without one has none. Nothing resolves (resolve-only, empty map): each
// request is refused by the proxy itself and traced.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "proxy/test_env.h"

namespace cloister::proxy {
namespace {

using testing::ProxyEnv;

// Writes `bytes` into a stream the proxy serves and reads until it closes (bounded by the proxy).
void Exchange(ProxyEnv& env, const std::string& bytes, const std::string& source, bool transparent) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  if (transparent) {
    source.empty() ? env.proxy->ServeTransparent(sv[0]) : env.proxy->ServeTransparent(sv[0], source);
  } else {
    source.empty() ? env.proxy->Serve(sv[0]) : env.proxy->Serve(sv[0], source);
  }
  ASSERT_EQ(write(sv[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  shutdown(sv[1], SHUT_WR);
  char buf[4096];
  while (read(sv[1], buf, sizeof buf) > 0) {
  }
  close(sv[1]);
}

TEST(TraceSourceTest, ServedWithASourceEveryRecordCarriesIt) {
  ProxyEnv env;
  ASSERT_NO_FATAL_FAILURE(env.StartProxy({}));
  const std::string get_ws = "GET http://nowhere.test/ws HTTP/1.1\r\nHost: nowhere.test\r\n\r\n";
  const std::string get_br = "GET http://nowhere.test/br HTTP/1.1\r\nHost: nowhere.test\r\n\r\n";
  // Not TLS inside the tunnel: refused and traced by the CONNECT handler.
  const std::string connect =
      "CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\nnot TLS at all\r\n";
  const std::string transparent =
      "nowhere.test 80\nGET /tr HTTP/1.1\r\nHost: nowhere.test\r\n\r\n";
  Exchange(env, get_ws, "", false);
  Exchange(env, get_br, "browser", false);
  Exchange(env, connect, "browser", false);
  Exchange(env, transparent, "browser", true);
  std::vector<TraceRecord> recs = env.TraceAtLeast(4);
  ASSERT_GE(recs.size(), 4u);
  int ws = 0, br = 0, conn = 0, tr = 0;
  for (const TraceRecord& r : recs) {
    if (r.path == "/ws") {
      EXPECT_EQ(r.source, "");
      ++ws;
    } else if (r.path == "/br") {
      EXPECT_EQ(r.source, "browser");
      ++br;
    } else if (r.method == "CONNECT") {
      EXPECT_EQ(r.source, "browser");
      ++conn;
    } else if (r.mode == "transparent") {
      EXPECT_EQ(r.source, "browser") << r.ToJson().dump();
      ++tr;
    }
    EXPECT_EQ(r.ToJson().contains("source"), !r.source.empty());
  }
  EXPECT_EQ(ws, 1);
  EXPECT_EQ(br, 1);
  EXPECT_EQ(conn, 1);
  EXPECT_GE(tr, 1);
}

}  // namespace
}  // namespace cloister::proxy

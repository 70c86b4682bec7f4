#include "proxy/http_head.h"

#include <gtest/gtest.h>

namespace cloister::proxy {
namespace {

bool Ok(const std::string& bytes) { return ParseRequestBytes(bytes).ok(); }

TEST(HttpHeadTest, AcceptsOrdinaryRequests) {
  EXPECT_TRUE(Ok("GET http://example.test/x HTTP/1.1\r\nHost: example.test\r\n\r\n"));
  EXPECT_TRUE(Ok("CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n"));
  EXPECT_TRUE(Ok("POST /v1 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc"));
  size_t n = 0;
  EXPECT_TRUE(ParseRequestBytes("POST /v1 HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked"
                                "\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", &n).ok());
  EXPECT_EQ(n, 5u);
  EXPECT_TRUE(Ok("GET http://a.test/ HTTP/1.0\r\n\r\n"));
}

TEST(HttpHeadTest, RejectsSmuggling) {
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n"
                  "Content-Length: 3\r\n\r\n0\r\n\r\n"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n"
                  "Content-Length: 4\r\n\r\nabcd"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3, 3\r\n\r\nabc"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: identity\r\n\r\n"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nContent-Length: -1\r\n\r\n"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nContent-Length: +3\r\n\r\nabc"));
  EXPECT_FALSE(Ok("GET /v HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"));
}

TEST(HttpHeadTest, RejectsBadChunksLinesAndHeaders) {
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "zz\r\nabc\r\n0\r\n\r\n"));
  EXPECT_FALSE(Ok("POST /v HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "fffffffffffffffffffff\r\nabc\r\n"));
  EXPECT_FALSE(Ok("GET  /v HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  EXPECT_FALSE(Ok("GET /v HTTP/2.0\r\nHost: a.test\r\n\r\n"));
  EXPECT_FALSE(Ok("GET /v\r\nHost: a.test\r\n\r\n"));
  EXPECT_FALSE(Ok("GET /v HTTP/1.1\r\n\r\n"));  // no Host
  EXPECT_FALSE(Ok("GET /v HTTP/1.1\r\nHost: a.test\r\nBad Header: x\r\n\r\n"));
  EXPECT_FALSE(Ok("GET /v HTTP/1.1\r\nHost: a.test\r\nX: a\rb\r\n\r\n"));
  EXPECT_FALSE(Ok("GET /v HTTP/1.1\r\nHost: a.test\r\nX: " + std::string(70000, 'a') + "\r\n\r\n"));
  std::string many = "GET /v HTTP/1.1\r\nHost: a.test\r\n";
  for (int i = 0; i < 200; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_FALSE(Ok(many + "\r\n"));
  EXPECT_FALSE(Ok("CONNECT api.anthropic.com HTTP/1.1\r\nHost: x\r\n\r\n"));  // no port
  EXPECT_FALSE(Ok("CONNECT a.test:99999 HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  EXPECT_FALSE(Ok("GET http://user@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  EXPECT_FALSE(Ok("GET ftp://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  EXPECT_FALSE(Ok("GET /v HTTP/1.1\r\nHost: a..test\r\n\r\n"));
  EXPECT_FALSE(Ok(""));
  EXPECT_FALSE(Ok("\x16\x03\x01\x02\x00"));
}

TEST(HttpHeadTest, ParsesAuthoritiesAndTargets) {
  auto a = ParseAuthority("API.Anthropic.COM.:443", 0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "api.anthropic.com");
  EXPECT_EQ(a->port, 443);
  auto v6 = ParseAuthority("[::1]:8443", 0);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->HostPort(), "[::1]:8443");
  auto t = ParseTarget("GET", "http://a.test:8080/p?q=1#frag");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->authority.port, 8080);
  EXPECT_EQ(t->path, "/p?q=1");
  EXPECT_FALSE(ParseAuthority("a.test:0", 0).ok());
  EXPECT_FALSE(ParseAuthority("a.test:", 80).ok());
}

}  // namespace
}  // namespace cloister::proxy

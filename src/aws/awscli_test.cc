// awscli v2 (Debian's awscli) end to end through the re-signer (label: integration).
//
//   aws CLI (placeholder secret + placeholder session token)
//     -> a minimal re-signing HTTP forwarder (this file; stands in for the egress proxy's AWS filter)
//     -> a local upstream (src/aws/testdata/sigv4_tool.py serve) that verifies SigV4 with the REAL
//        secret using botocore's signer, and implements STS GetCallerIdentity and a small S3.
// The same awscli commands straight to the upstream, with the placeholder, are rejected.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "aws/resigner.h"
#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::aws {
namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

const char* kPython = "/usr/bin/python3";
const char* kAws = "/usr/bin/aws";

std::string Tool() {
  const char* src = std::getenv("CLOISTER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/src/aws/testdata/sigv4_tool.py";
}

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One request through the re-signer, as the proxy's AWS filter will do it.
Status ResignOne(const Resigner& r, http::request<http::string_body>& req) {
  RequestHead head;
  head.method = std::string(req.method_string());
  head.target = std::string(req.target());
  for (const auto& f : req) {
    if (beast::iequals(f.name_string(), "expect")) continue;  // hop-by-hop here; never signed
    head.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  }
  ASSIGN_OR_RETURN(Resigner::Verdict v, r.Resign(head));
  if (v.need_full_body) RETURN_IF_ERROR(r.ResignWithBody(head, req.body()));
  if (v.chunks) {
    std::string out;
    const std::string& in = req.body();
    for (size_t i = 0; i < in.size(); i += 16384) {
      ASSIGN_OR_RETURN(std::string o, v.chunks->Data(std::string_view(in).substr(i, 16384)));
      out += o;
    }
    RETURN_IF_ERROR(v.chunks->End());
    req.body() = std::move(out);
  }
  req.target(head.target);
  req.erase(http::field::expect);
  for (const Header& h : head.headers) req.set(h.name, h.value);
  return OkStatus();
}

// A keep-alive HTTP/1.1 forwarder on 127.0.0.1:0 that re-signs every request.
class Forwarder {
 public:
  Forwarder(const Resigner* r, uint16_t upstream_port) : r_(r), upstream_port_(upstream_port) {
    acceptor_.open(tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    thread_ = std::thread([this] { Run(); });
  }
  ~Forwarder() {
    beast::error_code ec;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes the blocking accept
    acceptor_.close(ec);
    thread_.join();
    for (auto& t : conns_) t.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int refused() const { return refused_; }

 private:
  void Run() {
    for (;;) {
      beast::error_code ec;
      tcp::socket s(ioc_);
      acceptor_.accept(s, ec);
      if (ec) return;
      conns_.emplace_back([this, s = std::move(s)]() mutable { Serve(std::move(s)); });
    }
  }
  void Serve(tcp::socket client) {
    beast::error_code ec;
    beast::flat_buffer cbuf;
    tcp::socket up(ioc_);
    up.connect({asio::ip::make_address("127.0.0.1"), upstream_port_}, ec);
    if (ec) return;
    beast::flat_buffer ubuf;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(64 << 20);
      http::read_header(client, cbuf, parser, ec);
      if (ec) return;
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        http::write(client, cont, ec);
      }
      http::read(client, cbuf, parser, ec);
      if (ec) return;
      http::request<http::string_body> req = parser.release();
      Status st = ResignOne(*r_, req);
      if (!st.ok()) {
        refused_++;
        http::response<http::string_body> res{http::status::forbidden, 11};
        res.set(http::field::content_type, "text/xml");
        res.body() = "<ErrorResponse><Error><Code>AccessDenied</Code><Message>" + st.error().message() +
                     "</Message></Error></ErrorResponse>";
        res.prepare_payload();
        http::write(client, res, ec);
        continue;
      }
      http::write(up, req, ec);
      if (ec) return;
      http::response_parser<http::string_body> rp;
      rp.body_limit(64 << 20);
      if (req.method() == http::verb::head) rp.skip(true);
      http::read(up, ubuf, rp, ec);
      if (ec) return;
      http::write(client, rp.get(), ec);
      if (ec) return;
    }
  }

  const Resigner* r_;
  uint16_t upstream_port_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};
  std::thread thread_;
  std::vector<std::thread> conns_;
  std::atomic<int> refused_{0};
};

class AwsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists(kAws)) GTEST_SKIP() << "awscli not installed (scripts/install-deps.sh test)";
    auto probe = RunProcess({kPython, "-c", "import botocore"});
    if (!probe.ok() || !probe->success()) GTEST_SKIP() << "python3-botocore not installed";
    char tmpl[] = "/tmp/cloister-awscli-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ / "real.json") << real_.dump();
    auto up = RunProcess({kPython, Tool(), "serve", (dir_ / "real.json").string(), (dir_ / "log").string(),
                          (dir_ / "port").string(), (dir_ / "pid").string()},
                         RunOptions{.timeout = std::chrono::seconds(30)});
    ASSERT_TRUE(up.ok() && up->success()) << (up.ok() ? up->err : up.error().ToString());
    upstream_pid_ = std::stoi(ReadFile(dir_ / "pid"));
    upstream_port_ = static_cast<uint16_t>(std::stoi(ReadFile(dir_ / "port")));
    resigner_ = std::make_unique<Resigner>(AwsSecrets{kKeyId, real_["secret"], real_["token"],
                                                      kPlaceholderSecret, kPlaceholderToken});
    forwarder_ = std::make_unique<Forwarder>(resigner_.get(), upstream_port_);
  }
  void TearDown() override {
    forwarder_.reset();
    if (upstream_pid_ > 0) kill(upstream_pid_, SIGTERM);
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Runs awscli as the guest would: real key id, placeholder secret and token.
  RunOutput Aws(uint16_t port, std::vector<std::string> args, std::string secret = kPlaceholderSecret) {
    std::vector<std::string> argv = {kAws, "--endpoint-url", "http://127.0.0.1:" + std::to_string(port)};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions opts;
    opts.timeout = std::chrono::seconds(120);
    opts.env_set = {{"AWS_ACCESS_KEY_ID", kKeyId}, {"AWS_SECRET_ACCESS_KEY", secret},
                    {"AWS_SESSION_TOKEN", kPlaceholderToken}, {"AWS_DEFAULT_REGION", "us-east-1"},
                    {"AWS_CONFIG_FILE", (dir_ / "none").string()},
                    {"AWS_SHARED_CREDENTIALS_FILE", (dir_ / "none").string()},
                    {"AWS_EC2_METADATA_DISABLED", "true"}, {"AWS_PAGER", ""}, {"HOME", dir_.string()}};
    auto out = RunProcess(argv, opts);
    EXPECT_TRUE(out.ok()) << out.error().ToString();
    return out.ok() ? *out : RunOutput{};
  }

  std::vector<nlohmann::json> Log() {
    std::vector<nlohmann::json> entries;
    for (const std::string& line : Split(ReadFile(dir_ / "log"), '\n')) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded()) entries.push_back(j);
    }
    return entries;
  }

  static constexpr char kKeyId[] = "AKIACLOISTERTEST0002";
  static constexpr char kPlaceholderSecret[] = "CLOISTERpLaceholder/Secret+0000000000000";
  static constexpr char kPlaceholderToken[] = "IQoJb3JpZ2luX2VjCLOISTERplaceholderTOKEN";
  const nlohmann::json real_ = {{"access_key_id", kKeyId},
                                {"secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREAL000KEY"},
                                {"token", "IQoJb3JpZ2luX2VjREALsessionTOKEN0000000000"}};
  fs::path dir_;
  pid_t upstream_pid_ = -1;
  uint16_t upstream_port_ = 0;
  std::unique_ptr<Resigner> resigner_;
  std::unique_ptr<Forwarder> forwarder_;
};

TEST_F(AwsCliTest, StsGetCallerIdentityIsReSigned) {
  RunOutput direct = Aws(upstream_port_, {"sts", "get-caller-identity"});
  EXPECT_NE(direct.exit_code, 0) << "the placeholder alone must be rejected by the upstream";
  RunOutput out = Aws(forwarder_->port(), {"sts", "get-caller-identity", "--output", "json"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  auto doc = nlohmann::json::parse(out.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << out.out;
  EXPECT_EQ(doc["Account"], "123456789012");
  auto log = Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_FALSE(log[0]["ok"].get<bool>());
  EXPECT_TRUE(log[1]["ok"].get<bool>());
  // A guest that signs with anything but the placeholder is refused before the upstream.
  RunOutput wrong = Aws(forwarder_->port(), {"sts", "get-caller-identity"}, "some-other-secret-0000000000000000000000");
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_EQ(forwarder_->refused(), 1);
  EXPECT_EQ(Log().size(), 2u);
}

TEST_F(AwsCliTest, S3MultipartCopyOf20MiBRoundTrips) {
  std::string data(20 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(dir_ / "big.bin", std::ios::binary) << data;
  RunOutput up = Aws(forwarder_->port(), {"s3", "cp", "--no-progress", (dir_ / "big.bin").string(),
                                          "s3://cloister-bucket/big.bin"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  RunOutput down = Aws(forwarder_->port(), {"s3", "cp", "--no-progress", "s3://cloister-bucket/big.bin",
                                            (dir_ / "back.bin").string()});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(ReadFile(dir_ / "back.bin") == data);
  int parts = 0;
  for (const auto& e : Log()) {
    EXPECT_TRUE(e["ok"].get<bool>()) << e.dump();
    if (e["method"] == "PUT") parts++;
  }
  EXPECT_GE(parts, 3) << "a 20 MiB copy is a multipart upload (8 MiB parts)";
}

TEST_F(AwsCliTest, StreamingChunkedUploadIsReSignedChunkByChunk) {
  RunOptions opts;
  opts.stdin_data = nlohmann::json{{"access_key_id", kKeyId}, {"secret", kPlaceholderSecret},
                                   {"token", kPlaceholderToken}}.dump();
  opts.timeout = std::chrono::seconds(60);
  auto via = RunProcess({kPython, Tool(), "put-streaming", "127.0.0.1:" + std::to_string(forwarder_->port()),
                         "cloister-bucket/streamed.bin", "1000000"}, opts);
  ASSERT_TRUE(via.ok() && via->success()) << (via.ok() ? via->err : "");
  EXPECT_EQ(via->out.substr(0, 3), "200") << via->out;
  auto direct = RunProcess({kPython, Tool(), "put-streaming", "127.0.0.1:" + std::to_string(upstream_port_),
                            "cloister-bucket/direct.bin", "100000"}, opts);
  ASSERT_TRUE(direct.ok() && direct->success());
  EXPECT_EQ(direct->out.substr(0, 3), "403") << direct->out;
  auto log = Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_TRUE(log[0]["ok"].get<bool>());
  EXPECT_TRUE(log[0]["streaming"].get<bool>());
  EXPECT_EQ(log[0]["bytes"], 1000000);
  EXPECT_FALSE(log[1]["ok"].get<bool>());
}

}  // namespace
}  // namespace cloister::aws

// Fuzzes SigV4 parsing, canonicalisation, re-signing, the proxy filter and the aws-chunked body
// re-signer with guest-controlled requests. Input: "METHOD TARGET\n" then "Name: value\n" lines,
// an empty line, then the body (fed to the chunk re-signer when the request is a streaming
// upload). The placeholder secret is the AWS documentation's example secret, so corpus files
// holding AWS's documented requests reach the re-signing and chunk paths.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "aws/proxy_filter.h"
#include "aws/resigner.h"
#include "aws/sigv4.h"

using namespace cloister::aws;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t split = in.find("\n\n");
  std::string_view head_text = in.substr(0, split);
  std::string_view body = split == std::string_view::npos ? std::string_view() : in.substr(split + 2);
  RequestHead head;
  size_t pos = 0;
  bool first = true;
  while (pos <= head_text.size()) {
    size_t nl = head_text.find('\n', pos);
    std::string_view line = head_text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (first) {
      size_t sp = line.find(' ');
      head.method = std::string(line.substr(0, sp));
      if (sp != std::string_view::npos) head.target = std::string(line.substr(sp + 1));
      first = false;
    } else {
      size_t colon = line.find(':');
      if (colon != std::string_view::npos) {
        std::string_view v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
        head.headers.push_back({std::string(line.substr(0, colon)), std::string(v)});
      }
    }
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  auto auth = ParseSigV4(head);
  if (auth.ok()) {
    for (UriMode u : {UriMode::kAsIs, UriMode::kDoubleEncode}) {
      (void)CanonicalRequest(head, *auth, CanonicalOptions{u, QueryMode::kAsSent, "x"});
    }
  }
  Resigner r(AwsSecrets{"AKIAIOSFODNN7EXAMPLE", "real-secret", "", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""});
  auto v = r.Resign(head);
  if (v.ok() && v->need_full_body) (void)r.ResignWithBody(head, body);
  if (v.ok() && v->chunks) {
    size_t piece = body.empty() ? 1 : static_cast<uint8_t>(body[0]) + 1;
    for (size_t i = 0; i < body.size(); i += piece) {
      if (!v->chunks->Data(body.substr(i, piece)).ok()) break;
    }
    (void)v->chunks->End();
  }
  // The same request through the proxy filter (scope check, any Authorization in scope, the
  // session-token swap-back path), with a token so the token checks run.
  {
    cloister::proxy::RequestHead ph{head.method, head.target, "s3.amazonaws.com", 443, {}};
    for (const Header& h : head.headers) ph.headers.emplace_back(h.name, h.value);
    AwsProxyFilter f(AwsSecrets{"AKIAIOSFODNN7EXAMPLE", "real-secret", "real-token-0123456789",
                                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "placeholder-token-0123"},
                     {"amazonaws.com"});
    auto fv = f.OnRequestHead(ph);
    if (fv.ok() && fv->need_full_body) (void)f.OnFullBody(ph, body);
    if (fv.ok() && fv->body) {
      (void)fv->body->Data(body);
      (void)fv->body->End();
    }
  }
  // Also the raw chunk parser on the whole input, with a fixed seed.
  ChunkResigner c("k", "k2", "20130524T000000Z", "20130524/us-east-1/s3/aws4_request",
                  std::string(64, '0'), std::string(64, '1'));
  (void)c.Data(in);
  (void)c.End();
  return 0;
}

// AWS re-signing cost per request against plain header substitution, measured side by side in one
// run (ratios, not absolute goals). Usage: aws_resign_bench [--smoke] [--markdown] [iterations]
// (--markdown: also print the section of docs/benchmarks.md, bench/report.h)
//
//   substitute   copy a typical request head and swap a bearer placeholder in one header (what the
//                proxy does for API keys)
//   resign-hdr   copy an S3 GET head signed by the guest, verify with the placeholder, re-sign
//   resign-query the same for a presigned URL
//   resign-body  an STS POST whose signature covers sha256(body) (needs the body)
//   chunks       throughput of the aws-chunked re-signer vs a plain copy of the same body
//
// After the timing, each path's output is checked (untimed): the substituted header holds the real
// value; each re-signed request (and every re-signed chunk) verifies under the REAL secret and the
// guest's original does not (a Resigner holding the real secret as its "placeholder" is the
// verifier). A failed re-sign or check exits 1 with the path named on stderr.
// --smoke: 200 iterations and a 1 MiB chunked body (well under a second), the same checks
// (scripts/bench-smoke.sh). Default: 20000 iterations, 8 MiB.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "aws/resigner.h"
#include "aws/sigv4.h"
#include "report.h"

using namespace cloister::aws;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kKeyId = "AKIACLOISTERBENCH001";
const std::string kPlaceholder = "CLOISTERplaceholderSecretForTheBench0000";
const std::string kReal = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALBENCHKEY";

// Signs `head` with `secret` as a guest SDK would (header form).
void SignHeader(RequestHead& head, SigV4Auth auth, const std::string& secret, const std::string& payload,
                UriMode uri) {
  auto cr = CanonicalRequest(head, auth, {uri, QueryMode::kReencode, payload});
  std::string sig = SignatureHex(SigningKey(secret, auth.date, auth.region, auth.service), StringToSign(auth, *cr));
  head.headers.push_back({"Authorization", std::string(kAlgorithm) + " Credential=" + kKeyId + "/" +
                                               auth.Scope() + ", SignedHeaders=" +
                                               auth.SignedHeadersString() + ", Signature=" + sig});
}

SigV4Auth Auth(const std::string& service, std::vector<std::string> signed_headers) {
  SigV4Auth a;
  a.access_key_id = kKeyId;
  a.date = "20261130";
  a.region = "us-east-1";
  a.service = service;
  a.amz_date = "20261130T101500Z";
  a.signed_headers = std::move(signed_headers);
  return a;
}

template <typename F>
double NsPerOp(int iters, F&& f) {
  for (int i = 0; i < iters / 10 + 1; ++i) f();  // warm up
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / iters;
}

volatile size_t g_sink = 0;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "aws_resign_bench: FAILED: %s\n", what.c_str());
  std::exit(1);
}

// The signature `head` carries (Authorization's or X-Amz-Signature), or "".
std::string SignatureOf(const RequestHead& head) {
  auto a = ParseSigV4(head);
  return a.ok() ? a->signature : "";
}

// Checks one re-signed request: it verifies under the real secret (through `verifier`), the guest's
// original does not, and the signature changed. `body` for a body-hashed signature.
void CheckResigned(const Resigner& verifier, const std::string& what, const RequestHead& guest,
                   const RequestHead& resigned, const std::string& body = "") {
  auto verify = [&](RequestHead h) -> bool {
    auto v = verifier.Resign(h);
    if (!v.ok()) return false;
    return !v->need_full_body || verifier.ResignWithBody(h, body).ok();
  };
  std::string before = SignatureOf(guest), after = SignatureOf(resigned);
  if (after.empty() || after == before) Fail(what + ": the signature was not replaced");
  if (!verify(resigned)) {
    Fail(what + ": the re-signed request does not verify under the real secret");
  }
  if (verify(guest)) Fail(what + ": the verifier accepts the guest's placeholder signature");
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20000;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
      iters = 200;
    } else if (a == "--markdown") {
    } else if (!a.empty() && std::isdigit(static_cast<unsigned char>(a[0]))) {
      iters = std::max(1, std::atoi(argv[i]));
    } else {
      std::fprintf(stderr, "usage: aws_resign_bench [--smoke] [--markdown] [iterations]   (--smoke: 200 "
                           "iterations, 1 MiB chunked body; exits 1 when a path fails)\n");
      return 2;
    }
  }
  Resigner resigner(AwsSecrets{kKeyId, kReal, "", kPlaceholder, ""});
  // Verifies a re-signed request: signatures are checked against its "placeholder", the real one.
  Resigner verifier(AwsSecrets{kKeyId, kReal, "", kReal, "", ""});

  // Plain bearer substitution on a head of the same shape.
  const std::string bearer_ph = "sk-ant-api03-CLOISTERplaceholderplaceholderplaceholder0000";
  const std::string bearer_real = "sk-ant-api03-realrealrealrealrealrealrealrealrealrealreal0000";
  RequestHead bearer{"POST", "/v1/messages",
                     {{"Host", "api.anthropic.com"}, {"User-Agent", "claude-cli/1.0"},
                      {"Content-Type", "application/json"}, {"Content-Length", "512"},
                      {"Accept", "application/json"}, {"x-api-key", bearer_ph},
                      {"anthropic-version", "2023-06-01"}}};
  double substitute = NsPerOp(iters, [&] {
    RequestHead h = bearer;
    for (Header& hd : h.headers) {
      size_t p = hd.value.find(bearer_ph);
      if (p != std::string::npos) hd.value.replace(p, bearer_ph.size(), bearer_real);
    }
    g_sink += h.headers.size();
  });
  {
    RequestHead h = bearer;
    for (Header& hd : h.headers) {
      size_t p = hd.value.find(bearer_ph);
      if (p != std::string::npos) hd.value.replace(p, bearer_ph.size(), bearer_real);
    }
    const std::string* key = h.Find("x-api-key");
    if (!key || *key != bearer_real) Fail("substitute: x-api-key does not hold the real value");
  }

  RequestHead s3{"GET", "/bucket/some/key.txt",
                 {{"Host", "bucket.s3.us-east-1.amazonaws.com"}, {"User-Agent", "aws-cli/2.9.19"},
                  {"Accept-Encoding", "identity"}, {"x-amz-content-sha256", std::string(kEmptySha256)},
                  {"X-Amz-Date", "20261130T101500Z"}}};
  SignHeader(s3, Auth("s3", {"host", "x-amz-content-sha256", "x-amz-date"}), kPlaceholder,
             std::string(kEmptySha256), UriMode::kAsIs);
  double resign_hdr = NsPerOp(iters, [&] {
    RequestHead h = s3;
    auto v = resigner.Resign(h);
    if (!v.ok()) Fail("re-sign S3 GET: " + v.error().ToString());
    g_sink += h.headers.size();
  });
  {
    RequestHead h = s3;
    if (!resigner.Resign(h).ok()) Fail("re-sign S3 GET");
    CheckResigned(verifier, "re-sign S3 GET", s3, h);
  }

  // Presigned: build the query, sign with the placeholder.
  std::string target = "/bucket/obj.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + kKeyId +
                       "%2F20261130%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261130T101500Z"
                       "&X-Amz-Expires=3600&X-Amz-SignedHeaders=host";
  RequestHead pre{"GET", target, {{"Host", "bucket.s3.us-east-1.amazonaws.com"}}};
  {
    SigV4Auth a = Auth("s3", {"host"});
    a.form = SigV4Auth::Form::kQuery;
    auto cr = CanonicalRequest(pre, a, {UriMode::kAsIs, QueryMode::kReencode, std::string(kUnsignedPayload)});
    pre.target += "&X-Amz-Signature=" +
                  SignatureHex(SigningKey(kPlaceholder, a.date, a.region, a.service), StringToSign(a, *cr));
  }
  double resign_query = NsPerOp(iters, [&] {
    RequestHead h = pre;
    auto v = resigner.Resign(h);
    if (!v.ok()) Fail("re-sign presigned URL: " + v.error().ToString());
    g_sink += h.target.size();
  });
  {
    RequestHead h = pre;
    if (!resigner.Resign(h).ok()) Fail("re-sign presigned URL");
    CheckResigned(verifier, "re-sign presigned URL", pre, h);
  }

  const std::string body = "Action=GetCallerIdentity&Version=2011-06-15";
  RequestHead sts{"POST", "/",
                  {{"Host", "sts.us-east-1.amazonaws.com"},
                   {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                   {"Content-Length", std::to_string(body.size())}, {"X-Amz-Date", "20261130T101500Z"}}};
  SignHeader(sts, Auth("sts", {"content-type", "host", "x-amz-date"}), kPlaceholder, Sha256Hex(body),
             UriMode::kDoubleEncode);
  double resign_body = NsPerOp(iters, [&] {
    RequestHead h = sts;
    auto v = resigner.Resign(h);
    if (!v.ok() || !v->need_full_body || !resigner.ResignWithBody(h, body).ok()) {
      Fail("re-sign STS POST: " +
           (v.ok() ? std::string("no body-hashed re-sign") : v.error().ToString()));
    }
    g_sink += h.headers.size();
  });
  {
    RequestHead h = sts;
    auto v = resigner.Resign(h);
    if (!v.ok() || !resigner.ResignWithBody(h, body).ok()) Fail("re-sign STS POST");
    CheckResigned(verifier, "re-sign STS POST", sts, h, body);
  }

  // Streaming: 8 MiB (--smoke: 1 MiB) in 64 KiB chunks, signed with the placeholder chain.
  const size_t kChunk = 64 * 1024, kTotal = (smoke ? 1 : 8) * 1024 * 1024;
  RequestHead up{"PUT", "/bucket/big.bin",
                 {{"Host", "bucket.s3.us-east-1.amazonaws.com"}, {"Content-Encoding", "aws-chunked"},
                  {"x-amz-content-sha256", std::string(kStreamingPayload)},
                  {"x-amz-decoded-content-length", std::to_string(kTotal)}, {"X-Amz-Date", "20261130T101500Z"}}};
  SignHeader(up, Auth("s3", {"content-encoding", "host", "x-amz-content-sha256", "x-amz-date",
                             "x-amz-decoded-content-length"}),
             kPlaceholder, std::string(kStreamingPayload), UriMode::kAsIs);
  std::string seed = up.Find("authorization")->substr(up.Find("authorization")->size() - 64);
  std::string chunked;
  {
    std::string key = SigningKey(kPlaceholder, "20261130", "us-east-1", "s3");
    std::string prev = seed;
    std::string data(kChunk, 'x');
    for (size_t done = 0; done <= kTotal; done += kChunk) {
      std::string d = done == kTotal ? "" : data;
      std::string sts_chunk = "AWS4-HMAC-SHA256-PAYLOAD\n20261130T101500Z\n20261130/us-east-1/s3/aws4_request\n" +
                              prev + "\n" + std::string(kEmptySha256) + "\n" + Sha256Hex(d);
      prev = SignatureHex(key, sts_chunk);
      char size_hex[32];
      std::snprintf(size_hex, sizeof size_hex, "%zx", d.size());
      chunked += std::string(size_hex) + ";chunk-signature=" + prev + "\r\n" + d + "\r\n";
    }
  }
  int body_iters = smoke ? 2 : 5;
  double chunk_ns = NsPerOp(body_iters, [&] {
    RequestHead h = up;
    auto v = resigner.Resign(h);
    if (!v.ok() || !v->chunks) Fail("re-sign aws-chunked upload: no chunk re-signer");
    size_t out = 0;
    for (size_t i = 0; i < chunked.size(); i += 16384) {
      auto o = v->chunks->Data(std::string_view(chunked).substr(i, 16384));
      if (!o.ok()) Fail("re-sign aws-chunked upload: " + o.error().ToString());
      out += o->size();
    }
    if (!v->chunks->End().ok() || out != chunked.size()) {
      Fail("re-sign aws-chunked upload: the body did not end or changed length");
    }
    g_sink += out;
  });
  {
    // Re-sign once more, keeping the output, then verify the head and every chunk under the real
    // secret; the guest's own chunks must not pass that verifier.
    RequestHead h = up;
    auto v = resigner.Resign(h);
    if (!v.ok() || !v->chunks) Fail("re-sign aws-chunked upload");
    std::string resigned;
    for (size_t i = 0; i < chunked.size(); i += 16384) {
      auto o = v->chunks->Data(std::string_view(chunked).substr(i, 16384));
      if (!o.ok()) Fail("re-sign aws-chunked upload: " + o.error().ToString());
      resigned += *o;
    }
    if (!v->chunks->End().ok()) Fail("re-sign aws-chunked upload: no final chunk");
    if (SignatureOf(h).empty() || SignatureOf(h) == SignatureOf(up)) {
      Fail("re-sign aws-chunked upload: the seed signature was not replaced");
    }
    auto check = [&](const std::string& body_in) -> bool {
      RequestHead hh = h;
      auto c = verifier.Resign(hh);
      if (!c.ok() || !c->chunks) return false;
      auto o = c->chunks->Data(body_in);
      return o.ok() && o->size() == body_in.size() && c->chunks->End().ok();
    };
    if (!check(resigned)) Fail("re-sign aws-chunked upload: the re-signed chunks do not verify");
    if (check(chunked)) Fail("re-sign aws-chunked upload: the verifier accepts the guest's chunks");
    if (v->chunks->chunks() != kTotal / kChunk + 1) {
      Fail("re-sign aws-chunked upload: " + std::to_string(v->chunks->chunks()) + " chunks, not " +
           std::to_string(kTotal / kChunk + 1));
    }
  }
  double copy_ns = NsPerOp(body_iters, [&] {
    std::string out;
    out.reserve(chunked.size());
    for (size_t i = 0; i < chunked.size(); i += 16384) out.append(std::string_view(chunked).substr(i, 16384));
    g_sink += out.size();
  });
  double mib = static_cast<double>(chunked.size()) / (1024.0 * 1024.0);

  std::printf("aws re-signing vs header substitution (%d iterations each)\n", iters);
  std::printf("  %-40s %10.0f ns/request  (1.00x)\n", "substitute bearer header", substitute);
  std::printf("  %-40s %10.0f ns/request  (%.1fx)\n", "re-sign S3 GET (Authorization header)", resign_hdr,
              resign_hdr / substitute);
  std::printf("  %-40s %10.0f ns/request  (%.1fx)\n", "re-sign presigned S3 URL", resign_query,
              resign_query / substitute);
  std::printf("  %-40s %10.0f ns/request  (%.1fx)\n", "re-sign STS POST (body hashed)", resign_body,
              resign_body / substitute);
  std::string chunk_label = "re-sign " + std::to_string(kTotal >> 20) + " MiB aws-chunked upload";
  std::printf("  %-40s %10.1f MiB/s vs plain copy %.1f MiB/s (%.1fx the time)\n",
              chunk_label.c_str(), mib / (chunk_ns / 1e9), mib / (copy_ns / 1e9),
              chunk_ns / copy_ns);
  if (g_sink == 0) Fail("nothing was measured");
  if (smoke) std::printf("aws_resign_bench: smoke OK (every re-signed request verifies)\n");
  if (cloister::bench::Report::Wanted(argc, argv)) {
    using cloister::bench::Num;
    cloister::bench::Report r(
        "aws_resign_bench",
        "What re-signing an AWS request on the host costs against swapping a bearer placeholder "
        "in one header (what the proxy does for API keys), per request, and the aws-chunked "
        "re-signer's throughput against a plain copy; every re-signed request is checked to "
        "verify under the real secret.",
        {"path", "cost", "against substitution"});
    r.Row({"substitute bearer header", Num("%.0f ns/request", substitute), "1.00x"});
    r.Row({"re-sign S3 GET (Authorization header)", Num("%.0f ns/request", resign_hdr),
           Num("%.1fx", resign_hdr / substitute)});
    r.Row({"re-sign presigned S3 URL", Num("%.0f ns/request", resign_query),
           Num("%.1fx", resign_query / substitute)});
    r.Row({"re-sign STS POST (body hashed)", Num("%.0f ns/request", resign_body),
           Num("%.1fx", resign_body / substitute)});
    r.Row({chunk_label, Num("%.1f MiB/s (plain copy %.1f MiB/s)", mib / (chunk_ns / 1e9),
                            mib / (copy_ns / 1e9)),
           Num("%.1fx the copy's time", chunk_ns / copy_ns)});
    r.Note(Num("%d iterations per path.", iters));
    r.Print(argc, argv);
  }
  return 0;
}

// AWS Signature Version 4: bounded parsing of signed requests and the signing primitives.
//
// A request reaches us as it would go on the wire: a method, an origin-form target ("/path?query",
// still percent-encoded as the client sent it) and the header list. ParseSigV4 finds the signature
// (Authorization header form, or the presigned query form with X-Amz-Signature), and
// CanonicalRequest rebuilds the exact string the client signed. Both forms are covered by AWS's
// published test vectors in sigv4_test.cc.
//
// SECURITY: everything parsed here comes from the guest. Sizes are capped (kMaxTarget,
// kMaxHeaderValue, kMaxSignedHeaders...), every malformed field is a kCorrupt error naming the
// field, and nothing is trusted before it has been parsed in full.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace cloister::aws {

inline constexpr size_t kMaxTarget = 16 * 1024;
inline constexpr size_t kMaxHeaders = 200;
inline constexpr size_t kMaxHeaderValue = 16 * 1024;
inline constexpr size_t kMaxSignedHeaders = 64;
inline constexpr size_t kMaxQueryParams = 256;

inline constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kStreamingPayload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
inline constexpr std::string_view kStreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Header {
  std::string name;   // as received
  std::string value;  // as received
};

// One HTTP/1.1 request head. The proxy hands us this and forwards what we leave in it.
struct RequestHead {
  std::string method;
  std::string target;  // origin-form, percent-encoded as on the wire
  std::vector<Header> headers;

  // First value of header `name` (case-insensitive), or nullptr.
  const std::string* Find(std::string_view name) const;
  // Replaces the value of every header `name` (case-insensitive); false if there is none.
  bool Set(std::string_view name, const std::string& value);
};

// What a SigV4 signature says about itself.
struct SigV4Auth {
  enum class Form { kHeader, kQuery };
  Form form = Form::kHeader;
  std::string access_key_id;
  std::string date;      // yyyymmdd from the credential scope
  std::string region;
  std::string service;
  std::string amz_date;  // yyyymmddThhmmssZ (X-Amz-Date header or query parameter)
  std::vector<std::string> signed_headers;  // lower-case, sorted, as listed
  std::string signature;                    // 64 lower-case hex digits
  std::string security_token;               // X-Amz-Security-Token (decoded), empty if none

  std::string Scope() const { return date + "/" + region + "/" + service + "/aws4_request"; }
  std::string SignedHeadersString() const;
};

// True if the request carries a SigV4 signature in either form (cheap; for routing).
bool LooksSigV4Signed(const RequestHead& head);

// Parses and validates the signature fields. Fails with kCorrupt on anything malformed, and with
// kInvalidArgument for a signature scheme we do not handle (SigV2, SigV4A...).
Result<SigV4Auth> ParseSigV4(const RequestHead& head);

// How the client built the canonical URI: S3 signs the path as sent; every other service
// normalises it and URI-encodes it once more.
enum class UriMode { kAsIs, kDoubleEncode };
// How the client built the canonical query: from its own (already canonical) encoding, or from
// decoded parameters re-encoded with AWS's rules. They differ only for oddly encoded queries.
enum class QueryMode { kReencode, kAsSent };

struct CanonicalOptions {
  UriMode uri = UriMode::kAsIs;
  QueryMode query = QueryMode::kReencode;
  std::string payload_hash;  // the last line of the canonical request
};

// The canonical request for `head` as signed by `auth` (the query form drops X-Amz-Signature).
Result<std::string> CanonicalRequest(const RequestHead& head, const SigV4Auth& auth,
                                     const CanonicalOptions& options);
std::string StringToSign(const SigV4Auth& auth, std::string_view canonical_request);

// Primitives (OpenSSL). Binary outputs unless named Hex.
std::string Sha256(std::string_view data);
std::string Sha256Hex(std::string_view data);
std::string HmacSha256(std::string_view key, std::string_view data);
// kSigning = HMAC chain "AWS4"+secret -> date -> region -> service -> "aws4_request".
std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service);
// Hex signature of string_to_sign under signing_key.
std::string SignatureHex(std::string_view signing_key, std::string_view string_to_sign);
// Constant-time comparison of two strings (signatures).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// AWS URI encoding: every byte but A-Z a-z 0-9 - _ . ~ becomes %XX (upper case); '/' is kept
// when keep_slash.
std::string UriEncode(std::string_view s, bool keep_slash);
// Strict percent-decoding ('+' stays '+'); kCorrupt on a bad escape.
Result<std::string> UriDecode(std::string_view s);

}  // namespace cloister::aws

// Host-side re-signing of the guest's AWS requests.
//
// The guest holds the real access key id with a placeholder secret (and placeholder session
// token). Its SDK signs with the placeholder; the proxy hands each request head for an AWS host in
// the credential's scope to Resigner, which
//   1. parses the SigV4 signature (header or presigned-query form; SigV2/SigV4A are refused),
//   2. checks the access key id is the workspace's (or, for a credential in custody, its
//      placeholder key id) and the session token is the placeholder,
//   3. recomputes the signature with the PLACEHOLDER secret and refuses the request unless it
//      matches (a request signed with anything else never leaves),
//   4. swaps in the real key id and session token and signs the same canonical request with the
//      REAL secret,
//   5. for STREAMING-AWS4-HMAC-SHA256-PAYLOAD uploads returns a ChunkResigner that verifies each
//      chunk's chained signature against the placeholder chain and rewrites it with the real one,
//      one chunk at a time (never the whole body; the output has the same length as the input).
//
// Ownership: Resigner keeps a copy of the secrets; it is immutable after construction and may be
// used from many threads at once. A ChunkResigner belongs to one request.
// SECURITY: the real secret and the derived signing keys never leave this object except as
// signatures; error messages never contain secrets or placeholders.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "aws/sigv4.h"
#include "base/result.h"

namespace cloister::aws {

struct AwsSecrets {
  std::string access_key_id;       // real; also what the guest sees unless placeholder_access_key_id
  std::string secret;              // real
  std::string session_token;       // real; empty for long-term keys
  std::string placeholder_secret;  // what the guest signs with
  std::string placeholder_token;   // what the guest sends; non-empty iff session_token is
  // What the guest signs with instead of access_key_id, when it does not hold the real key id
  // (credentials minted into custody, custody.h); empty: the guest holds the real key id.
  std::string placeholder_access_key_id;
};

inline constexpr size_t kMaxChunk = 16 * 1024 * 1024;       // one aws-chunked chunk
inline constexpr size_t kMaxFullBody = 8 * 1024 * 1024;      // bodies hashed for non-S3 services
inline constexpr size_t kMaxCachedScopes = 64;

// Re-signs an aws-chunked body. Feed it the body bytes as they arrive; it returns the bytes to
// forward (whole re-signed chunks). End() fails unless the final zero-length chunk was seen.
// SECURITY: parses guest bytes: chunk headers are capped at 128 bytes, chunk sizes at kMaxChunk,
// and the framing must be exactly `HEX;chunk-signature=SIG\r\nDATA\r\n`.
class ChunkResigner {
 public:
  ChunkResigner(std::string placeholder_key, std::string real_key, std::string amz_date,
                std::string scope, std::string guest_seed, std::string real_seed);
  ~ChunkResigner();
  Result<std::string> Data(std::string_view in);
  Status End();
  uint64_t chunks() const { return chunks_; }

 private:
  Result<std::string> FinishChunk();
  std::string ChunkSignature(std::string_view key, std::string_view prev, std::string_view data_hash) const;

  enum class State { kHeader, kData, kCrlf, kDone, kFailed };
  State state_ = State::kHeader;
  std::string placeholder_key_, real_key_, amz_date_, scope_;
  std::string prev_guest_, prev_real_;
  std::string line_;        // header line being read
  std::string size_text_;   // hex size as sent
  std::string guest_sig_;   // the chunk's signature as sent
  size_t size_ = 0;
  std::string data_;        // the current chunk
  std::string crlf_;
  uint64_t chunks_ = 0;
};

class Resigner {
 public:
  explicit Resigner(AwsSecrets secrets);
  ~Resigner();

  struct Verdict {
    // The signature covers sha256(body) and nothing in the head says what it is: call
    // ResignWithBody() with the whole body (at most kMaxFullBody) before forwarding the head.
    bool need_full_body = false;
    // Non-null for streaming uploads: pass the body through it.
    std::unique_ptr<ChunkResigner> chunks;
  };

  // Verifies and re-signs `head` in place (unless need_full_body). Errors: kPermissionDenied when
  // the request is signed with another key, secret or token; kCorrupt for malformed signatures;
  // kInvalidArgument for schemes we do not re-sign; kNotFound when it is not SigV4-signed at all.
  Result<Verdict> Resign(RequestHead& head) const;
  // Second step when need_full_body was set.
  Status ResignWithBody(RequestHead& head, std::string_view body) const;

 private:
  Result<Verdict> Finish(RequestHead& head, const SigV4Auth& auth, const std::string& payload) const;
  // Key id must be ours; the session token must be the placeholder (or the real token that the
  // proxy's header substitution already put in, which is swapped back for verification).
  Status CheckIdentity(RequestHead& head, SigV4Auth& auth) const;
  // The placeholder and real signing keys for a scope (date/region/service), derived once: a
  // signing key is 4 HMACs, re-signing a request otherwise needs 2.
  std::pair<std::string, std::string> Keys(const SigV4Auth& auth) const;

  AwsSecrets s_;
  mutable std::mutex mu_;
  // SECURITY: derived keys are secret (each signs for one day, region and service); bounded to
  // kMaxCachedScopes entries and wiped in the destructor.
  mutable std::map<std::string, std::pair<std::string, std::string>> keys_;  // guarded by mu_
};

}  // namespace cloister::aws

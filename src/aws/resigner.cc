#include "aws/resigner.h"

#include <openssl/crypto.h>

#include "base/strings.h"
#include "vault/crypto.h"

namespace cloister::aws {
namespace {

Error Denied(const std::string& what) {
  return Error(ErrorCode::kPermissionDenied, "AWS re-signing refused: " + what,
               "the guest must sign with the credentials cloister placed in it");
}

bool IsHex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool HasBody(const RequestHead& head) {
  if (head.Find("transfer-encoding")) return true;
  const std::string* cl = head.Find("content-length");
  return cl && Trim(*cl) != "0";
}

// Rewrites the presigned query's signature and token values, keeping every other byte.
std::string RewriteQueryTarget(const std::string& target, const std::string& signature,
                               const std::string* token, const std::string* credential = nullptr) {
  size_t q = target.find('?');
  std::string out = target.substr(0, q + 1);
  std::vector<std::string> pieces = Split(std::string_view(target).substr(q + 1), '&');
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i) out += "&";
    std::string key = pieces[i].substr(0, pieces[i].find('='));
    auto decoded = UriDecode(key);
    std::string k = decoded.ok() ? *decoded : key;
    if (k == "X-Amz-Signature") {
      out += key + "=" + signature;
    } else if (k == "X-Amz-Security-Token" && token) {
      out += key + "=" + UriEncode(*token, false);
    } else if (k == "X-Amz-Credential" && credential) {
      out += key + "=" + UriEncode(*credential, false);
    } else {
      out += pieces[i];
    }
  }
  return out;
}

}  // namespace

Resigner::Resigner(AwsSecrets secrets) : s_(std::move(secrets)) {}

Resigner::~Resigner() {
  vault::SecureWipe(s_.secret);
  vault::SecureWipe(s_.session_token);
  for (auto& [scope, keys] : keys_) {
    vault::SecureWipe(keys.first);
    vault::SecureWipe(keys.second);
  }
}

std::pair<std::string, std::string> Resigner::Keys(const SigV4Auth& auth) const {
  std::string scope = auth.Scope();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(scope);
  if (it != keys_.end()) return it->second;
  if (keys_.size() >= kMaxCachedScopes) {
    for (auto& [s, keys] : keys_) {
      vault::SecureWipe(keys.first);
      vault::SecureWipe(keys.second);
    }
    keys_.clear();
  }
  auto& entry = keys_[scope];
  entry.first = SigningKey(s_.placeholder_secret, auth.date, auth.region, auth.service);
  entry.second = SigningKey(s_.secret, auth.date, auth.region, auth.service);
  return entry;
}

Status Resigner::CheckIdentity(RequestHead& head, SigV4Auth& auth) const {
  const std::string& guest_id =
      s_.placeholder_access_key_id.empty() ? s_.access_key_id : s_.placeholder_access_key_id;
  if (auth.access_key_id != guest_id) {
    return Denied("signed with an access key id that is not this workspace's");
  }
  if (s_.session_token.empty()) {
    if (!auth.security_token.empty()) return Denied("request carries a session token; the credential has none");
    return OkStatus();
  }
  // The proxy's header substitution may already have swapped the token placeholder for the real
  // token (it runs before filters): put the placeholder back to check what the guest signed.
  if (auth.form == SigV4Auth::Form::kHeader && ConstantTimeEquals(auth.security_token, s_.session_token)) {
    head.Set("x-amz-security-token", s_.placeholder_token);
    auth.security_token = s_.placeholder_token;
  }
  if (!ConstantTimeEquals(auth.security_token, s_.placeholder_token)) {
    return Denied("session token is not the workspace's placeholder");
  }
  return OkStatus();
}

Result<Resigner::Verdict> Resigner::Resign(RequestHead& head) const {
  ASSIGN_OR_RETURN(SigV4Auth auth, ParseSigV4(head));
  RETURN_IF_ERROR(CheckIdentity(head, auth));
  std::string payload;
  if (const std::string* sha = head.Find("x-amz-content-sha256")) {
    payload = Trim(*sha);
    if (!(IsHex64(payload) || payload == kUnsignedPayload || payload == kStreamingPayload ||
          payload == kStreamingUnsignedTrailer)) {
      return Error(ErrorCode::kInvalidArgument,
                   "unsupported x-amz-content-sha256 value (signed trailers and SigV4A are not re-signed)");
    }
    if (payload == kStreamingPayload && auth.form != SigV4Auth::Form::kHeader) {
      return Error(ErrorCode::kCorrupt, "SigV4: streaming payload needs the Authorization header form");
    }
  } else if (auth.form == SigV4Auth::Form::kQuery && auth.service == "s3") {
    payload = std::string(kUnsignedPayload);
  } else if (!HasBody(head)) {
    payload = std::string(kEmptySha256);
  } else {
    Verdict v;
    v.need_full_body = true;
    return v;
  }
  return Finish(head, auth, payload);
}

Status Resigner::ResignWithBody(RequestHead& head, std::string_view body) const {
  if (body.size() > kMaxFullBody) {
    return Error(ErrorCode::kInvalidArgument, "AWS request body over 8 MiB without x-amz-content-sha256");
  }
  ASSIGN_OR_RETURN(SigV4Auth auth, ParseSigV4(head));
  RETURN_IF_ERROR(CheckIdentity(head, auth));
  ASSIGN_OR_RETURN(Verdict v, Finish(head, auth, Sha256Hex(body)));
  (void)v;
  return OkStatus();
}

Result<Resigner::Verdict> Resigner::Finish(RequestHead& head, const SigV4Auth& auth,
                                           const std::string& payload) const {
  // S3 signs the path as sent; the other services normalise and encode it again. Try the
  // service's own rule first, then the other, and use whichever the guest's signature matches.
  std::vector<CanonicalOptions> candidates;
  UriMode first = auth.service == "s3" ? UriMode::kAsIs : UriMode::kDoubleEncode;
  UriMode second = first == UriMode::kAsIs ? UriMode::kDoubleEncode : UriMode::kAsIs;
  for (UriMode u : {first, second}) {
    for (QueryMode q : {QueryMode::kReencode, QueryMode::kAsSent}) {
      candidates.push_back(CanonicalOptions{u, q, payload});
    }
  }
  auto [placeholder_key, real_key] = Keys(auth);
  const CanonicalOptions* matched = nullptr;
  std::string last_cr;
  for (const CanonicalOptions& c : candidates) {
    ASSIGN_OR_RETURN(std::string cr, CanonicalRequest(head, auth, c));
    if (cr == last_cr) continue;
    std::string sig = SignatureHex(placeholder_key, StringToSign(auth, cr));
    if (ConstantTimeEquals(sig, auth.signature)) {
      matched = &c;
      break;
    }
    last_cr = std::move(cr);
  }
  if (!matched) {
    vault::SecureWipe(placeholder_key);
    return Denied("signature does not verify with the workspace's placeholder secret");
  }

  SigV4Auth real = auth;
  real.access_key_id = s_.access_key_id;
  if (!s_.session_token.empty()) {
    real.security_token = s_.session_token;
    if (auth.form == SigV4Auth::Form::kHeader) head.Set("x-amz-security-token", s_.session_token);
  }
  if (auth.form == SigV4Auth::Form::kQuery) {
    // The signature value is excluded from the canonical query, so rewrite the token first.
    const std::string credential = s_.access_key_id + "/" + auth.Scope();
    head.target = RewriteQueryTarget(head.target, auth.signature,
                                     s_.session_token.empty() ? nullptr : &s_.session_token,
                                     s_.placeholder_access_key_id.empty() ? nullptr : &credential);
  }
  ASSIGN_OR_RETURN(std::string cr, CanonicalRequest(head, real, *matched));
  std::string new_sig = SignatureHex(real_key, StringToSign(real, cr));
  if (auth.form == SigV4Auth::Form::kHeader) {
    head.Set("authorization", std::string(kAlgorithm) + " Credential=" + real.access_key_id + "/" +
                                  auth.Scope() + ", SignedHeaders=" + auth.SignedHeadersString() +
                                  ", Signature=" + new_sig);
  } else {
    head.target = RewriteQueryTarget(head.target, new_sig, nullptr);
  }
  Verdict v;
  if (payload == kStreamingPayload) {
    v.chunks = std::make_unique<ChunkResigner>(std::move(placeholder_key), std::move(real_key),
                                               auth.amz_date, auth.Scope(), auth.signature, new_sig);
  } else {
    vault::SecureWipe(placeholder_key);
    vault::SecureWipe(real_key);
  }
  return v;
}

ChunkResigner::ChunkResigner(std::string placeholder_key, std::string real_key,
                             std::string amz_date, std::string scope, std::string guest_seed,
                             std::string real_seed)
    : placeholder_key_(std::move(placeholder_key)),
      real_key_(std::move(real_key)),
      amz_date_(std::move(amz_date)),
      scope_(std::move(scope)),
      prev_guest_(std::move(guest_seed)),
      prev_real_(std::move(real_seed)) {}

ChunkResigner::~ChunkResigner() {
  vault::SecureWipe(placeholder_key_);
  vault::SecureWipe(real_key_);
}

std::string ChunkResigner::ChunkSignature(std::string_view key, std::string_view prev,
                                          std::string_view data_hash) const {
  std::string sts = "AWS4-HMAC-SHA256-PAYLOAD\n" + amz_date_ + "\n" + scope_ + "\n" +
                    std::string(prev) + "\n" + std::string(kEmptySha256) + "\n" + std::string(data_hash);
  return SignatureHex(key, sts);
}

Result<std::string> ChunkResigner::FinishChunk() {
  std::string hash = Sha256Hex(data_);
  std::string expect = ChunkSignature(placeholder_key_, prev_guest_, hash);
  if (!ConstantTimeEquals(expect, guest_sig_)) {
    return Denied("chunk " + std::to_string(chunks_ + 1) +
                  " signature does not verify with the workspace's placeholder secret");
  }
  std::string real = ChunkSignature(real_key_, prev_real_, hash);
  prev_guest_ = guest_sig_;
  prev_real_ = real;
  ++chunks_;
  std::string out;
  out.reserve(size_text_.size() + 83 + data_.size());
  out += size_text_ + ";chunk-signature=" + real + "\r\n";
  out += data_;
  out += "\r\n";
  data_.clear();
  return out;
}

Result<std::string> ChunkResigner::Data(std::string_view in) {
  std::string out;
  auto fail = [this](const std::string& what) -> Error {
    state_ = State::kFailed;
    return Error(ErrorCode::kCorrupt, "aws-chunked body: " + what);
  };
  while (!in.empty()) {
    switch (state_) {
      case State::kFailed:
        return Error(ErrorCode::kCorrupt, "aws-chunked body: already failed");
      case State::kDone:
        return fail("bytes after the final chunk");
      case State::kHeader: {
        size_t nl = in.find('\n');
        size_t take = nl == std::string_view::npos ? in.size() : nl + 1;
        if (line_.size() + take > 128) return fail("chunk header too long");
        line_.append(in.substr(0, take));
        in.remove_prefix(take);
        if (line_.back() != '\n') break;
        // SECURITY: exact grammar HEX;chunk-signature=64HEX\r\n, nothing else.
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r') return fail("chunk header must end in CRLF");
        std::string_view l(line_.data(), line_.size() - 2);
        size_t semi = l.find(';');
        if (semi == std::string_view::npos || semi == 0 || semi > 16) return fail("bad chunk size");
        size_t size = 0;
        for (char c : l.substr(0, semi)) {
          int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
          if (v < 0) return fail("bad chunk size");
          size = size * 16 + static_cast<size_t>(v);
          if (size > kMaxChunk) return fail("chunk larger than 16 MiB");
        }
        std::string_view ext = l.substr(semi + 1);
        constexpr std::string_view kSigPrefix = "chunk-signature=";
        if (ext.substr(0, kSigPrefix.size()) != kSigPrefix || !IsHex64(ext.substr(kSigPrefix.size()))) {
          return fail("chunk header must carry exactly chunk-signature=<64 hex>");
        }
        size_text_ = std::string(l.substr(0, semi));
        guest_sig_ = std::string(ext.substr(kSigPrefix.size()));
        size_ = size;
        line_.clear();
        data_.clear();
        data_.reserve(size);
        state_ = State::kData;
        if (size == 0) state_ = State::kCrlf;
        break;
      }
      case State::kData: {
        size_t take = std::min(in.size(), size_ - data_.size());
        data_.append(in.substr(0, take));
        in.remove_prefix(take);
        if (data_.size() == size_) state_ = State::kCrlf;
        break;
      }
      case State::kCrlf: {
        size_t take = std::min(in.size(), 2 - crlf_.size());
        crlf_.append(in.substr(0, take));
        in.remove_prefix(take);
        if (crlf_.size() < 2) break;
        if (crlf_ != "\r\n") return fail("chunk data must be followed by CRLF");
        crlf_.clear();
        bool last = size_ == 0;
        auto chunk = FinishChunk();
        if (!chunk.ok()) {
          state_ = State::kFailed;
          return chunk.error();
        }
        out += *chunk;
        state_ = last ? State::kDone : State::kHeader;
        break;
      }
    }
  }
  return out;
}

Status ChunkResigner::End() {
  if (state_ != State::kDone) {
    state_ = State::kFailed;
    return Error(ErrorCode::kCorrupt, "aws-chunked body ended before its final chunk");
  }
  return OkStatus();
}

}  // namespace cloister::aws

// The bodies of OAuth token endpoint requests and responses, as the oauth filter sees them.
//
// SECURITY: ParseTokenRequest and SwapRefreshToken parse guest bytes (the body of a request to a
// provider's token endpoint): bounded (kMaxTokenBody), no exceptions, and an error for anything
// that is not a JSON object or an application/x-www-form-urlencoded form. ParseTokenResponse
// parses the provider's answer, which carries real tokens: the result is secret.
// Fuzz target: fuzz/oauth_token_body_fuzz.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::oauth {

inline constexpr size_t kMaxTokenBody = 64 * 1024;       // a refresh request is < 1 KiB
inline constexpr size_t kMaxTokenResponse = 256 * 1024;  // a token response is a few KiB

struct TokenRequest {
  bool json = true;           // JSON object (Claude Code, Codex) or urlencoded form
  std::string grant_type;     // "refresh_token", "authorization_code", ...
  std::string refresh_token;  // as sent (in the guest: a placeholder)
  std::string scope;          // space separated, as sent ("" when absent)
  std::string requested_token;  // a token exchange's requested_token ("openai-api-key")
};

// SECURITY: a field that appears twice (a form key, or a JSON key in any object at any depth) is
// refused: servers differ on whether the first or the last one counts, and the proxy's reading
// must be the provider's. A grant_type, refresh_token, scope or requested_token that is not a
// string is refused too.
Result<TokenRequest> ParseTokenRequest(std::string_view body);

// `body` with its refresh_token field set to `real` (same format; other fields untouched).
// SECURITY: the result holds a real token.
Result<std::string> SwapRefreshToken(std::string_view body, std::string_view real);

// What a token endpoint answered (200). Absent fields are empty / 0.
struct TokenResponse {
  std::string access_token;   // SECURITY: real
  std::string refresh_token;  // SECURITY: real; empty: the provider kept the old one
  std::string id_token;       // SECURITY: real (OpenID providers)
  int64_t expires_in = 0;     // seconds
  std::string scope;          // space separated
};
Result<TokenResponse> ParseTokenResponse(std::string_view body);

// The response body the guest gets: the provider's JSON object with access_token, refresh_token
// and id_token replaced by the given placeholders (a field whose placeholder is empty is
// removed), every other field kept.
Result<std::string> RewriteTokenResponse(std::string_view body, std::string_view access_ph,
                                         std::string_view refresh_ph, std::string_view id_ph);

}  // namespace cloister::oauth

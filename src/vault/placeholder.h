// Placeholders: what the guest sees instead of a real credential.
//
// A placeholder is derived from the per-install salt (store keys dir, never leaves the host), the
// workspace name and the credential id, so it is deterministic per install and workspace and stable
// across boots and sessions (no tool in the guest ever sees its key rotate, even when the user
// rotates the real value with `cred add` again). It keeps the real value's structure:
//   - the real prefix (sk-ant-api03-, sk-proj-, ghp_, github_pat_, glpat-, ...),
//   - the total length and alphabet,
//   - GitHub's ghp_/gho_/ghu_/ghs_/ghr_ checksum (base62 CRC32 of the 30 characters after the
//     prefix, as the last 6 characters), so client-side validators accept it,
// and carries the marker "CLOISTER" right after the prefix so a human reading it knows it is not a
// key. Every other position is drawn from the alphabet by HKDF output with rejection sampling, so
// there is full-length entropy (no repeats, no padding). Formats without a known structure (no
// known prefix, or a prefix such as sk-, glpat-, gldt- whose body has no fixed layout) draw every
// position from their alphabet: the character classes present (digits, upper, lower or lower-case
// hex) plus the set of punctuation characters present, so no punctuation keeps its position (an
// AWS secret's '/' lands anywhere). Only github_pat_'s separator, fixed by its format, stays put.
// Values too short to hold the marker plus 22 random characters are lengthened (documented
// exception to "same length").
//
// SECURITY: the real value only selects the format (prefix, length, alphabet); no position and no
// other bit of the secret is in the placeholder: two values of one format give one placeholder.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "vault/credential.h"

namespace cloister::vault {

inline constexpr std::string_view kPlaceholderMarker = "CLOISTER";
inline constexpr size_t kMinRandomChars = 22;

Result<std::string> MakePlaceholder(std::string_view install_salt, std::string_view workspace,
                                    const Credential& cred);

// JWT placeholders (ChatGPT's id and access tokens, which Codex decodes but never verifies):
// the real header segment as is (alg, typ, kid are public), a payload re-encoded with only the
// public claims a client reads (exp, iat, nbf, iss, aud, sub, email, email_verified, auth_time,
// and under "https://api.openai.com/auth" / ".../profile" the plan, account and user ids and the
// email), and a signature drawn like any placeholder: base64url, the real signature's length,
// starting with the marker. The signature alone is what the proxy recognises and what the
// detector looks for (the payload follows the real token: its exp changes at every refresh).
// SECURITY: no byte of the real signature and no claim outside that list reaches the result.
Result<std::string> JwtPlaceholderSignature(std::string_view install_salt,
                                            std::string_view workspace, std::string_view id,
                                            size_t length);
// `real_jwt` with its payload filtered and `signature` in place of its signature. kInvalidArgument
// if it is not three base64url segments of which the first two decode to JSON objects.
Result<std::string> JwtPlaceholderFor(std::string_view real_jwt, std::string_view signature);
Result<std::string> MakeJwtPlaceholder(std::string_view install_salt, std::string_view workspace,
                                       std::string_view id, std::string_view real_jwt);
// The last segment of a JWT ("" if `jwt` has no two dots).
std::string_view JwtSignature(std::string_view jwt);

// The prefixes whose structure placeholders keep (sk-ant-api03-, ghp_, github_pat_, glpat-, ...),
// longest first within a family: what a real key of a known kind starts with
// (credential_shape.h).
std::vector<std::string_view> KnownCredentialPrefixes();

// GitHub token checksum: base62 (0-9A-Za-z) of CRC32(body), left-padded with '0' to 6 characters.
std::string GithubChecksum(std::string_view body);
// True for a "gh?_" token of 40 characters whose last 6 characters are the checksum of the 30
// before them.
bool GithubChecksumValid(std::string_view token);

}  // namespace cloister::vault

// A login typed in the guest (`claude /login`, `codex login --device-auth`), as the provider's
// token endpoint answers its authorization code exchange: the answer turned into a vault login
// (kClaudeSubscription / kChatgptSubscription) that LoginCustody::CaptureLogin takes into custody.
//
// Fields read (docs/design.md "Subscription logins", read from Claude Code 2.1.332 and Codex
// 0.171.0):
//   Claude:  {"access_token","refresh_token","expires_in","scope","account":{"uuid",
//            "email_address"},"organization":{"uuid"}}; a login without user:inference in
//            `scope` is refused (the client would not treat it as a subscription login).
//   ChatGPT: {"id_token","access_token","refresh_token","expires_in"?}; id and access tokens are
//            JWTs; expiry from the access token's exp (else expires_in), account (email), plan and
//            account id from the id token's claims (under "https://api.openai.com/auth").
// SECURITY: parses the provider's bytes, which carry real tokens: bounded (kMaxTokenResponse), no
// exceptions, no token in an error message; the result is secret. Fuzz target:
// fuzz/oauth_token_body_fuzz.cc.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/result.h"
#include "vault/credential.h"

namespace cloister::oauth {

// `now_ms`: unix milliseconds (expiry = now + expires_in). The result has the kind's id, default
// API and token hosts, last_refresh = now, source "capture".
Result<vault::Credential> LoginFromTokenResponse(vault::CredentialKind kind,
                                                 std::string_view provider_body, int64_t now_ms);

}  // namespace cloister::oauth

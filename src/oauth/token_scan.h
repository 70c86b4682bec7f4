// Token-shaped values in what a provider's token host answers (oauth_filter.h): every response
// from a token host is held and scanned before the guest gets it, so a real token cannot reach the
// guest through a field, a nesting level or an endpoint the login flows do not use.
//
// Token-shaped: an `sk-...` key (Anthropic's sk-ant-*, OpenAI's sk-*; 20 or more [A-Za-z0-9_-]
// after the prefix), a JWT (eyJ... three base64url segments), a ChatGPT refresh token (rt_...,
// 20 or more), anywhere in the text; and, in a JSON document or a form, any non-empty string in a
// field named access_token, refresh_token, id_token, api_key or raw_key at any depth. The caller's
// placeholders (LoginCustody::IsPlaceholder) are not foreign.
//
// SECURITY: `body` holds the provider's bytes (possibly real tokens): bounded by the caller (the
// proxy's hold), parsed without recursion, and nothing of a token is ever put in the result.
// Fuzz target: fuzz/oauth_token_body_fuzz.cc.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cloister::oauth {

// What was found first ("a JWT", "an sk- key", "the access_token field"), or nullopt.
std::optional<std::string> FindForeignToken(std::string_view body,
                                            const std::function<bool(std::string_view)>& is_placeholder);

}  // namespace cloister::oauth

#include "oauth/token_body.h"

#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "vault/crypto.h"

namespace cloister::oauth {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> FormDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size()) {
        return Error(ErrorCode::kInvalidArgument, "token request: truncated %-escape");
      }
      int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi < 0 || lo < 0) return Error(ErrorCode::kInvalidArgument, "token request: bad %-escape");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string FormEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

bool LooksJson(std::string_view body) {
  size_t i = 0;
  while (i < body.size() && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n')) ++i;
  return i < body.size() && body[i] == '{';
}

Status CheckSize(std::string_view body, size_t max) {
  if (body.size() > max) {
    return Error(ErrorCode::kInvalidArgument, "token endpoint body larger than " +
                                                  std::to_string(max) + " bytes");
  }
  return OkStatus();
}

}  // namespace

// Parses a JSON document, refusing any object with a key twice (nlohmann keeps the last one).
// The parser is iterative (no recursion on nesting depth).
Result<nlohmann::json> ParseJsonUniqueKeys(std::string_view body) {
  std::vector<std::set<std::string>> open;  // the keys of each object being parsed
  bool duplicate = false;
  nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t event,
                                             nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open.emplace_back();
    } else if (event == E::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == E::key && !open.empty() && parsed.is_string()) {
      duplicate |= !open.back().insert(parsed.get<std::string>()).second;
    }
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(body, cb, false);
  if (j.is_discarded()) return Error(ErrorCode::kInvalidArgument, "token request: malformed JSON");
  if (duplicate) {
    j.clear();
    return Error(ErrorCode::kInvalidArgument, "token request: a JSON key appears twice");
  }
  return j;
}

Result<TokenRequest> ParseTokenRequest(std::string_view body) {
  RETURN_IF_ERROR(CheckSize(body, kMaxTokenBody));
  TokenRequest r;
  const char* kFields[] = {"grant_type", "refresh_token", "scope", "requested_token"};
  std::string* kOut[] = {&r.grant_type, &r.refresh_token, &r.scope, &r.requested_token};
  if (LooksJson(body)) {
    ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonUniqueKeys(body));
    if (!j.is_object()) return Error(ErrorCode::kInvalidArgument, "token request: malformed JSON");
    for (size_t i = 0; i < 4; ++i) {
      auto it = j.find(kFields[i]);
      if (it == j.end()) continue;
      if (!it->is_string()) {
        j.clear();
        return Error(ErrorCode::kInvalidArgument,
                     std::string("token request: ") + kFields[i] + " is not a string");
      }
      *kOut[i] = it->get<std::string>();
    }
    j.clear();
    return r;
  }
  r.json = false;
  std::set<std::string> seen;
  for (const std::string& pair : Split(body, '&')) {
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    ASSIGN_OR_RETURN(std::string key, FormDecode(std::string_view(pair).substr(0, eq)));
    ASSIGN_OR_RETURN(std::string value, FormDecode(eq == std::string::npos
                                                       ? std::string_view()
                                                       : std::string_view(pair).substr(eq + 1)));
    if (key.empty() || key.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                             "0123456789_.-") != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument, "token request: not a form (bad field name)");
    }
    if (!seen.insert(key).second) {
      return Error(ErrorCode::kInvalidArgument, "token request: the form field " + key +
                                                    " appears twice");
    }
    for (size_t i = 0; i < 4; ++i) {
      if (key == kFields[i]) *kOut[i] = std::move(value);
    }
  }
  return r;
}

Result<std::string> SwapRefreshToken(std::string_view body, std::string_view real) {
  RETURN_IF_ERROR(CheckSize(body, kMaxTokenBody));
  if (LooksJson(body)) {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return Error(ErrorCode::kInvalidArgument, "token request: malformed JSON");
    }
    j["refresh_token"] = std::string(real);
    std::string out = j.dump();
    j.clear();
    return out;
  }
  std::string out;
  bool done = false;
  for (const std::string& pair : Split(body, '&')) {
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    ASSIGN_OR_RETURN(std::string key, FormDecode(std::string_view(pair).substr(0, eq)));
    if (!out.empty()) out += '&';
    if (key == "refresh_token") {
      out += "refresh_token=" + FormEncode(real);
      done = true;
    } else {
      out += pair;
    }
  }
  if (!done) out += std::string(out.empty() ? "" : "&") + "refresh_token=" + FormEncode(real);
  return out;
}

Result<TokenResponse> ParseTokenResponse(std::string_view body) {
  RETURN_IF_ERROR(CheckSize(body, kMaxTokenResponse));
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error(ErrorCode::kInvalidArgument, "token response is not a JSON object");
  }
  TokenResponse r;
  auto str = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  r.access_token = str("access_token");
  r.refresh_token = str("refresh_token");
  r.id_token = str("id_token");
  r.scope = str("scope");
  if (j.contains("expires_in") && j["expires_in"].is_number_integer()) {
    r.expires_in = j["expires_in"].get<int64_t>();
  }
  j.clear();
  if (r.access_token.empty()) {
    return Error(ErrorCode::kInvalidArgument, "token response without access_token");
  }
  if (r.expires_in < 0 || r.expires_in > 10LL * 365 * 86400) {
    return Error(ErrorCode::kInvalidArgument, "token response with an implausible expires_in");
  }
  return r;
}

Result<std::string> RewriteTokenResponse(std::string_view body, std::string_view access_ph,
                                         std::string_view refresh_ph, std::string_view id_ph) {
  RETURN_IF_ERROR(CheckSize(body, kMaxTokenResponse));
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error(ErrorCode::kInvalidArgument, "token response is not a JSON object");
  }
  auto set = [&](const char* k, std::string_view ph) {
    if (!j.contains(k)) return;
    if (ph.empty()) j.erase(k);
    else j[k] = std::string(ph);
  };
  set("access_token", access_ph);
  set("refresh_token", refresh_ph);
  set("id_token", id_ph);
  std::string out = j.dump();
  j.clear();
  return out;
}

}  // namespace cloister::oauth

#include "oauth/token_scan.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "base/strings.h"
#include "vault/crypto.h"

namespace cloister::oauth {
namespace {

bool TokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

size_t RunOf(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size() && TokenChar(s[j])) ++j;
  return j - i;
}

// Token-shaped substrings of `s`, each checked against `is_placeholder`.
std::optional<std::string> ScanText(std::string_view s,
                                    const std::function<bool(std::string_view)>& is_placeholder) {
  for (size_t i = 0; i + 3 <= s.size(); ++i) {
    if (i > 0 && TokenChar(s[i - 1])) continue;  // only at the start of a token
    std::string_view rest = s.substr(i);
    std::optional<std::string> what;
    size_t len = 0;
    if (rest.substr(0, 3) == "sk-" && RunOf(s, i + 3) >= 20) {
      len = 3 + RunOf(s, i + 3);
      what = "an sk- key";
    } else if (rest.substr(0, 3) == "rt_" && RunOf(s, i + 3) >= 20) {
      len = 3 + RunOf(s, i + 3);
      what = "a refresh token";
    } else if (rest.substr(0, 3) == "eyJ") {
      size_t a = RunOf(s, i);
      if (a >= 10 && i + a < s.size() && s[i + a] == '.') {
        size_t b = RunOf(s, i + a + 1);
        if (b >= 10 && i + a + 1 + b < s.size() && s[i + a + 1 + b] == '.') {
          size_t c = RunOf(s, i + a + b + 2);
          if (c >= 16) {
            len = a + b + c + 2;
            what = "a JWT";
          }
        }
      }
    }
    if (!what) continue;
    if (!is_placeholder(s.substr(i, len))) return what;
    i += len - 1;
  }
  return std::nullopt;
}

bool TokenField(std::string_view key) {
  std::string k = ToLower(key);
  return k == "access_token" || k == "refresh_token" || k == "id_token" || k == "api_key" ||
         k == "raw_key";
}

std::optional<std::string> ScanJson(const nlohmann::json& doc,
                                    const std::function<bool(std::string_view)>& is_placeholder) {
  std::vector<const nlohmann::json*> todo = {&doc};  // iterative: no recursion on depth
  std::vector<nlohmann::json> inner;  // JSON documents found inside strings (kept alive here)
  inner.reserve(64);
  while (!todo.empty()) {
    const nlohmann::json* j = todo.back();
    todo.pop_back();
    if (j->is_string()) {
      const std::string& str = j->get_ref<const std::string&>();
      if (auto w = ScanText(str, is_placeholder)) return w;
      // A JSON document inside a string ("{\"access_token\":...}") is scanned as one, at most 64.
      std::string t = Trim(str);
      if (inner.size() < 64 && !t.empty() && (t[0] == '{' || t[0] == '[')) {
        nlohmann::json d = nlohmann::json::parse(t, nullptr, false);
        if (!d.is_discarded()) {
          inner.push_back(std::move(d));  // reserved: pointers into `inner` stay valid
          todo.push_back(&inner.back());
        }
      }
      vault::SecureWipe(t);
    } else if (j->is_object()) {
      for (auto it = j->begin(); it != j->end(); ++it) {
        if (auto w = ScanText(it.key(), is_placeholder)) return w;
        if (TokenField(it.key()) && it->is_string() && !it->get_ref<const std::string&>().empty() &&
            !is_placeholder(it->get_ref<const std::string&>())) {
          return "the " + ToLower(it.key()) + " field";
        }
        if (TokenField(it.key()) && !it->is_string() && !it->is_null()) {
          return "the " + ToLower(it.key()) + " field";
        }
        todo.push_back(&*it);
      }
    } else if (j->is_array()) {
      for (const auto& e : *j) todo.push_back(&e);
    }
  }
  return std::nullopt;
}

// A form's or query's fields: name=value&...; the token fields' values, %-decoded.
std::optional<std::string> ScanForm(std::string_view s,
                                    const std::function<bool(std::string_view)>& is_placeholder) {
  for (const std::string& pair : Split(s, '&')) {
    size_t eq = pair.find('=');
    if (eq == std::string::npos || !TokenField(Trim(pair.substr(0, eq)))) continue;
    std::string v;
    std::string_view raw = std::string_view(pair).substr(eq + 1);
    auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
        v += static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
        i += 2;
      } else {
        v += raw[i] == '+' ? ' ' : raw[i];
      }
    }
    bool foreign = !v.empty() && !is_placeholder(v);
    vault::SecureWipe(v);
    if (foreign) return "the " + ToLower(Trim(pair.substr(0, eq))) + " field";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> FindForeignToken(
    std::string_view body, const std::function<bool(std::string_view)>& is_placeholder) {
  if (auto w = ScanText(body, is_placeholder)) return w;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded()) {
    auto w = ScanJson(j, is_placeholder);
    j.clear();
    return w;
  }
  return ScanForm(body, is_placeholder);
}

}  // namespace cloister::oauth

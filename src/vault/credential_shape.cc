#include "vault/credential_shape.h"

#include <vector>

#include "vault/placeholder.h"

namespace cloister::vault {
namespace {

bool ShapeTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}
bool ShapeAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

// Token characters from `at`, counted up to `cap` (so that every search stays linear).
size_t ShapeTokenRun(std::string_view v, size_t at, size_t cap) {
  size_t n = 0;
  while (n < cap && at + n < v.size() && ShapeTokenChar(v[at + n])) ++n;
  return n;
}

bool ShapeBoundary(std::string_view v, size_t at) { return at == 0 || !ShapeAlnum(v[at - 1]); }

const char* ShapeKindOf(std::string_view prefix) {
  if (prefix.substr(0, 7) == "sk-ant-") return "an Anthropic key";
  if (prefix.substr(0, 3) == "sk-") return "an OpenAI-style key";
  if (prefix.substr(0, 2) == "gh" || prefix.substr(0, 11) == "github_pat_") return "a GitHub token";
  if (prefix.substr(0, 2) == "gl") return "a GitLab token";
  return "an API key";
}

std::optional<std::string> ShapeKnownPrefix(std::string_view v) {
  const auto prefixes = KnownCredentialPrefixes();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!ShapeBoundary(v, i)) continue;
    for (std::string_view p : prefixes) {  // longest first within a family
      if (v.substr(i, p.size()) != p) continue;
      if (ShapeTokenRun(v, i + p.size(), 16) >= 16) {
        return std::string(ShapeKindOf(p)) + " (" + std::string(p) + "...)";
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> ShapeAwsKeyId(std::string_view v) {
  for (size_t i = 0; i + 20 <= v.size(); ++i) {
    if (!ShapeBoundary(v, i) || (v.substr(i, 4) != "AKIA" && v.substr(i, 4) != "ASIA")) continue;
    size_t n = 0;
    while (n < 16 && ((v[i + 4 + n] >= 'A' && v[i + 4 + n] <= 'Z') ||
                      (v[i + 4 + n] >= '0' && v[i + 4 + n] <= '9'))) {
      ++n;
    }
    if (n == 16 && (i + 20 == v.size() || !ShapeAlnum(v[i + 20]))) {
      return "an AWS access key id (" + std::string(v.substr(i, 4)) + "...)";
    }
  }
  return std::nullopt;
}

// Three dot-separated base64url runs of 10 or more characters, the first from an "eyJ".
bool ShapeJwt(std::string_view v) {
  auto b64 = [](char c) { return ShapeAlnum(c) || c == '_' || c == '-'; };
  struct Run {
    size_t start, len;
  };
  std::vector<Run> runs;  // consecutive runs joined by single dots, the current chain
  size_t i = 0;
  while (i < v.size()) {
    if (!b64(v[i])) {
      if (v[i] != '.') runs.clear();
      ++i;
      continue;
    }
    size_t start = i;
    while (i < v.size() && b64(v[i])) ++i;
    if (!(start > 0 && v[start - 1] == '.')) runs.clear();
    runs.push_back({start, i - start});
    if (runs.size() >= 3) {
      const Run& a = runs[runs.size() - 3];
      const Run& b = runs[runs.size() - 2];
      const Run& c = runs[runs.size() - 1];
      size_t eyj = v.substr(a.start, a.len).find("eyJ");
      if (eyj != std::string_view::npos && a.len - eyj >= 10 && b.len >= 10 && c.len >= 10) {
        return true;
      }
      runs.erase(runs.begin());
    }
  }
  return false;
}

bool ShapeContains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

}  // namespace

std::optional<std::string> CredentialShape(std::string_view value) {
  if (auto k = ShapeKnownPrefix(value)) return k;
  if (auto a = ShapeAwsKeyId(value)) return a;
  if (ShapeJwt(value)) return std::string("a JWT (eyJ...)");
  size_t begin = value.find("-----BEGIN");
  if (begin != std::string_view::npos && ShapeContains(value.substr(begin), "PRIVATE KEY-----")) {
    return std::string("a PEM private key");
  }
  for (size_t i = value.find("xox"); i != std::string_view::npos; i = value.find("xox", i + 1)) {
    if (i + 5 <= value.size() && std::string_view("abprse").find(value[i + 3]) != std::string_view::npos &&
        value[i + 4] == '-' && ShapeBoundary(value, i) && ShapeTokenRun(value, i + 5, 10) >= 10) {
      return "a Slack token (xox" + std::string(1, value[i + 3]) + "-...)";
    }
  }
  return std::nullopt;
}

std::optional<std::string> CredentialShape(std::string_view name, std::string_view value) {
  if (auto s = CredentialShape(value)) return s;
  std::string upper;
  for (char c : name) upper += (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
  bool secret_name = false;
  for (std::string_view word : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY",
                                "ACCESS_KEY", "PRIVATE_KEY", "CREDENTIAL"}) {
    secret_name |= ShapeContains(upper, word);
  }
  if (!secret_name || value.size() < 20) return std::nullopt;
  bool letter = false, digit = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return std::nullopt;
    letter |= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    digit |= c >= '0' && c <= '9';
  }
  if (!letter || !digit) return std::nullopt;
  return "a secret-looking value (" + std::to_string(value.size()) + " characters in a variable "
         "whose name says it holds a secret)";
}

}  // namespace cloister::vault

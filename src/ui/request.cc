#include "ui/request.h"

#include <openssl/crypto.h>

#include <nlohmann/json.hpp>

namespace cloister::ui {
namespace {

Error Bad(const std::string& what) { return Error(ErrorCode::kInvalidArgument, what); }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decoding; '+' is a space (form encoding). A truncated or non-hex escape, or a decoded
// control byte, is an error rather than a guess.
Result<std::string> Decode(std::string_view s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return Bad("truncated percent escape");
      int hi = HexDigit(s[i + 1]), lo = HexDigit(s[i + 2]);
      if (hi < 0 || lo < 0) return Bad("bad percent escape");
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+') {
      c = ' ';
    }
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return Bad("control byte in query");
    out += c;
    if (out.size() > max) return Bad("query value too long");
  }
  return out;
}

bool Split(std::string_view path, std::string_view prefix, std::string_view& rest) {
  if (path.substr(0, prefix.size()) != prefix) return false;
  rest = path.substr(prefix.size());
  return true;
}

}  // namespace

std::optional<Action> ParseAction(std::string_view verb) {
  static constexpr std::pair<std::string_view, Action> kVerbs[] = {
      {"start", Action::kStart},
      {"stop", Action::kStop},
      {"suspend", Action::kSuspend},
      {"checkpoint-create", Action::kCheckpointCreate},
      {"checkpoint-restore", Action::kCheckpointRestore},
      {"reset", Action::kReset},
      {"wipe-home", Action::kWipeHome},
      {"wipe", Action::kWipe},
      {"rm", Action::kRm},
  };
  for (const auto& [name, a] : kVerbs) {
    if (name == verb) return a;
  }
  return std::nullopt;
}

const char* ActionName(Action a) {
  switch (a) {
    case Action::kStart: return "start";
    case Action::kStop: return "stop";
    case Action::kSuspend: return "suspend";
    case Action::kCheckpointCreate: return "checkpoint-create";
    case Action::kCheckpointRestore: return "checkpoint-restore";
    case Action::kReset: return "reset";
    case Action::kWipeHome: return "wipe-home";
    case Action::kWipe: return "wipe";
    case Action::kRm: return "rm";
  }
  return "?";
}

bool IsDestructive(Action a) {
  switch (a) {
    case Action::kCheckpointRestore:
    case Action::kReset:
    case Action::kWipeHome:
    case Action::kWipe:
    case Action::kRm:
      return true;
    default:
      return false;
  }
}

bool ValidWorkspaceName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name[0])) return false;
  for (char c : name) {
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

bool ValidCheckpointId(std::string_view id) {
  if (id.empty() || id.size() > kMaxNameBytes || id[0] == '.' || id[0] == '-') return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return id.find("..") == std::string_view::npos;
}

Result<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  size_t count = 0;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    if (++count > kMaxQueryParams) return Bad("too many query parameters");
    size_t eq = pair.find('=');
    ASSIGN_OR_RETURN(std::string key, Decode(pair.substr(0, eq), kMaxNameBytes));
    std::string value;
    if (eq != std::string_view::npos) {
      ASSIGN_OR_RETURN(value, Decode(pair.substr(eq + 1), kMaxQueryValueBytes));
    }
    if (key.empty()) return Bad("empty query parameter name");
    if (out.count(key)) return Bad("repeated query parameter '" + key + "'");
    out.emplace(std::move(key), std::move(value));
  }
  return out;
}

Result<Route> ParseRoute(std::string_view method, std::string_view target) {
  if (target.size() > kMaxTargetBytes) return Bad("request target too long");
  if (target.empty() || target[0] != '/') return Bad("request target is not a path");
  Route r;
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  if (q != std::string_view::npos) {
    ASSIGN_OR_RETURN(r.query, ParseQuery(target.substr(q + 1)));
  }
  // Paths are matched literally: no percent-decoding of the path, so "%2e%2e" is just not found.
  for (char c : path) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '%' || c == '\\') {
      return Bad("unexpected byte in path");
    }
  }
  const bool get = method == "GET", post = method == "POST";
  if (path == "/") {
    if (get) r.kind = RouteKind::kIndex;
    return r;
  }
  if (path == "/app.js" || path == "/style.css") {
    if (get) {
      r.kind = RouteKind::kAsset;
      r.asset = std::string(path.substr(1));
    }
    return r;
  }
  if (path == "/api/session") {
    if (get) r.kind = RouteKind::kSession;
    return r;
  }
  if (path == "/api/workspaces") {
    if (get) r.kind = RouteKind::kWorkspaces;
    return r;
  }
  if (path == "/api/leaks") {
    if (get) r.kind = RouteKind::kLeaks;
    return r;
  }
  if (path == "/api/consent") {
    if (get) r.kind = RouteKind::kConsent;
    return r;
  }
  std::string_view rest;
  if (!Split(path, "/api/workspaces/", rest)) return r;
  size_t slash = rest.find('/');
  std::string_view name = rest.substr(0, slash);
  if (!ValidWorkspaceName(name)) return Bad("invalid workspace name in path");
  r.name = std::string(name);
  std::string_view sub = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (sub.empty()) {
    if (get) r.kind = RouteKind::kWorkspace;
  } else if (sub == "/traffic") {
    if (get) r.kind = RouteKind::kTraffic;
  } else if (sub == "/traffic/live") {
    if (get) r.kind = RouteKind::kTrafficLive;
  } else if (sub == "/confirm") {
    if (!get) return r;
    auto it = r.query.find("action");
    if (it == r.query.end()) return Bad("confirm needs ?action=VERB");
    auto a = ParseAction(it->second);
    if (!a) return Bad("unknown action '" + it->second + "'");
    r.action = *a;
    r.kind = RouteKind::kConfirm;
  } else if (sub == "/audit") {
    if (get || post) r.kind = RouteKind::kAudit;
  } else if (std::string_view id; Split(sub, "/consent/", id)) {
    if (!post) return r;
    if (id.empty() || id.size() > 18) return Bad("invalid consent question id");
    int64_t n = 0;
    for (char c : id) {
      if (c < '0' || c > '9') return Bad("invalid consent question id");
      n = n * 10 + (c - '0');
    }
    r.consent_id = n;
    r.kind = RouteKind::kConsentAnswer;
  } else if (std::string_view verb; Split(sub, "/actions/", verb)) {
    if (!post) return r;
    auto a = ParseAction(verb);
    if (!a) return Bad("unknown action '" + std::string(verb) + "'");
    r.action = *a;
    r.kind = RouteKind::kAction;
  }
  return r;
}

std::optional<std::string> CookieValue(std::string_view header, std::string_view name) {
  if (header.size() > 8192) return std::nullopt;
  while (!header.empty()) {
    size_t semi = header.find(';');
    std::string_view item = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    if (item.substr(0, eq) == name) return std::string(item.substr(eq + 1));
  }
  return std::nullopt;
}

bool ValidRunHostName(std::string_view name) {
  constexpr std::string_view kSuffix = ".localhost";
  if (name.size() != 32 + kSuffix.size() || name.substr(32) != kSuffix) return false;
  for (char c : name.substr(0, 32)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsOwnHost(std::string_view host, std::string_view name, uint16_t port) {
  const std::string want = std::string(name) + ":" + std::to_string(port);
  if (name.empty() || host.size() != want.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    char c = host[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != want[i]) return false;
  }
  return true;
}

bool IsOwnOrigin(std::string_view origin, std::string_view name, uint16_t port) {
  std::string_view rest;
  if (!Split(origin, "http://", rest)) return false;
  return IsOwnHost(rest, name, port);
}

Result<ActionBody> ParseActionBody(std::string_view body) {
  ActionBody b;
  if (body.empty()) return b;
  if (body.size() > kMaxBodyBytes) return Bad("action body too large");
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("action body is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "confirm") {
      if (!it->is_boolean()) return Bad("confirm is not a boolean");
      b.confirm = it->get<bool>();
    } else if (it.key() == "checkpoint") {
      if (!it->is_string()) return Bad("checkpoint is not a string");
      b.checkpoint = it->get<std::string>();
      if (!ValidCheckpointId(b.checkpoint)) return Bad("invalid checkpoint id");
    } else if (it.key() == "grant") {
      if (!it->is_string()) return Bad("grant is not a string");
      b.grant = it->get<std::string>();
      if (b.grant != "request" && b.grant != "5m" && b.grant != "1h" && b.grant != "vm" &&
          b.grant != "deny") {
        return Bad("grant must be request, 5m, 1h, vm or deny");
      }
    } else {
      return Bad("unknown field '" + it.key().substr(0, 64) + "' in action body");
    }
  }
  return b;
}

bool SecretEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || a.empty()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cloister::ui

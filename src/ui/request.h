// The dashboard's own request parsing: routes, query strings, JSON action bodies, cookies, and the
// Host/Origin checks that keep other web pages out. Boost.Beast parses HTTP itself (bounded by the
// server); everything here is pure and has a fuzz target (fuzz/ui_request_fuzz.cc).
//
// SECURITY: every byte here comes from a browser, and any web page the user visits can make the
// browser send requests to 127.0.0.1. Each parser bounds its input, rejects what it does not
// understand (never guesses), and never throws.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::ui {

inline constexpr size_t kMaxTargetBytes = 2048;
inline constexpr size_t kMaxQueryParams = 16;
inline constexpr size_t kMaxQueryValueBytes = 256;
inline constexpr size_t kMaxBodyBytes = 16 * 1024;
inline constexpr size_t kMaxNameBytes = 64;

// The verbs the dashboard can run: one closed set, each the CLI verb of the same name.
enum class Action {
  kStart,             // cloister start -d NAME
  kStop,              // cloister stop NAME
  kSuspend,           // cloister stop --suspend NAME
  kCheckpointCreate,  // cloister checkpoint create NAME
  kCheckpointRestore, // cloister checkpoint restore NAME ID     (destructive)
  kReset,             // cloister reset NAME                     (destructive)
  kWipeHome,          // cloister wipe-home NAME                 (destructive)
  kWipe,              // cloister wipe NAME                      (destructive)
  kRm,                // cloister rm NAME                        (destructive)
};
std::optional<Action> ParseAction(std::string_view verb);
const char* ActionName(Action a);
// Whether the action drops data: the page must show the CLI's confirmation first, and the POST
// must carry "confirm": true.
bool IsDestructive(Action a);

enum class RouteKind {
  kNotFound,
  kIndex,        // GET /            (also the ?token= exchange)
  kAsset,        // GET /app.js, /style.css
  kSession,      // GET /api/session            -> {csrf}
  kWorkspaces,   // GET /api/workspaces         -> ls --json
  kWorkspace,    // GET /api/workspaces/NAME    -> describe --json
  kTraffic,      // GET /api/workspaces/NAME/traffic?host=&method=&status=&only=&limit=
  kTrafficLive,  // GET /api/workspaces/NAME/traffic/live   (server-sent events)
  kConfirm,      // GET /api/workspaces/NAME/confirm?action=VERB&checkpoint=ID
  kAction,       // POST /api/workspaces/NAME/actions/VERB
  kAudit,        // GET (last) or POST (run) /api/workspaces/NAME/audit
  kLeaks,        // GET /api/leaks
  kConsent,      // GET /api/consent                          -> the open consent questions
  kConsentAnswer,// POST /api/workspaces/NAME/consent/ID       {"grant": "5m"}
};

struct Route {
  RouteKind kind = RouteKind::kNotFound;
  std::string name;   // workspace (validated: ValidWorkspaceName)
  std::string asset;  // kAsset: the file name
  Action action = Action::kStart;
  int64_t consent_id = -1;  // kConsentAnswer
  std::map<std::string, std::string> query;  // decoded, bounded
};

// Parses the request target (origin-form only: "/path?query"). kInvalidArgument on anything
// malformed (bad percent escape, too long, too many parameters, a bad workspace name); a
// well-formed target that names no route is kind kNotFound.
Result<Route> ParseRoute(std::string_view method, std::string_view target);

// application/x-www-form-urlencoded / query string decoding, bounded as above.
Result<std::map<std::string, std::string>> ParseQuery(std::string_view query);

// A workspace name as the store accepts it ([a-z0-9][a-z0-9._-]*, at most 64): anything else in a
// URL is refused before it reaches a store call.
bool ValidWorkspaceName(std::string_view name);
// A checkpoint id (the store's: [A-Za-z0-9._:-], at most 64).
bool ValidCheckpointId(std::string_view id);

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or nullopt.
std::optional<std::string> CookieValue(std::string_view header, std::string_view name);

// The dashboard's per-run host name, "<32 hex>.localhost" (browsers resolve every *.localhost name
// to loopback): its cookie, host-only, goes to no other local web app (a dev server a workspace
// publishes on 127.0.0.1:PORT or localhost:PORT is another host for the browser).
bool ValidRunHostName(std::string_view name);
// The Host header must name this server: exactly "NAME:PORT" (ASCII case-insensitive, as host
// names are). Anything else (127.0.0.1, localhost, a rebound DNS name, another port) is refused.
bool IsOwnHost(std::string_view host, std::string_view name, uint16_t port);
// An Origin header is ours when it is "http://NAME:PORT". "null", other ports, other hosts and
// https are foreign.
bool IsOwnOrigin(std::string_view origin, std::string_view name, uint16_t port);

// An action's JSON body: {"confirm": bool, "checkpoint": "ID", "grant": "5m"} (all optional).
// Bounded; any other key or type, or a grant outside request|5m|1h|vm|deny, is kInvalidArgument.
struct ActionBody {
  bool confirm = false;
  std::string checkpoint;
  std::string grant;
};
Result<ActionBody> ParseActionBody(std::string_view body);

// Constant-time comparison of two secrets (tokens, cookies); false when sizes differ.
bool SecretEquals(std::string_view a, std::string_view b);

}  // namespace cloister::ui

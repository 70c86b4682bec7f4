// The dashboard's side of credential consent: one `consent-listen` connection per running
// workspace's control socket (the protocol is documented in supervisor/consent.h; the connection
// is vm::ConnectUnix and the control protocol's bounded vm::LineConn, supervisor/control.h, as
// `cloister approve` uses them), the questions they carry, and the user's answers. A question is
// only asked while a listener is connected, so the desk keeps the connections open while the
// dashboard runs (and reconnects when a workspace starts); it never decides anything itself.
//
// SECURITY: questions carry guest-chosen text (host, method, path, the SSH request). Each line is
// bounded (kMaxConsentLine), parsed without exceptions, and only known fields are kept, each
// bounded (kMaxConsentField) with control characters removed; grants are kept only from the
// closed set below. An answer is sent only for a question this desk holds, with a grant that
// question offers. The page shows all of it with textContent only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::ui {

inline constexpr size_t kMaxConsentLine = 64 * 1024;
inline constexpr size_t kMaxConsentField = 512;
inline constexpr size_t kMaxConsentQuestions = 64;  // per workspace; more are left unasked

// "request", "5m", "1h", "vm", "deny".
bool ValidGrant(std::string_view grant);

// One `consent` line from a supervisor, reduced to the fields the page shows (or nullopt if it is
// not a well-formed question).
std::optional<nlohmann::json> ParseConsentQuestion(std::string_view line);
// The same from a line already parsed (the listener's bounded vm::LineConn reads objects).
std::optional<nlohmann::json> ConsentQuestionFrom(const nlohmann::json& line);

class ConsentDesk {
 public:
  // workspace -> its control socket, for the workspaces that may ask now (running ones).
  using Sockets = std::function<std::map<std::string, std::string>()>;
  explicit ConsentDesk(Sockets sockets, std::chrono::milliseconds rescan = std::chrono::seconds(1));
  ~ConsentDesk();  // closes every connection and joins its threads
  ConsentDesk(const ConsentDesk&) = delete;
  ConsentDesk& operator=(const ConsentDesk&) = delete;

  // Every open question: [{workspace, id, kind, cred, host, method, path, request, fingerprint,
  // ask, grants, timeout_s}], oldest first.
  nlohmann::json Pending();
  // Answers question `id` of `workspace` on its listener connection. kNotFound when no such
  // question is open (answered elsewhere, timed out), kInvalidArgument for a grant it does not
  // offer.
  Status Answer(const std::string& workspace, int64_t id, const std::string& grant);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cloister::ui

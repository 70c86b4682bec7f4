// Result<T>: errors are values. Nothing in cloister throws across a module boundary.
//
// A Result<T> holds either a T or an Error. An Error carries a code, a one-line message and an
// optional hint that tells the user how to fix it ("Hint: run `cloister wipe NAME`").
// Status is Result<void>.
#pragma once

#include <cassert>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace cloister {

enum class ErrorCode {
  kInvalidArgument,     // bad input from the user or a peer
  kNotFound,            // workspace, image, file... does not exist
  kAlreadyExists,
  kFailedPrecondition,  // the action is illegal in the current state
  kPermissionDenied,
  kIo,                  // an OS call failed
  kNoSpace,             // ENOSPC / EDQUOT
  kBusy,                // locked by another process
  kCorrupt,             // a stored or received document is malformed or fails verification
  kUnavailable,         // a dependency (tool, device, peer) cannot be reached
  kCompromised,         // the workspace is flagged compromised
  kCancelled,           // the user said no, or a signal interrupted
  kInternal,
};

const char* ErrorCodeName(ErrorCode code);

class Error {
 public:
  Error(ErrorCode code, std::string message, std::string hint = "")
      : code_(code), message_(std::move(message)), hint_(std::move(hint)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

  // Returns a copy whose message is prefixed with `context: `.
  Error WithContext(const std::string& context) const {
    return Error(code_, context + ": " + message_, hint_);
  }
  Error WithHint(std::string hint) const { return Error(code_, message_, std::move(hint)); }

  // "message (Hint: hint)" on one line.
  std::string ToString() const;

 private:
  ErrorCode code_;
  std::string message_;
  std::string hint_;
};

// Builds an Error from errno: "what: strerror(errno)", mapping ENOSPC to kNoSpace, ENOENT to
// kNotFound, EACCES/EPERM to kPermissionDenied, EEXIST to kAlreadyExists, others to kIo.
Error ErrnoError(const std::string& what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : v_(value) {}                // NOLINT: implicit by design
  Result(T&& value) : v_(std::move(value)) {}           // NOLINT
  Result(const Error& error) : v_(error) {}             // NOLINT
  Result(Error&& error) : v_(std::move(error)) {}       // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Error>>>
  Result(U&& value) : v_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

  T value_or(T fallback) const { return ok() ? std::get<0>(v_) : std::move(fallback); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(const Error& error) : error_(error), ok_(false) {}  // NOLINT
  Result(Error&& error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_{ErrorCode::kInternal, ""};
  bool ok_ = true;
};

using Status = Result<void>;

inline Status OkStatus() { return Status(); }

}  // namespace cloister

#define CLOISTER_CONCAT_INNER(a, b) a##b
#define CLOISTER_CONCAT(a, b) CLOISTER_CONCAT_INNER(a, b)

// Returns the error from the enclosing function if `expr` (a Result or Status) failed.
#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    auto&& cloister_status_ = (expr);                           \
    if (!cloister_status_.ok()) return cloister_status_.error(); \
  } while (0)

// ASSIGN_OR_RETURN(auto x, Foo()); declares x from the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(CLOISTER_CONCAT(cloister_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.error();          \
  lhs = std::move(tmp).value()

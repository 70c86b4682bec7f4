#include "base/result.h"

#include <cerrno>
#include <cstring>

namespace cloister {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kAlreadyExists: return "already exists";
    case ErrorCode::kFailedPrecondition: return "failed precondition";
    case ErrorCode::kPermissionDenied: return "permission denied";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kNoSpace: return "no space";
    case ErrorCode::kBusy: return "busy";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kCompromised: return "compromised";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Error::ToString() const {
  if (hint_.empty()) return message_;
  return message_ + " (Hint: " + hint_ + ")";
}

Error ErrnoError(const std::string& what, int err) {
  ErrorCode code = ErrorCode::kIo;
  switch (err) {
    case ENOSPC:
    case EDQUOT: code = ErrorCode::kNoSpace; break;
    case ENOENT: code = ErrorCode::kNotFound; break;
    case EACCES:
    case EPERM: code = ErrorCode::kPermissionDenied; break;
    case EEXIST: code = ErrorCode::kAlreadyExists; break;
    case EWOULDBLOCK: code = ErrorCode::kBusy; break;
    default: break;
  }
  std::string msg = what + ": " + std::strerror(err);
  if (code == ErrorCode::kNoSpace) return Error(code, msg, "free space on the store's filesystem");
  return Error(code, msg);
}

}  // namespace cloister

// Response redaction's matcher: replaces real credential values by their placeholders in response
// bytes, so an upstream that reflects a credential (an error message quoting the key) never hands
// the real value to the guest.
//
// Forms replaced, for every real value (each by the same form of its placeholder, so lengths, and
// with them Content-Length, stay right; a placeholder of another length becomes x's):
//   raw            the value's bytes
//   url            percent-encoded: reserved characters only, or every byte; upper or lower hex
//   base64         standard or URL-safe, at each of the three byte alignments (the characters that
//                  depend on the value alone)
//   hex            lower or upper case
// Content encodings (gzip, br, ...) are not decoded here: a request that carried a real value is
// sent upstream with Accept-Encoding: identity, and an encoded answer is refused (see
// IdentityEncodingFilter).
// SECURITY: holds real values (wiped on destruction). Streaming holds back only a tail that could
// be the start of one of the forms (never a whole SSE event).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cloister::proxy {

class Redactor {
 public:
  Redactor() = default;
  Redactor(const Redactor&) = delete;
  Redactor& operator=(const Redactor&) = delete;
  ~Redactor();

  // Registers `real` (redacted to `placeholder`, or x's when the lengths differ). Idempotent.
  void Add(const std::string& real, const std::string& placeholder);
  bool active() const { return !forms_.empty(); }
  // Every form in `s` replaced.
  std::string Apply(std::string s) const;
  // Streaming: returns what can be sent now; `last` flushes the held tail.
  std::string Feed(std::string_view in, bool last);
  // The longest form (what a streaming caller may see held back, plus one).
  size_t max_form() const { return max_form_; }

 private:
  std::vector<std::string> reals_;
  std::vector<std::pair<std::string, std::string>> forms_;  // (real form, replacement)
  std::string pending_;
  size_t max_form_ = 0;
};

}  // namespace cloister::proxy

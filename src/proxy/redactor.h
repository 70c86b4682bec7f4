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
// Cost: a piece is first searched for all the forms at once (Wu-Manber: a window as long as the
// shortest form moves by up to that length per step on bytes no form holds); only a piece where
// one occurs is redacted form by form. Searching form by form with std::string::find cost 1.0 s
// per GiB of random bytes and 2.3 s per GiB of text (a memchr call per occurrence of each form's
// first byte).
#pragma once

#include <cstdint>
#include <memory>
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
  // Streaming in place: `data` becomes what can be sent now (the tail held by the previous call
  // first, then `data` redacted, less the tail held for the next call); `last` flushes the tail.
  // The bytes of a form are overwritten by its replacement where they lie, and the bytes held
  // back are wiped from `data`, so no real value is left in it.
  void FeedInPlace(std::string& data, bool last);
  // The longest form (what a streaming caller may see held back, plus one).
  size_t max_form() const { return max_form_; }

 private:
  static constexpr size_t kShiftTable = 4096;  // hashed pairs of bytes
  static size_t PairHash(unsigned char a, unsigned char b) {
    return ((static_cast<size_t>(a) << 4) ^ b) & (kShiftTable - 1);
  }
  void BuildShifts();
  // False only when no form occurs in `s` (true for a possible one: then ApplyInPlace).
  bool AnyForm(std::string_view s) const;
  void ApplyInPlace(std::string& s) const;
  // The length of the longest tail of `s` that is the start of a form (but not a whole one).
  size_t HoldFor(std::string_view s) const;

  std::vector<std::string> reals_;
  std::vector<std::pair<std::string, std::string>> forms_;  // (real form, replacement)
  std::string pending_;
  size_t max_form_ = 0;
  size_t min_form_ = 0;
  // How far the search window may move when its last two bytes hash to an entry (BuildShifts).
  std::unique_ptr<uint8_t[]> shift_;
};

}  // namespace cloister::proxy

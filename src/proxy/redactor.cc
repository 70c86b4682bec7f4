#include "proxy/redactor.h"

#include <openssl/crypto.h>
#include <string.h>

#include <algorithm>

#include "vault/crypto.h"

namespace cloister::proxy {
namespace {

bool Unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

std::string Percent(std::string_view s, bool all, bool upper) {
  static const char* kU = "0123456789ABCDEF";
  static const char* kL = "0123456789abcdef";
  const char* d = upper ? kU : kL;
  std::string out;
  for (unsigned char c : s) {
    if (!all && Unreserved(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += d[c >> 4];
      out += d[c & 15];
    }
  }
  return out;
}

std::string Hex(std::string_view s, bool upper) {
  static const char* kU = "0123456789ABCDEF";
  static const char* kL = "0123456789abcdef";
  const char* d = upper ? kU : kL;
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

// The base64 characters of `s` preceded by k bytes that depend on `s` alone (as the detector).
std::string Base64Core(std::string_view s, size_t k, bool url) {
  std::string padded = std::string(k, '\0') + std::string(s);
  size_t full = padded.size() / 3 * 4;
  size_t skip = k == 0 ? 0 : (k == 1 ? 2 : 3);
  std::string enc = vault::Base64Encode(padded, url, false).substr(0, full);
  vault::SecureWipe(padded);
  if (enc.size() <= skip) return "";
  return enc.substr(skip);
}

}  // namespace

Redactor::~Redactor() {
  vault::SecureWipe(pending_);
  for (auto& r : reals_) vault::SecureWipe(r);
  for (auto& f : forms_) vault::SecureWipe(f.first);
}

void Redactor::Add(const std::string& real, const std::string& placeholder) {
  if (real.empty() || std::find(reals_.begin(), reals_.end(), real) != reals_.end()) return;
  reals_.push_back(real);
  // Keep lengths (Content-Length stays right): a placeholder of another length becomes x's.
  std::string ph = placeholder.size() == real.size() ? placeholder : std::string(real.size(), 'x');
  auto add = [&](std::string form, std::string repl, bool encoded = true) {
    // Encoded forms shorter than 8 characters would hit unrelated text.
    if (form.empty() || (encoded && form.size() < 8) || form.size() != repl.size()) return;
    for (const auto& f : forms_) {
      if (f.first == form) return;
    }
    max_form_ = std::max(max_form_, form.size());
    forms_.push_back({std::move(form), std::move(repl)});
  };
  add(real, ph, /*encoded=*/false);
  for (bool upper : {true, false}) {
    add(Percent(real, false, upper), Percent(ph, false, upper));
    add(Percent(real, true, upper), Percent(ph, true, upper));
    add(Hex(real, upper), Hex(ph, upper));
  }
  for (size_t k = 0; k < 3; ++k) {
    for (bool url : {false, true}) add(Base64Core(real, k, url), Base64Core(ph, k, url));
  }
  // Longest first: a form that contains another is replaced whole.
  std::stable_sort(forms_.begin(), forms_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  BuildShifts();
}

// Wu-Manber with blocks of two bytes: for each form's first min_form_ bytes, a block ending at
// index q lets the window (whose last byte is at `pos`) move by min_form_ - 1 - q; a block in no
// form moves it by min_form_ - 1. A shift of 0 means a form's prefix may end here: check them all.
void Redactor::BuildShifts() {
  min_form_ = forms_.empty() ? 0 : forms_.back().first.size();  // sorted longest first
  if (min_form_ < 2) return;
  if (!shift_) shift_ = std::make_unique<uint8_t[]>(kShiftTable);
  const size_t def = std::min<size_t>(min_form_ - 1, 255);
  std::fill(shift_.get(), shift_.get() + kShiftTable, static_cast<uint8_t>(def));
  for (const auto& [form, repl] : forms_) {
    for (size_t q = 1; q < min_form_; ++q) {
      size_t h = PairHash(form[q - 1], form[q]);
      shift_[h] = static_cast<uint8_t>(std::min<size_t>(shift_[h], min_form_ - 1 - q));
    }
  }
}

bool Redactor::AnyForm(std::string_view s) const {
  if (min_form_ < 2 || !shift_) return !forms_.empty();
  const unsigned char* d = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t pos = min_form_ - 1; pos < n;) {
    uint8_t sh = shift_[PairHash(d[pos - 1], d[pos])];
    if (sh > 0) {
      pos += sh;
      continue;
    }
    size_t start = pos + 1 - min_form_;
    for (const auto& [form, repl] : forms_) {
      if (form.size() <= n - start && d[start] == static_cast<unsigned char>(form[0]) &&
          memcmp(d + start, form.data(), form.size()) == 0) {
        return true;
      }
    }
    ++pos;
  }
  return false;
}

void Redactor::ApplyInPlace(std::string& s) const {
  for (const auto& [form, repl] : forms_) {
    for (size_t pos = s.find(form); pos != std::string::npos; pos = s.find(form, pos + 1)) {
      s.replace(pos, form.size(), repl);  // the same length: overwritten where it lies
    }
  }
}

std::string Redactor::Apply(std::string s) const {
  if (AnyForm(s)) ApplyInPlace(s);
  return s;
}

size_t Redactor::HoldFor(std::string_view s) const {
  size_t hold = 0;
  for (const auto& [form, repl] : forms_) {
    for (size_t k = std::min(s.size(), form.size() - 1); k > hold; --k) {
      if (s[s.size() - k] == form[0] && s.compare(s.size() - k, k, form, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::string Redactor::Feed(std::string_view in, bool last) {
  std::string s(in);
  FeedInPlace(s, last);
  return s;
}

void Redactor::FeedInPlace(std::string& data, bool last) {
  if (!pending_.empty()) {
    if (data.capacity() >= pending_.size() + data.size()) {
      data.insert(0, pending_);  // room enough: no reallocation leaves a copy behind
    } else {
      std::string all;
      all.reserve(pending_.size() + data.size());
      all.append(pending_).append(data);
      vault::SecureWipe(data);
      data = std::move(all);
    }
    vault::SecureWipe(pending_);
  }
  if (AnyForm(data)) ApplyInPlace(data);
  size_t hold = last ? 0 : HoldFor(data);
  if (hold > 0) {
    pending_.assign(data, data.size() - hold, hold);
    OPENSSL_cleanse(data.data() + data.size() - hold, hold);
    data.resize(data.size() - hold);
  }
}

}  // namespace cloister::proxy

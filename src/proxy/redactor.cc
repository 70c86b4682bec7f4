#include "proxy/redactor.h"

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
}

std::string Redactor::Apply(std::string s) const {
  for (const auto& [form, repl] : forms_) {
    for (size_t pos = s.find(form); pos != std::string::npos; pos = s.find(form, pos + 1)) {
      s.replace(pos, form.size(), repl);
    }
  }
  return s;
}

std::string Redactor::Feed(std::string_view in, bool last) {
  pending_.append(in);
  std::string all = Apply(std::move(pending_));
  pending_.clear();
  size_t hold = 0;
  if (!last) {
    for (const auto& [form, repl] : forms_) {
      for (size_t k = std::min(all.size(), form.size() - 1); k > hold; --k) {
        if (all.compare(all.size() - k, k, form, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
  }
  pending_ = all.substr(all.size() - hold);
  all.resize(all.size() - hold);
  return all;
}

}  // namespace cloister::proxy

#include "proxy/detector.h"

#include <string.h>

#include <algorithm>

#include "vault/crypto.h"

namespace cloister::proxy {
namespace {

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AddUnique(std::vector<Hit>& hits, Hit h) {
  if (std::find(hits.begin(), hits.end(), h) == hits.end()) hits.push_back(h);
}

}  // namespace

const char* EncodingName(Encoding e) {
  switch (e) {
    case Encoding::kRaw: return "raw";
    case Encoding::kUrl: return "url";
    case Encoding::kBase64: return "base64";
  }
  return "?";
}

std::string PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      int hi = HexVal(text[i + 1]), lo = HexVal(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

PlaceholderSet::PlaceholderSet(const std::vector<std::string>& placeholders) {
  for (size_t i = 0; i < placeholders.size(); ++i) {
    const std::string& p = placeholders[i];
    if (p.empty()) continue;
    patterns_.push_back({p, i, Encoding::kRaw});
    // Base64 at each alignment: encode k zero bytes + p, keep only the characters that depend on
    // p alone (skip the ones mixed with the k leading bytes; drop the trailing partial group).
    for (size_t k = 0; k < 3; ++k) {
      std::string padded = std::string(k, '\0') + p;
      size_t full = padded.size() / 3 * 4;
      size_t skip = k == 0 ? 0 : (k == 1 ? 2 : 3);
      for (bool url : {false, true}) {
        std::string enc = vault::Base64Encode(padded, url, false).substr(0, full);
        if (enc.size() <= skip + 8) continue;
        enc = enc.substr(skip);
        bool dup = false;
        for (const Pattern& q : patterns_) dup |= q.index == i && q.bytes == enc;
        if (!dup) patterns_.push_back({enc, i, Encoding::kBase64});
      }
    }
  }
  for (const Pattern& p : patterns_) max_len_ = std::max(max_len_, p.bytes.size());
}

void PlaceholderSet::SearchWindow(std::string_view window, size_t new_from, bool decoded,
                                  std::vector<Hit>& hits) const {
  for (const Pattern& p : patterns_) {
    if (p.bytes.size() > window.size()) continue;
    const char* base = window.data();
    size_t pos = 0;
    while (pos + p.bytes.size() <= window.size()) {
      const void* m = memmem(base + pos, window.size() - pos, p.bytes.data(), p.bytes.size());
      if (!m) break;
      size_t at = static_cast<const char*>(m) - base;
      if (at + p.bytes.size() > new_from) {  // not entirely inside the already-scanned tail
        Encoding e = p.encoding;
        if (decoded && e == Encoding::kRaw) e = Encoding::kUrl;
        bool raw_already = decoded && std::find(hits.begin(), hits.end(),
                                                Hit{p.index, p.encoding}) != hits.end();
        if (!raw_already) AddUnique(hits, {p.index, e});
        break;
      }
      pos = at + 1;
    }
  }
}

std::vector<Hit> PlaceholderSet::Scan(std::string_view text) const {
  std::vector<Hit> hits;
  if (patterns_.empty()) return hits;
  SearchWindow(text, 0, false, hits);
  if (text.find('%') != std::string_view::npos) {
    std::string decoded = PercentDecode(text);
    SearchWindow(decoded, 0, true, hits);
  }
  return hits;
}

void StreamScanner::Window(std::string& tail, std::string_view data, bool decoded,
                           std::vector<Hit>& hits) {
  size_t keep = set_.max_len_ > 0 ? set_.max_len_ - 1 : 0;
  // SECURITY: a placeholder that started in an earlier piece ends within the first `keep` bytes of
  // this one: the seam (the tail and that much of `data`) is searched as one window; the rest of
  // `data` is searched where it lies, not copied (a copy of every piece was a second pass over the
  // body). A match inside the seam's part of `data` is found twice and counted once (AddUnique).
  size_t head = std::min(keep, data.size());
  seam_.assign(tail);
  seam_.append(data.data(), head);
  set_.SearchWindow(seam_, tail.size(), decoded, hits);
  if (data.size() > head) set_.SearchWindow(data, 0, decoded, hits);
  if (data.size() >= keep) {
    tail.assign(data.data() + data.size() - keep, keep);
  } else {
    tail.append(data.data(), data.size());
    if (tail.size() > keep) tail.erase(0, tail.size() - keep);
  }
}

void StreamScanner::Feed(std::string_view data, std::vector<Hit>& hits) {
  if (set_.patterns_.empty() || data.empty()) return;
  Window(raw_tail_, data, false, hits);
  if (!seen_percent_ && data.find('%') == std::string_view::npos) {
    // No escape seen yet: the decoded stream equals the raw one; keep its tail in step.
    decoded_tail_ = raw_tail_;
    return;
  }
  seen_percent_ = true;
  std::string decoded;
  decoded.reserve(data.size());
  for (char c : data) {
    if (!pct_.empty()) {
      pct_ += c;
      if (HexVal(c) < 0) {  // invalid escape: emit as is
        decoded += pct_;
        pct_.clear();
      } else if (pct_.size() == 3) {
        decoded += static_cast<char>(HexVal(pct_[1]) * 16 + HexVal(pct_[2]));
        pct_.clear();
      }
    } else if (c == '%') {
      pct_ = "%";
    } else {
      decoded += c;
    }
  }
  Window(decoded_tail_, decoded, true, hits);
}

}  // namespace cloister::proxy

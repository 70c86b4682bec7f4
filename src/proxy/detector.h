// The compromise detector's matcher: finds a workspace's placeholders in request bytes.
//
// Forms recognised, for every placeholder:
//   raw            the placeholder's bytes
//   url            the same after percent-decoding (%73%6B-%61nt... or any mix)
//   base64         standard or URL-safe base64, at any of the three byte alignments, in the raw
//                  bytes or after percent-decoding (covers Basic auth, JSON-embedded blobs, ...)
// Bodies are scanned as a stream: a placeholder split across any number of chunks is found.
// This is a tripwire against a guest sending a placeholder where it does not belong, not a
// guarantee against a determined encoder (hex, JSON \u escapes, compression, encryption pass).
//
// SECURITY: the input is hostile guest bytes; every operation is linear in its size and holds at
// most the longest pattern's length of state.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cloister::proxy {

enum class Encoding { kRaw, kUrl, kBase64 };
const char* EncodingName(Encoding e);

struct Hit {
  size_t index;  // which placeholder (position in the constructor's vector)
  Encoding encoding;
  bool operator==(const Hit& o) const { return index == o.index && encoding == o.encoding; }
};

class PlaceholderSet {
 public:
  explicit PlaceholderSet(const std::vector<std::string>& placeholders);

  // One-shot scan of a complete value (request target, a header value). Unique hits.
  std::vector<Hit> Scan(std::string_view text) const;
  bool empty() const { return patterns_.empty(); }
  // The longest span of stream bytes a placeholder can take in a form this set finds (every
  // byte of its longest pattern percent-encoded): a streaming writer that keeps this many bytes
  // back never lets part of a placeholder out before the scanner saw all of it.
  size_t MaxWireLength() const { return 3 * max_len_; }

 private:
  friend class StreamScanner;
  struct Pattern {
    std::string bytes;
    size_t index;
    Encoding encoding;  // kRaw or kBase64 (kUrl is assigned by where it was found)
  };
  void SearchWindow(std::string_view window, size_t new_from, bool decoded,
                    std::vector<Hit>& hits) const;
  std::vector<Pattern> patterns_;
  size_t max_len_ = 0;
};

class StreamScanner {
 public:
  // `set` must outlive the scanner.
  explicit StreamScanner(const PlaceholderSet& set) : set_(set) {}

  // Scans the next piece of the stream; appends new unique hits to `hits`.
  void Feed(std::string_view data, std::vector<Hit>& hits);

 private:
  void Window(std::string& tail, std::string_view data, bool decoded, std::vector<Hit>& hits);
  const PlaceholderSet& set_;
  std::string raw_tail_;
  std::string decoded_tail_;
  std::string seam_;  // scratch: a tail and the start of the next piece
  std::string pct_;  // a pending "%" or "%X" not yet decodable
  bool seen_percent_ = false;
};

// Percent-decodes `text` (invalid escapes are kept as they are).
std::string PercentDecode(std::string_view text);

}  // namespace cloister::proxy

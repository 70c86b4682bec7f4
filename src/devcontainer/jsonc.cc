#include "devcontainer/jsonc.h"

#include <cstdint>
#include <optional>

namespace cloister::devcontainer {

int LineTable::LineOf(const std::vector<std::string>& path) const {
  size_t node = 0;
  for (const std::string& step : path) {
    const Node& n = nodes_[node];
    if (auto it = n.members.find(step); it != n.members.end()) {
      node = it->second;
      continue;
    }
    if (step.empty() || step.size() > 9 || step.find_first_not_of("0123456789") != std::string::npos) {
      return 0;
    }
    size_t index = std::stoul(step);
    if (index >= n.elements.size()) return 0;
    node = n.elements[index];
  }
  return nodes_[node].line;
}

namespace {

bool JsoncSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void JsoncAppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::optional<uint32_t> JsoncHex4(std::string_view s) {
  if (s.size() < 4) return std::nullopt;
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
    else return std::nullopt;
  }
  return v;
}

}  // namespace

// The pre-pass (jsonc.h). Works on `out`, a copy of the text whose trailing commas it blanks.
class JsoncScanner {
 public:
  // The first key found twice in one object, if any (Run fails only on the limits).
  const std::optional<Error>& duplicate() const { return duplicate_; }

  JsoncScanner(std::string& out, const std::string& source, const JsoncLimits& limits,
               LineTable& table)
      : s_(out), source_(source), limits_(limits), table_(table) {}

  Status Run() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (JsoncSpace(c)) {
        Advance();
      } else if (c == '/' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '/' || s_[pos_ + 1] == '*')) {
        RETURN_IF_ERROR(SkipComment());
      } else if (c == '"') {
        RETURN_IF_ERROR(String());
        last_ = 'v';
      } else if (c == '{' || c == '[') {
        RETURN_IF_ERROR(Open(c == '{'));
        last_ = c;
      } else if (c == '}' || c == ']') {
        if (!frames_.empty()) frames_.pop_back();
        Advance();
        last_ = 'v';
      } else if (c == ',') {
        RETURN_IF_ERROR(Comma());
        last_ = ',';
      } else if (c == ':') {
        Advance();
        last_ = ':';
      } else {
        ValueStart();
        last_ = 'v';
        // A literal or a number (or garbage, which nlohmann reports): up to the next delimiter.
        while (pos_ < s_.size() && !JsoncSpace(s_[pos_]) && std::string_view(",:[]{}\"/").find(
                                                              s_[pos_]) == std::string_view::npos) {
          Advance();
        }
        if (pos_ < s_.size() && s_[pos_] == '/' &&
            !(pos_ + 1 < s_.size() && (s_[pos_ + 1] == '/' || s_[pos_ + 1] == '*'))) {
          Advance();  // a lone '/': garbage, but the scan must move on
        }
      }
    }
    return OkStatus();
  }

 private:
  struct Frame {
    bool object;
    size_t node;
    bool expect_key = true;  // objects: the next string is a key
    size_t index = 0;        // arrays: the current element
    size_t member = 0;       // objects: the node of the current member (0: none yet)
  };

  void Advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      line_start_ = pos_ + 1;
    }
    ++pos_;
  }

  Error Fail(const std::string& what) const {
    return Error(ErrorCode::kInvalidArgument,
                 source_ + ":" + std::to_string(line_) + ":" +
                     std::to_string(pos_ - line_start_ + 1) + ": " + what);
  }

  Status SkipComment() {
    if (s_[pos_ + 1] == '/') {
      while (pos_ < s_.size() && s_[pos_] != '\n') Advance();
      return OkStatus();
    }
    int line = line_;
    size_t col = pos_ - line_start_ + 1;
    Advance();
    Advance();
    while (pos_ + 1 < s_.size() && !(s_[pos_] == '*' && s_[pos_ + 1] == '/')) Advance();
    if (pos_ + 1 >= s_.size()) {
      return Error(ErrorCode::kInvalidArgument, source_ + ":" + std::to_string(line) + ":" +
                                                    std::to_string(col) +
                                                    ": a /* comment is never closed");
    }
    Advance();
    Advance();
    return OkStatus();
  }

  size_t NewNode() {
    table_.nodes_.push_back(LineTable::Node{line_, {}, {}});
    return table_.nodes_.size() - 1;
  }

  // The node of the value starting here: the current member's, a new array element's, or the
  // root's.
  size_t ValueStart() {
    if (frames_.empty()) return 0;
    Frame& f = frames_.back();
    if (f.object) return f.member;  // 0 when the value has no key (nlohmann reports it)
    LineTable::Node* parent = &table_.nodes_[f.node];
    if (parent->elements.size() == f.index) {
      size_t n = NewNode();
      table_.nodes_[f.node].elements.push_back(n);
      return n;
    }
    return f.index < parent->elements.size() ? parent->elements[f.index] : 0;
  }

  Status Open(bool object) {
    size_t node = ValueStart();
    if (frames_.size() >= limits_.max_depth) {
      return Fail("nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    frames_.push_back(Frame{object, node});
    Advance();
    return OkStatus();
  }

  Status Comma() {
    size_t comma = pos_;
    Advance();
    size_t p = pos_;
    // Look ahead past whitespace and comments (without moving the line count: the scan goes over
    // them again).
    while (p < s_.size()) {
      if (JsoncSpace(s_[p])) {
        ++p;
      } else if (s_[p] == '/' && p + 1 < s_.size() && s_[p + 1] == '/') {
        while (p < s_.size() && s_[p] != '\n') ++p;
      } else if (s_[p] == '/' && p + 1 < s_.size() && s_[p + 1] == '*') {
        size_t end = s_.find("*/", p + 2);
        if (end == std::string::npos) break;  // reported when the scan gets there
        p = end + 2;
      } else {
        break;
      }
    }
    // A trailing comma follows a value; `[,]`, `{,}` and `[1,,]` stay errors.
    if (last_ == 'v' && p < s_.size() && (s_[p] == '}' || s_[p] == ']')) {
      s_[comma] = ' ';
      return OkStatus();
    }
    if (!frames_.empty()) {
      Frame& f = frames_.back();
      if (f.object) {
        f.expect_key = true;
        f.member = 0;
      } else {
        ++f.index;
      }
    }
    return OkStatus();
  }

  Status String() {
    int line = line_;
    size_t col = pos_ - line_start_ + 1;
    bool is_key = !frames_.empty() && frames_.back().object && frames_.back().expect_key;
    size_t node = is_key ? 0 : ValueStart();
    (void)node;
    std::string text;
    Advance();
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_];
      if (c == '\n') return OkStatus();  // invalid JSON: nlohmann names it
      if (c != '\\') {
        if (is_key) text += c;
        Advance();
        continue;
      }
      if (pos_ + 1 >= s_.size()) return OkStatus();
      char e = s_[pos_ + 1];
      Advance();
      Advance();
      if (!is_key) continue;
      switch (e) {
        case 'b': text += '\b'; break;
        case 'f': text += '\f'; break;
        case 'n': text += '\n'; break;
        case 'r': text += '\r'; break;
        case 't': text += '\t'; break;
        case 'u': {
          auto hi = JsoncHex4(std::string_view(s_).substr(pos_));
          if (!hi) return OkStatus();  // invalid: nlohmann names it
          for (int i = 0; i < 4; ++i) Advance();
          uint32_t cp = *hi;
          if (cp >= 0xD800 && cp < 0xDC00 && pos_ + 1 < s_.size() && s_[pos_] == '\\' &&
              s_[pos_ + 1] == 'u') {
            auto lo = JsoncHex4(std::string_view(s_).substr(pos_ + 2));
            if (lo && *lo >= 0xDC00 && *lo < 0xE000) {
              for (int i = 0; i < 6; ++i) Advance();
              cp = 0x10000 + ((cp - 0xD800) << 10) + (*lo - 0xDC00);
            }
          }
          JsoncAppendUtf8(text, cp);
          break;
        }
        default: text += e; break;  // \" \\ \/ (anything else is invalid: nlohmann names it)
      }
      if (text.size() > limits_.max_key_bytes) break;
    }
    if (pos_ < s_.size()) Advance();  // the closing quote
    if (!is_key) return OkStatus();
    if (text.size() > limits_.max_key_bytes) {
      return Error(ErrorCode::kInvalidArgument,
                   source_ + ":" + std::to_string(line) + ":" + std::to_string(col) +
                       ": a key longer than " + std::to_string(limits_.max_key_bytes) + " bytes");
    }
    Frame& f = frames_.back();
    auto& members = table_.nodes_[f.node].members;
    if (auto it = members.find(text); it != members.end()) {
      // Reported once the text is known to be JSON (in broken JSON a "key" may be anything).
      if (!duplicate_) duplicate_ = Error(ErrorCode::kInvalidArgument,
                   source_ + ":" + std::to_string(line) + ":" + std::to_string(col) + ": key \"" +
                       text + "\" appears twice in one object (first at line " +
                       std::to_string(table_.nodes_[it->second].line) + ")",
                   "keep one: other tools read the last, a person reading the file the first");
      f.member = it->second;
      f.expect_key = false;
      return OkStatus();
    }
    size_t n = NewNode();
    table_.nodes_[n].line = line;
    table_.nodes_[f.node].members.emplace(std::move(text), n);
    f.member = n;
    f.expect_key = false;
    return OkStatus();
  }

  std::string& s_;
  std::optional<Error> duplicate_;
  const std::string& source_;
  const JsoncLimits& limits_;
  LineTable& table_;
  std::vector<Frame> frames_;
  size_t pos_ = 0;
  char last_ = 0;  // the last significant token: 'v' (a value's end), '{', '[', ',', ':'
  int line_ = 1;
  size_t line_start_ = 0;
};

Result<JsoncDocument> ParseJsonc(std::string_view text, const std::string& source,
                                 const JsoncLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return Error(ErrorCode::kInvalidArgument,
                 source + " is larger than " + std::to_string(limits.max_bytes) + " bytes");
  }
  JsoncDocument doc;
  std::string cleaned(text);
  if (cleaned.size() >= 3 && cleaned.compare(0, 3, "\xEF\xBB\xBF") == 0) {
    cleaned.replace(0, 3, "   ");  // a UTF-8 byte order mark, as editors write it
  }
  JsoncScanner scanner(cleaned, source, limits, doc.lines);
  RETURN_IF_ERROR(scanner.Run());
  try {
    doc.value = nlohmann::json::parse(cleaned, nullptr, /*allow_exceptions=*/true,
                                      /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte: 1-based offset of the byte where the parser stopped.
    size_t at = e.byte == 0 ? 0 : std::min<size_t>(e.byte - 1, cleaned.size());
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at; ++i) {
      if (cleaned[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error while
    // parsing object key - invalid literal; last read: '...'": keep what follows "parsing".
    size_t why = what.find("while parsing");
    std::string reason = why == std::string::npos ? "not valid JSON" : what.substr(why + 6);
    return Error(ErrorCode::kInvalidArgument,
                 source + ":" + std::to_string(line) + ":" + std::to_string(at - line_start + 1) +
                     ": " + reason);
  } catch (const nlohmann::json::exception& e) {
    return Error(ErrorCode::kInvalidArgument, source + ": " + e.what());
  }
  if (scanner.duplicate()) return *scanner.duplicate();
  return doc;
}

}  // namespace cloister::devcontainer

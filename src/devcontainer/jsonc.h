// JSON with comments and trailing commas (JSONC): what VS Code, the Dev Containers CLI and DevPod
// read devcontainer.json and devcontainer-feature.json as.
//
// ParseJsonc makes one linear pass over the text first (strings, `//` and `/* */` comments,
// brackets): it blanks each trailing comma (one followed, past whitespace and comments, by `}` or
// `]`), bounds the nesting, refuses a key twice in one object, and records the line of every
// object member and array element. nlohmann-json then parses the result with comments ignored.
// Every error names SOURCE:LINE:COLUMN.
//
// SECURITY: the text comes from a repository, which an agent may have written. It is bounded in
// bytes, nesting depth and key length before anything else reads it; the pass is linear (each
// comma's look-ahead stops at the next significant character, so the look-aheads never overlap)
// and keeps memory linear in the input (the line table is a tree, one node per member or element).
// A key twice in one object is refused: a person reading the file sees the first, a JSON parser
// keeps the last. Fuzz target: fuzz/devcontainer_fuzz.cc.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::devcontainer {

struct JsoncLimits {
  size_t max_bytes = 256 * 1024;  // a devcontainer.json is a few KiB
  size_t max_depth = 32;
  size_t max_key_bytes = 1024;
};

// Where each member and element of a parsed document starts (1-based lines).
class LineTable {
 public:
  // The line of the value at `path` (object keys, or decimal indices for array elements;
  // {} is the root), or 0 when the table does not know it.
  int LineOf(const std::vector<std::string>& path) const;

 private:
  friend class JsoncScanner;
  struct Node {
    int line = 0;
    std::map<std::string, size_t, std::less<>> members;  // key -> node
    std::vector<size_t> elements;                       // index -> node
  };
  std::vector<Node> nodes_{Node{1, {}, {}}};
};

struct JsoncDocument {
  nlohmann::json value;
  LineTable lines;
};

// `source` names the text in errors ("devcontainer.json").
Result<JsoncDocument> ParseJsonc(std::string_view text, const std::string& source,
                                 const JsoncLimits& limits = {});

}  // namespace cloister::devcontainer

// The traffic and leaks views' data: a workspace's trace.jsonl read from a byte offset (so the
// live view tails the file from exactly where the first page ended), the view's filter, and the
// leaks of every workspace with what happened next.
//
// SECURITY: trace lines are the proxy's JSON, but host, path, method and error text in them are
// chosen by the guest. Lines are bounded (kMaxTraceLineBytes; longer ones are skipped), parsed
// without exceptions, and re-serialised (proxy::TraceRecord::ToJson) so only known fields reach the
// page; JSON output replaces invalid UTF-8. The page puts every value into textContent only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "proxy/trace.h"

namespace cloister::ui {

inline constexpr size_t kMaxTraceLineBytes = 64 * 1024;
inline constexpr size_t kMaxTraceReadBytes = 16 << 20;  // per read; the rest comes next read
inline constexpr size_t kMaxTrafficRecords = 1000;

struct TraceChunk {
  std::vector<proxy::TraceRecord> records;
  uint64_t next_offset = 0;  // the byte after the last complete line read
};

// Complete lines of `path` from `offset` (at most kMaxTraceReadBytes). A missing file is an empty
// chunk at offset 0 (the proxy creates it on the first request). A file shorter than `offset`
// (replaced: wipe, rm) reads again from 0.
Result<TraceChunk> ReadTraceFrom(const std::string& path, uint64_t offset);
// Same from text in memory (the parser; fuzzed).
TraceChunk ParseTraceLines(std::string_view text, uint64_t base_offset);

// The traffic view's filter, from its query string: host (substring), method (exact), status
// ("2xx".."5xx" or a code), only ("leaks", "refused", "aborted", "swaps"), limit (1..1000,
// default 200).
struct TrafficFilter {
  std::string host;
  std::string method;
  int status_class = 0;  // 1..5, or 0
  int status = 0;        // an exact code, or 0
  std::string only;
  size_t limit = 200;
  bool Matches(const proxy::TraceRecord& r) const;
};
Result<TrafficFilter> ParseTrafficFilter(const std::map<std::string, std::string>& query);

// A refusal is a request the proxy answered itself (error set) or blocked.
bool IsRefusal(const proxy::TraceRecord& r);

// The page's view of one record: ToJson() plus "refused" and "aborted" (ended without a whole
// response: its "abort" says why).
nlohmann::json RecordJson(const proxy::TraceRecord& r);

// One row of the leaks view per leak flag: the credential whose placeholder was seen, the host it
// went to, where it was in the request, and what happened next: the response the guest got (451
// when blocked), whether the workspace is paused now, and whether a wipe is required (the
// compromised flag, with the command that clears it). `workspace` is an entry of ls --json.
nlohmann::json LeakRows(const nlohmann::json& workspace, const std::vector<proxy::TraceRecord>& recs);

// Serialises for the wire: compact, invalid UTF-8 replaced (never throws).
std::string Dump(const nlohmann::json& j);

}  // namespace cloister::ui

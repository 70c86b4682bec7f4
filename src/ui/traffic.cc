#include "ui/traffic.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

namespace cloister::ui {

TraceChunk ParseTraceLines(std::string_view text, uint64_t base_offset) {
  TraceChunk chunk;
  chunk.next_offset = base_offset;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) break;  // a line still being written: next time
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    chunk.next_offset = base_offset + pos;
    if (line.empty() || line.size() > kMaxTraceLineBytes) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    auto rec = proxy::TraceRecord::FromJson(j);
    if (rec.ok()) chunk.records.push_back(std::move(rec).value());
  }
  return chunk;
}

Result<TraceChunk> ReadTraceFrom(const std::string& path, uint64_t offset) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return TraceChunk{};
    return ErrnoError("open " + path, errno);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    close(fd);
    return Error(ErrorCode::kIo, "trace " + path + " is not a regular file" +
                                     (e ? std::string(": ") + strerror(e) : ""));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset > size) offset = 0;  // the file was replaced (wipe, rm + create)
  size_t want = static_cast<size_t>(std::min<uint64_t>(size - offset, kMaxTraceReadBytes));
  std::string buf(want, '\0');
  size_t got = 0;
  while (got < want) {
    ssize_t n = pread(fd, buf.data() + got, want - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  buf.resize(got);
  TraceChunk chunk = ParseTraceLines(buf, offset);
  // A single line longer than the read window would stall the tail: skip past it.
  if (chunk.next_offset == offset && got == kMaxTraceReadBytes) chunk.next_offset = offset + got;
  return chunk;
}

bool IsRefusal(const proxy::TraceRecord& r) {
  return r.blocked || (!r.error.empty() && r.abort.empty());
}

bool TrafficFilter::Matches(const proxy::TraceRecord& r) const {
  if (!host.empty() && r.host.find(host) == std::string::npos) return false;
  if (!method.empty() && r.method != method) return false;
  if (status && r.status != status) return false;
  if (status_class && r.status / 100 != status_class) return false;
  if (only == "leaks" && r.leaks.empty()) return false;
  if (only == "refused" && !IsRefusal(r)) return false;
  if (only == "aborted" && r.abort.empty()) return false;
  if (only == "swaps" && r.swaps.empty()) return false;
  return true;
}

Result<TrafficFilter> ParseTrafficFilter(const std::map<std::string, std::string>& query) {
  TrafficFilter f;
  auto bad = [](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, what,
                 "filters: host=TEXT method=GET status=2xx|404 only=leaks|refused|aborted|swaps "
                 "limit=N");
  };
  for (const auto& [k, v] : query) {
    if (k == "host") {
      f.host = v;
    } else if (k == "method") {
      for (char c : v) {
        if (c < 'A' || c > 'Z') return bad("method must be upper-case letters");
      }
      f.method = v;
    } else if (k == "status") {
      if (v.empty()) continue;
      if (v.size() == 3 && v[1] == 'x' && v[2] == 'x' && v[0] >= '1' && v[0] <= '5') {
        f.status_class = v[0] - '0';
        continue;
      }
      int code = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), code);
      if (ec != std::errc() || p != v.data() + v.size() || code < 100 || code > 599) {
        return bad("status must be 1xx..5xx or a code 100-599");
      }
      f.status = code;
    } else if (k == "only") {
      if (!v.empty() && v != "leaks" && v != "refused" && v != "aborted" && v != "swaps") {
        return bad("only must be leaks, refused, aborted or swaps");
      }
      f.only = v;
    } else if (k == "limit") {
      size_t n = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > kMaxTrafficRecords) {
        return bad("limit must be 1-" + std::to_string(kMaxTrafficRecords));
      }
      f.limit = n;
    } else if (k == "offset") {
      // read by the live route
    } else {
      return bad("unknown filter '" + k + "'");
    }
  }
  return f;
}

nlohmann::json RecordJson(const proxy::TraceRecord& r) {
  nlohmann::json j = r.ToJson();
  j["refused"] = IsRefusal(r);
  j["aborted"] = !r.abort.empty();
  return j;
}

nlohmann::json LeakRows(const nlohmann::json& ws, const std::vector<proxy::TraceRecord>& recs) {
  nlohmann::json rows = nlohmann::json::array();
  const std::string name = ws.value("name", "");
  const std::string state = ws.value("state", "");
  const bool compromised = ws.value("compromised", false);
  for (const proxy::TraceRecord& r : recs) {
    for (const proxy::LeakFlag& l : r.leaks) {
      nlohmann::json row = {{"workspace", name},
                            {"time", r.time_ms},
                            {"credential", l.credential},
                            {"host", r.host},
                            {"method", r.method},
                            {"path", r.path},
                            {"where", l.where},
                            {"encoding", l.encoding},
                            {"action", l.action},
                            {"status", r.status},
                            {"blocked", r.blocked},
                            {"paused", state == "paused"},
                            {"wipe_required", compromised}};
      std::string next;
      next = r.blocked ? "refused with " + std::to_string(r.status) : "sent, flagged";
      if (state == "paused") next += "; VM paused";
      if (compromised) {
        next += "; wipe required";
        row["fix"] = "cloister wipe " + name;
      }
      row["next"] = next;
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cloister::ui

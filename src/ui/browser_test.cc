// The dashboard in a real browser: Debian's chromium, headless, driven over the DevTools protocol
// (testdata/cdp.py, CDP over --remote-debugging-pipe) against `cloister ui`'s server and the CLI's
// backend on a real store (sparse workspaces, no VM). It checks that the list matches `ls --json`,
// that a trace line the proxy's writer appends shows up in the live traffic view, that a tripped
// placeholder is in the leaks view, that wipe asks with the CLI's text and then wipes, and that a
// page without the token, and a cross-site form post from another origin, are refused. It writes
// a screenshot of each view into $CLOISTER_BINARY_DIR/ui-screenshots/ (docs/ui/ holds the real
// run's, ui_vm_test.cc; CLOISTER_UI_SCREENSHOTS=0 skips them).
#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <thread>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "audit/report.h"
#include "base/pid_file.h"
#include "base/subprocess.h"
#include "cli/disposal_prompts.h"
#include "cli/testing.h"
#include "cli/ui_backend.h"
#include "proxy/trace.h"
#include "store/store.h"
#include "ui/cdp_browser.h"
#include "ui/fake_supervisor.h"
#include "ui/server.h"

namespace cloister::ui {
namespace {

using json = nlohmann::json;
using testing::Browser;

// An audit report as `cloister audit residue --json` prints it: a clean system disk and a home
// with foreign regions (the picture needs both).
json FixtureAudit() {
  audit::AuditReport r;
  for (int i = 0; i < 2; ++i) {
    audit::DiskReport d;
    d.device = i ? "/dev/vdb" : "/dev/vda";
    d.mountpoint = i ? "/home/dev" : "/";
    d.device_bytes = uint64_t{1} << 30;
    d.block_size = 4096;
    d.free_regions = 4000;
    d.probed_regions = 1024;
    d.bytes.probe = 1024 * 4096;
    d.bytes.zero = 1024 * 56 * 1024;
    d.bytes.base_image = i ? 0 : 1024 * 4 * 1024;
    if (i) {
      d.bytes.foreign = 3 * 60 * 1024;
      d.foreign_regions = {64 << 20, 300 << 20, 700 << 20};
    }
    r.disks.push_back(d);
  }
  return audit::ReportToJson(r);
}

class BrowserTest : public cli::testing::SparseBaseTest {};

TEST_F(BrowserTest, DashboardInChromium) {
  if (!ProgramExists("chromium")) GTEST_SKIP() << "no chromium (scripts/install-deps.sh test)";
  ASSERT_EQ(Create("alpha").code, 0);
  ASSERT_EQ(Create("beta").code, 0);
  ASSERT_EQ(Run({"checkpoint", "create", "alpha"}).code, 0);
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  const std::string trace = (*store)->Paths("alpha").trace_log;

  // The proxy's own trace writer: a swap, a refusal, a tripped placeholder (blocked with 451), and
  // a guest-chosen host that is markup.
  auto sink = proxy::TraceSink::Open(trace);
  ASSERT_TRUE(sink.ok());
  auto rec = [](std::string host, std::string method, int status) {
    proxy::TraceRecord r;
    r.time_ms = 1764590000000;
    r.host = std::move(host);
    r.method = std::move(method);
    r.path = "/v1/messages";
    r.status = status;
    r.bytes_up = 812;
    r.bytes_down = 20480;
    return r;
  };
  proxy::TraceRecord ok = rec("api.anthropic.com", "POST", 200);
  ok.swaps = {"anthropic"};
  (*sink)->Write(ok);
  proxy::TraceRecord refused = rec("pypi.example.org", "GET", 403);
  refused.error = "egress policy: pypi.example.org is not in the allow list";
  (*sink)->Write(refused);
  proxy::TraceRecord leak = rec("collector.evil.example", "POST", 451);
  leak.blocked = true;
  leak.leaks = {{"anthropic", "header:x-api-key", "raw", "blocked"}};
  (*sink)->Write(leak);
  (*sink)->Write(rec("<img src=x id=pwned onerror=alert(1)>.example", "GET", 200));
  ASSERT_TRUE((*store)->MarkCompromised("alpha", "placeholder of anthropic sent to "
                                                 "collector.evil.example").ok());

  // A running workspace's control socket with one consent question (the supervisor's side of
  // supervisor/consent.h); alpha is not really running, so the backend is told where it is.
  testing::FakeSupervisor sup(
      {R"({"ok":true,"workspace":"alpha","grants":["request","5m","1h","vm","deny"]})",
       R"({"op":"consent","id":3,"kind":"cred","workspace":"alpha","cred":"github",)"
       R"("host":"api.github.com","method":"GET","path":"/user/repos","ask":"once",)"
       R"("grants":["request","5m","1h","vm","deny"],"timeout_s":60})"});
  cli::UiBackendOptions bo;
  bo.store_root = store_;
  bo.run_audit = [](const std::string&) -> Result<json> { return FixtureAudit(); };
  bo.control_sockets = [&sup] { return std::map<std::string, std::string>{{"alpha", sup.path()}}; };
  auto backend = cli::MakeUiBackend(bo);
  auto server = Server::Start(*backend, ServerOptions{});
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  const std::string base =
      "http://" + (*server)->host_name() + ":" + std::to_string((*server)->port());

  Browser b;
  ASSERT_TRUE(b.Start(testing::CdpScript())) << "chromium did not start under the CDP driver";
  // Fake data: screenshots into the build tree; docs/ui/ holds the real run's (ui_vm_test.cc).
  b.ShotsTo(std::string(std::getenv("CLOISTER_BINARY_DIR")) + "/ui-screenshots");

  // 1. Without the token: refused, nothing of the page.
  b.Go(base + "/");
  b.Wait("document.readyState === 'complete' && document.body !== null");
  std::string text = b.Eval("document.body.innerText");
  EXPECT_NE(text.find("no session"), std::string::npos) << text;
  EXPECT_EQ(b.Eval("document.querySelector('#view')"), json()) << "the page was served";

  // 2. With it: the workspaces view, which matches `ls --json`.
  b.Go((*server)->Url());
  b.Wait("document.querySelectorAll('#workspaces tbody tr').length === 2");
  EXPECT_EQ(b.Eval("location.href"), base + "/") << "the token is dropped from the address";
  json rows = b.Eval(
      "[...document.querySelectorAll('#workspaces tbody tr')].map(r => ({name: r.dataset.name,"
      " state: r.querySelector('.c-state').textContent,"
      " image: r.querySelector('.c-image').textContent,"
      " checkpoints: Number(r.querySelector('.c-checkpoints').textContent),"
      " compromised: r.querySelector('.c-compromised').textContent !== 'no'}))");
  json ls = Run({"ls", "--json"}).json();
  ASSERT_TRUE(ls.is_array());
  ASSERT_EQ(rows.size(), ls.size()) << rows.dump();
  for (size_t i = 0; i < ls.size(); ++i) {
    EXPECT_EQ(rows[i]["name"], ls[i]["name"]);
    EXPECT_EQ(rows[i]["state"], ls[i]["state"]);
    EXPECT_EQ(rows[i]["image"], ls[i]["image"]);
    EXPECT_EQ(rows[i]["checkpoints"], ls[i]["checkpoints"]);
    EXPECT_EQ(rows[i]["compromised"], ls[i]["compromised"]);
  }
  b.Shot("workspaces.png");

  // 3. One workspace: disks, checkpoints, the compromised flag with its fix.
  b.Go(base + "/#/ws/alpha");
  b.Wait("document.querySelectorAll('#checkpoints tbody tr').length === 1");
  EXPECT_NE(b.Eval("document.querySelector('#compromised').textContent").get<std::string>().find(
                "cloister wipe alpha"),
            std::string::npos);
  b.Shot("workspace.png");

  // 4. Traffic, live: a line the proxy's writer appends now appears without a reload.
  b.Go(base + "/#/traffic/alpha");
  b.Wait("document.querySelectorAll('#traffic tbody tr').length === 4");
  // The markup host is text, not an element (textContent only; the CSP would stop the script).
  EXPECT_EQ(b.Eval("document.getElementById('pwned')"), json());
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('#traffic .c-host')].some(td => "
                   "td.textContent.startsWith('<img'))"),
            true);
  proxy::TraceRecord live = rec("live.example.test", "GET", 204);
  live.time_ms = 1764590060000;
  (*sink)->Write(live);
  b.Wait("document.querySelector('#traffic tr[data-host=\"live.example.test\"]') !== null");
  EXPECT_EQ(b.Eval("document.querySelectorAll('#traffic tbody tr').length"), 5);
  EXPECT_EQ(b.Eval("document.getElementById('traffic-count').textContent"), "5 requests");
  b.Shot("traffic.png");
  // Filtered: refusals only, with their reason.
  b.Eval("(() => { const s = document.getElementById('f-only'); s.value = 'refused';"
         " s.dispatchEvent(new Event('change')); return true; })()");
  b.Wait("document.getElementById('f-only') && document.getElementById('f-only').value === "
         "'refused' && document.querySelectorAll('#traffic tbody tr').length === 2");
  std::string notes = b.Eval("[...document.querySelectorAll('#traffic .c-notes')].map(t => "
                             "t.textContent).join('|')");
  EXPECT_NE(notes.find("egress policy: pypi.example.org is not in the allow list"),
            std::string::npos) << notes;
  b.Shot("traffic-refused.png");

  // 5. Leaks: which credential, to which host, and what happened next.
  b.Go(base + "/#/leaks");
  b.Wait("document.querySelector('#leaks tr[data-credential=\"anthropic\"]') !== null");
  json leakrow = b.Eval(
      "(() => { const r = document.querySelector('#leaks tr[data-credential=\"anthropic\"]');"
      " return {host: r.querySelector('.c-host').textContent,"
      " next: r.querySelector('.c-next').textContent}; })()");
  EXPECT_EQ(leakrow["host"], "collector.evil.example");
  EXPECT_EQ(leakrow["next"], "refused with 451; wipe required");
  b.Shot("leaks.png");

  // 6. The residue audit's picture per disk.
  b.Go(base + "/#/audit/alpha");
  b.Wait("document.getElementById('run-audit') !== null");
  b.Eval("document.getElementById('run-audit').click(), true");
  b.Wait("document.querySelectorAll('#audit .disk').length === 2");
  EXPECT_EQ(b.Eval("document.querySelectorAll('#audit .disk[data-device=\"/dev/vdb\"] .mark').length"),
            3);
  b.Shot("audit.png");
  EXPECT_EQ(b.Eval("document.getElementById('status').textContent"), "audit of alpha done");

  // 6b. Consent: the pending question with its grant buttons; "5 minutes" answers it.
  b.Go(base + "/#/consent");
  b.Wait("document.querySelector('#consent .question[data-id=\"3\"]') !== null");
  // Another view: the audit's result is not shown as if it were this view's.
  EXPECT_EQ(b.Eval("document.getElementById('status').textContent"), "");
  EXPECT_EQ(b.Eval("document.querySelector('.question .c-request').textContent"),
            "GET api.github.com/user/repos");
  EXPECT_EQ(b.Eval("[...document.querySelectorAll('.question button')].map(x => x.dataset.grant)"),
            json({"request", "5m", "1h", "vm", "deny"}));
  b.Shot("consent.png");
  b.Eval("document.querySelector('.question button[data-grant=\"5m\"]').click(), true");
  b.Wait("document.getElementById('no-consent') !== null");
  EXPECT_EQ(json::parse(sup.Join()), json({{"id", 3}, {"grant", "5m"}}));

  // 7. A cross-site no-CORS fetch and form post from another origin (a page on another loopback
  // port: the same site, so the browser does send the cookie; only the server's checks stand in
  // the way). The fetch's body is exactly what rm needs.
  std::string evil =
      "<form id=f method=post enctype=text/plain action=\"" + base +
      "/api/workspaces/beta/actions/rm\"><input name='{\"confirm\":true,\"x\":\"' value='\"}'>"
      "</form><script>fetch('" + base + "/api/workspaces/beta/actions/rm', {method: 'POST', "
      "mode: 'no-cors', credentials: 'include', body: '{\"confirm\":true}'})"
      ".finally(() => document.getElementById('f').submit())</script>";
  json served = b.Call({{"op", "serve"}, {"html", evil}});
  ASSERT_TRUE(served["ok"]);
  b.Go("http://127.0.0.1:" + std::to_string(served["port"].get<int>()) + "/");
  b.Wait("location.href.startsWith('" + base + "') && document.readyState === 'complete'");
  text = b.Eval("document.body.innerText");
  EXPECT_NE(text.find("refused"), std::string::npos) << text;
  EXPECT_EQ(Run({"describe", "beta", "--json"}).code, 0) << "the cross-site post removed beta";

  // 8. Wipe through the page: it asks with the CLI's text, cancel keeps everything, yes wipes.
  b.Go(base + "/#/ws/alpha");
  b.Wait("document.querySelector('#view button[data-action=\"wipe\"]') !== null");
  b.Eval("document.querySelector('#view button[data-action=\"wipe\"]').click(), true");
  b.Wait("!document.getElementById('confirm').hidden");
  auto config = (*store)->LoadConfig("alpha");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(b.Eval("document.getElementById('confirm-text').textContent"),
            cli::WipePrompt(*config));
  b.Shot("confirm-wipe.png");
  b.Eval("document.getElementById('confirm-no').click(), true");
  b.Wait("document.getElementById('status').textContent.includes('cancelled')");
  EXPECT_TRUE(Run({"describe", "alpha", "--json"}).json()["compromised"].get<bool>());
  b.Eval("document.querySelector('#view button[data-action=\"wipe\"]').click(), true");
  b.Wait("!document.getElementById('confirm').hidden");
  b.Eval("document.getElementById('confirm-yes').click(), true");
  b.Wait("document.getElementById('status').textContent.startsWith('Wiped')", 120);
  json after = Run({"describe", "alpha", "--json"}).json();
  EXPECT_FALSE(after["compromised"].get<bool>()) << after.dump();
  EXPECT_TRUE(after["checkpoints"].empty()) << after.dump();
}

// The consent desk's default source of sockets: only workspaces whose supervisor is alive (it holds
// its pid file's lock), found without `ls`. A child process plays the supervisor's lock.
TEST_F(BrowserTest, ControlSocketsAreThoseOfLiveSupervisorsOnly) {
  ASSERT_EQ(Create("alpha").code, 0);
  ASSERT_EQ(Create("beta").code, 0);
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  cli::UiBackendOptions bo;
  bo.store_root = store_;
  auto backend = cli::MakeUiBackend(bo);
  EXPECT_TRUE(backend->ControlSockets().empty()) << "nothing runs yet";
  const std::string run = (*store)->Paths("alpha").dir + "/run";
  ASSERT_EQ(RunProcess({"mkdir", "-p", run})->exit_code, 0);
  // A stale pid file (no lock held) is not a live supervisor.
  { std::ofstream(run + "/supervisor.pid") << getpid() << "\n"; }
  EXPECT_TRUE(backend->ControlSockets().empty()) << "a stale pid file counted as running";
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  pid_t child = fork();
  if (child == 0) {
    auto fd = ClaimPidFile(run + "/supervisor.pid");
    char c = fd.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(c, 'y');
  auto live = backend->ControlSockets();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(live, (std::map<std::string, std::string>{{"alpha", run + "/supervisor.sock"}}));
  EXPECT_TRUE(backend->ControlSockets().empty()) << "the supervisor is gone";
}

// The verb itself: `cloister ui --json` prints a URL on 127.0.0.1 with a token, serves it (the
// token buys the cookie, a missing one gets 401), and exits 0 on SIGTERM.
TEST_F(BrowserTest, UiVerbPrintsUrlServesAndStops) {
  ASSERT_EQ(Create("alpha").code, 0);
  std::string exe = std::string(std::getenv("CLOISTER_BINARY_DIR")) + "/src/cli/cloister";
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    execl(exe.c_str(), exe.c_str(), "--store", store_.c_str(), "ui", "--json", nullptr);
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  char* line = nullptr;
  size_t cap = 0;
  ssize_t n = getline(&line, &cap, f);
  std::string first = n > 0 ? std::string(line, n) : "";
  free(line);
  json j = json::parse(first, nullptr, false);
  ASSERT_TRUE(j.is_object()) << first;
  std::string url = j["url"];
  // http://<32 hex>.localhost:PORT/?token=<64 hex>: the per-run name, a 32-byte token.
  size_t name_end = url.find(".localhost:");
  ASSERT_EQ(url.rfind("http://", 0), 0u) << url;
  ASSERT_EQ(name_end, 7u + 32) << url;
  std::string prefix = url.substr(0, name_end) + ".localhost:" +
                       std::to_string(j["port"].get<int>()) + "/?token=";
  ASSERT_EQ(url.rfind(prefix, 0), 0u) << url;
  EXPECT_EQ(url.size(), prefix.size() + 64) << "a 32-byte token";
  auto curl = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"});
    auto r = RunProcess(args);
    return r.ok() ? r->out : std::string("curl failed");
  };
  std::string root = url.substr(0, url.find("/?token="));
  EXPECT_EQ(curl({root + "/api/workspaces"}), "401");
  EXPECT_EQ(curl({url}), "303");
  EXPECT_EQ(curl({url}), "403") << "the token bought a second session";
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  fclose(f);
}

// SECURITY (issue 37 item 2): `cloister ui --open` hands xdg-open a path, never the token (every
// local user reads a process's argv); the file it names is the user's alone and redirects to the
// URL, and it is gone once the token bought its session. xdg-open here is a stand-in that records
// what it was given, as the desktop's would receive it.
TEST_F(BrowserTest, UiOpenHandsTheBrowserAFileNotTheToken) {
  std::string bin = dir_ + "/bin";
  std::filesystem::create_directories(bin);
  {
    std::ofstream x(bin + "/xdg-open");
    x << "#!/bin/sh\nprintf '%s\\n' \"$@\" > " << dir_ << "/argv.tmp\n"
      << "stat -c %a \"$1\" > " << dir_ << "/mode\ncat \"$1\" > " << dir_ << "/page\n"
      << "mv " << dir_ << "/argv.tmp " << dir_ << "/argv\n";
  }
  chmod((bin + "/xdg-open").c_str(), 0755);
  std::string exe = std::string(std::getenv("CLOISTER_BINARY_DIR")) + "/src/cli/cloister";
  std::string path = bin + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    setenv("PATH", path.c_str(), 1);
    unsetenv("XDG_RUNTIME_DIR");
    execl(exe.c_str(), exe.c_str(), "--store", store_.c_str(), "ui", "--json", "--open", nullptr);
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  char* line = nullptr;
  size_t cap = 0;
  ssize_t n = getline(&line, &cap, f);
  std::string first = n > 0 ? std::string(line, n) : "";
  free(line);
  json j = json::parse(first, nullptr, false);
  ASSERT_TRUE(j.is_object()) << first;
  const std::string url = j["url"];
  const std::string token = url.substr(url.find("token=") + 6);
  ASSERT_EQ(token.size(), 64u);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(dir_ + "/argv") && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, bounded
  }
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/argv")) << "xdg-open was not run";
  std::ifstream argv_in(dir_ + "/argv");
  std::string argv((std::istreambuf_iterator<char>(argv_in)), {});
  EXPECT_EQ(argv.find(token), std::string::npos) << "the token is in xdg-open's argv: " << argv;
  EXPECT_EQ(argv.rfind("/", 0), 0u) << "xdg-open was not given a file: " << argv;
  std::ifstream mode_in(dir_ + "/mode"), page_in(dir_ + "/page");
  std::string mode((std::istreambuf_iterator<char>(mode_in)), {});
  std::string page((std::istreambuf_iterator<char>(page_in)), {});
  EXPECT_EQ(mode, "600\n");
  EXPECT_NE(page.find("url=" + url), std::string::npos) << page;
  std::string file = argv.substr(0, argv.find('\n'));
  auto curl = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"});
    auto r = RunProcess(args);
    return r.ok() ? r->out : std::string("curl failed");
  };
  EXPECT_EQ(curl({url}), "303");
  EXPECT_FALSE(std::filesystem::exists(file)) << "the page outlived the token's one use";
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  fclose(f);
}

}  // namespace
}  // namespace cloister::ui

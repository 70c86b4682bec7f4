// The browser VM's host side without a VM (supervisor/browser_vm.h): the lifecycle check of a
// start, the option bounds, the crash cleanup of `<store>/tmp/browser-*`, the browser VM's
// metadata config (no placeholder, no home, one forward) and the only two services its channel
// offers; the workspace's browser settings (config --browser-autostart) and the automatic start's
// gate: one start at a time, a back-off after a failure, bounded waiting streams. The VM itself is
// browser_vm_test's VM half (browser_vm_vm_test.cc).
#include "supervisor/browser_vm.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>

#include "supervisor/state.h"
#include "supervisor/testing_mux.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using lifecycle::State;

class TempRoot {
 public:
  TempRoot() {
    char t[] = "/tmp/cloister-browser-XXXXXX";
    path_ = mkdtemp(t);
  }
  ~TempRoot() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(BrowserVmTest, AStartNeedsARunningWorkspace) {
  EXPECT_TRUE(BrowserStartCheck(State::kRunning, "ws").ok());
  for (State s : {State::kStopped, State::kBooting, State::kPaused, State::kStopping,
                  State::kSuspending, State::kSuspended, State::kRebooting, State::kBroken,
                  State::kCompromised}) {
    Status st = BrowserStartCheck(s, "ws", "why");
    ASSERT_FALSE(st.ok()) << lifecycle::StateName(s);
    EXPECT_FALSE(st.error().hint().empty()) << lifecycle::StateName(s);
  }
  Status stopped = BrowserStartCheck(State::kStopped, "ws");
  EXPECT_NE(stopped.error().hint().find("cloister start ws"), std::string::npos)
      << stopped.error().hint();
  Status booting = BrowserStartCheck(State::kBooting, "ws");
  EXPECT_NE(booting.error().message().find("booting"), std::string::npos)
      << booting.error().message();
}

TEST(BrowserVmTest, OptionsAreBounded) {
  EXPECT_TRUE(ValidateBrowserStartOptions({"/images/browser/disk.raw", 1024, 1}).ok());
  EXPECT_FALSE(ValidateBrowserStartOptions({"", 1024, 1}).ok());
  EXPECT_FALSE(ValidateBrowserStartOptions({"disk.raw", 1024, 1}).ok());
  EXPECT_FALSE(ValidateBrowserStartOptions({"/d", 128, 1}).ok());
  EXPECT_FALSE(ValidateBrowserStartOptions({"/d", 1 << 20, 1}).ok());
  EXPECT_FALSE(ValidateBrowserStartOptions({"/d", 1024, 0}).ok());
  EXPECT_FALSE(ValidateBrowserStartOptions({"/d", 1024, 17}).ok());
  Status st = ValidateBrowserStartOptions({"/d", 64, 1});
  EXPECT_NE(st.error().hint().find("--memory"), std::string::npos);
}

// A crash leaves `<store>/tmp/browser-<ws>-XXXXXX/`: the next command deletes it unless its owner
// lock is held (a live supervisor's browser VM), and never follows a symlink out of the store.
TEST(BrowserVmTest, StaleDirectoriesGoLiveOnesStay) {
  TempRoot root;
  std::string tmp = StoreTmpDir(root.path());
  ASSERT_EQ(tmp, root.path() + "/tmp");
  fs::create_directories(tmp);
  auto make = [&](const std::string& name) {
    std::string d = tmp + "/" + name;
    fs::create_directories(d);
    std::ofstream(d + "/disk.qcow2") << "overlay";
    return d;
  };
  // Dead: an owner file nobody holds (the supervisor was killed).
  std::string dead = make("browser-ws-aaaaaa");
  std::ofstream(dead + "/" + kBrowserOwnerFile) << "12345\n";
  // Live: the owner lock is held (by us, as the supervisor would).
  std::string live = make("browser-ws-bbbbbb");
  auto held = ClaimPidFile(live + "/" + kBrowserOwnerFile);
  ASSERT_TRUE(held.ok()) << held.error().ToString();
  // No owner file yet, fresh: a start is making it. Old: a crash before the lock.
  std::string fresh = make("browser-ws-cccccc");
  std::string old = make("browser-ws-dddddd");
  struct utimbuf t{std::time(nullptr) - 3600, std::time(nullptr) - 3600};
  ASSERT_EQ(utime(old.c_str(), &t), 0);
  // Not ours: another prefix, and a symlink named like ours pointing outside.
  std::string other = make("staging-x");
  std::string outside = root.path() + "/outside";
  fs::create_directories(outside);
  std::ofstream(outside + "/keep") << "keep";
  fs::create_symlink(outside, tmp + "/browser-ws-eeeeee");

  std::vector<std::string> removed = CollectStaleBrowserDirs(root.path());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_TRUE(fs::exists(live + "/disk.qcow2"));
  EXPECT_TRUE(fs::exists(fresh + "/disk.qcow2"));
  EXPECT_TRUE(fs::exists(other + "/disk.qcow2"));
  EXPECT_TRUE(fs::exists(outside + "/keep"));
  EXPECT_EQ(removed.size(), 2u);

  // Once the supervisor is gone (its lock released), the live one goes too.
  close(*held);
  removed = CollectStaleBrowserDirs(root.path());
  EXPECT_FALSE(fs::exists(live));
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], live);
  // A store without tmp/ is fine.
  TempRoot empty;
  EXPECT_TRUE(CollectStaleBrowserDirs(empty.path()).empty());
}

TEST(BrowserVmTest, MetadataHasTheBrowserKeyNoHomeNoPlaceholdersAndOnlyTheProxyForward) {
  GuestSetup guest;
  guest.env = ProxyEnvironment();
  guest.env["ANTHROPIC_API_KEY"] = "cloister-placeholder-anthropic-0123";
  guest.env["SSH_AUTH_SOCK"] = kGuestAgentSocket;
  guest.files.push_back({"/home/dev/.git-credentials", "https://x:cloister-placeholder-gh@github.com",
                         0600, "dev"});
  guest.ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  MetaConfig meta = BrowserMetaConfig("ws", "0123456789abcdef0123456789abcdef", guest,
                                      {{"/usr/local/bin/chromium", "#!/bin/sh\n", 0755, "root"}});
  nlohmann::json j = MetaConfigJson(meta);
  ASSERT_TRUE(j.contains("browser")) << j.dump();
  EXPECT_EQ(j["browser"]["cdp_port"], 9222);
  EXPECT_EQ(j["browser"]["profile_device"], "");
  EXPECT_EQ(j["home_device"], "");
  EXPECT_EQ(j["ca_certificate"], guest.ca_pem);
  EXPECT_EQ(j["env"]["HTTPS_PROXY"], kGuestProxyUrl);
  std::string dump = j.dump();
  // SECURITY: nothing of the workspace's credentials or SSH agent reaches the browser VM.
  EXPECT_EQ(dump.find("placeholder"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("SSH_AUTH_SOCK"), std::string::npos) << dump;
  ASSERT_TRUE(j["forwards"].is_array());
  ASSERT_EQ(j["forwards"].size(), 1u) << j["forwards"].dump();
  EXPECT_EQ(j["forwards"][0]["service"], "proxy");
  EXPECT_EQ(j["forwards"][0]["listen"], protocol::kGuestProxyListen);
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files"][0]["path"], "/usr/local/bin/chromium");
  EXPECT_TRUE(j["transparent"].is_object());  // its egress goes to the host like a workspace's

  // A workspace's config has no browser key and keeps its home.
  MetaConfig ws;
  nlohmann::json wj = MetaConfigJson(ws);
  EXPECT_FALSE(wj.contains("browser"));
  EXPECT_EQ(wj["home_device"], protocol::kHomeDevice);
}

// SECURITY: the browser VM's guest may open `proxy` and `egress` and nothing else: not the SSH
// agent, not `cdp` (no path back to the workspace), not a host-opened name.
TEST(BrowserVmTest, TheBrowserChannelOffersOnlyProxyAndEgress) {
  auto [host, guest] = testing::MuxPair();
  ASSERT_TRUE(host && guest);
  std::mutex mu;
  std::vector<std::string> served;
  auto handler = [&](const std::string& name) {
    return [&mu, &served, name](int fd, const std::vector<std::string>&) {
      {
        std::lock_guard<std::mutex> l(mu);
        served.push_back(name);
      }
      (void)!write(fd, "ok", 2);
      close(fd);
    };
  };
  RegisterBrowserServices(*host, handler("proxy"), handler("egress"));
  ASSERT_TRUE(host->Start().ok());
  ASSERT_TRUE(guest->Start().ok());
  for (const char* name : {"proxy", "egress"}) {
    auto fd = guest->Open(name, {}, std::chrono::seconds(20));
    ASSERT_TRUE(fd.ok()) << name << ": " << fd.error().ToString();
    char buf[2];
    EXPECT_EQ(read(*fd, buf, 2), 2) << name;
    close(*fd);
  }
  for (const char* name : {"ssh-agent", "cdp", "ports-report", "exec", "tcp", "sshd", ""}) {
    auto fd = guest->Open(name, {}, std::chrono::seconds(20));
    EXPECT_FALSE(fd.ok()) << "the browser VM opened '" << name << "'";
    if (fd.ok()) close(*fd);
  }
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(served, (std::vector<std::string>{"proxy", "egress"}));
}

TEST(BrowserVmTest, WithoutABrowserVmACdpConnectionIsClosedAndStatusSaysStopped) {
  BrowserVm::Options o;
  o.store_root = "/nonexistent";
  o.workspace = "ws";
  BrowserVm browser(o);
  EXPECT_EQ(browser.StatusJson()["state"], "stopped");
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  browser.ConnectCdp(sv[0]);  // takes ownership: closed
  char c;
  EXPECT_EQ(read(sv[1], &c, 1), 0);
  close(sv[1]);
  EXPECT_TRUE(browser.Stop().ok());
  // A start without the workspace's proxy, or with bad options, refuses before any I/O.
  auto no_proxy = browser.Start({"/nonexistent/disk.raw", 1024, 1}, nullptr);
  EXPECT_FALSE(no_proxy.ok());
  EXPECT_FALSE(fs::exists("/nonexistent"));
}

TEST(BrowserSettingsTest, AutostartValuesParseAndRoundTripThroughTheConfig) {
  struct Case {
    const char* value;
    BrowserSettings want;
  };
  for (const Case& c : {Case{"off", {false, false}}, Case{"on", {true, false}},
                        Case{"keep-profile", {true, true}}}) {
    auto got = ParseAutostartValue(c.value);
    ASSERT_TRUE(got.ok()) << c.value;
    EXPECT_EQ(*got, c.want) << c.value;
    EXPECT_EQ(AutostartValue(*got), c.value);
    WorkspaceConfig config;
    ASSERT_TRUE(PutBrowserSettings(config, *got).ok());
    auto loaded = BrowserSettingsFromConfig(config);
    ASSERT_TRUE(loaded.ok()) << loaded.error().ToString();
    EXPECT_EQ(*loaded, c.want) << config.extra.dump();
  }
  for (const char* bad : {"", "yes", "ON", "true", "keep_profile", "on "}) {
    auto got = ParseAutostartValue(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_NE(got.error().hint().find("keep-profile"), std::string::npos) << bad;
  }
}

TEST(BrowserSettingsTest, AbsentIsOffAndAMalformedKeyIsAnError) {
  WorkspaceConfig config;
  auto none = BrowserSettingsFromConfig(config);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->autostart);
  EXPECT_FALSE(none->keep_profile);
  for (const char* bad : {R"([])", R"("on")", R"({"autostart":"on"})", R"({"autostart":1})",
                          R"({"keep_profile":null})", R"({"autostart":true,"image":"/x"})"}) {
    config.extra = nlohmann::json::object();
    config.extra["browser"] = nlohmann::json::parse(bad);
    auto got = BrowserSettingsFromConfig(config);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_NE(got.error().hint().find("--browser-autostart off"), std::string::npos) << bad;
  }
}

using GateClock = AutostartGate::Clock;

TEST(AutostartGateTest, OneStartAtATimeHoweverManyConnections) {
  AutostartGate gate;
  GateClock::time_point now = GateClock::now();
  EXPECT_EQ(gate.OnConnection(now), AutostartGate::Decision::kStart);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(gate.OnConnection(now), AutostartGate::Decision::kWait) << i;
  }
  gate.Finish(/*ok=*/true, now);
  EXPECT_FALSE(gate.in_flight());
  // The VM runs now; should it go, the next connection may start one again at once.
  EXPECT_EQ(gate.OnConnection(now), AutostartGate::Decision::kStart);
}

TEST(AutostartGateTest, AFailedStartIsRetriedOnlyAfterAGrowingBackoff) {
  AutostartGate gate;
  GateClock::time_point t = GateClock::now();
  std::chrono::seconds want = kAutostartFirstBackoff;
  for (int failure = 1; failure <= 10; ++failure) {
    ASSERT_EQ(gate.OnConnection(t), AutostartGate::Decision::kStart) << failure;
    gate.Finish(/*ok=*/false, t);
    EXPECT_EQ(gate.failures(), failure);
    EXPECT_EQ(gate.retry_at(), t + want) << failure;
    // Every connection inside the back-off is refused, up to its last instant.
    EXPECT_EQ(gate.OnConnection(t), AutostartGate::Decision::kRefuse);
    EXPECT_EQ(gate.OnConnection(t + want - std::chrono::milliseconds(1)),
              AutostartGate::Decision::kRefuse);
    EXPECT_FALSE(gate.in_flight());
    t += want;
    want = std::min(want * 2, kAutostartMaxBackoff);
  }
  EXPECT_EQ(gate.retry_at() - (t - kAutostartMaxBackoff), kAutostartMaxBackoff);
  // A success resets it.
  ASSERT_EQ(gate.OnConnection(t), AutostartGate::Decision::kStart);
  gate.Finish(/*ok=*/true, t);
  EXPECT_EQ(gate.failures(), 0);
  ASSERT_EQ(gate.OnConnection(t), AutostartGate::Decision::kStart);
  gate.Finish(/*ok=*/false, t);
  EXPECT_EQ(gate.retry_at(), t + kAutostartFirstBackoff);
}

// A connected pair: the first end goes to ConnectCdp, the test keeps the second.
std::pair<int, int> Pair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {-1, -1};
  return {sv[0], sv[1]};
}

TEST(BrowserVmAutostartTest, OffAConnectionIsClosedAndNothingStarts) {
  std::atomic<int> plans{0};
  BrowserVm::Options o;
  o.store_root = "/nonexistent";
  o.workspace = "ws";
  o.autostart_enabled = [] { return false; };
  o.autostart = [&]() -> Result<BrowserVm::Options::AutostartPlan> {
    ++plans;
    return Error(ErrorCode::kUnavailable, "not reached");
  };
  std::vector<std::string> log;
  std::mutex log_mu;
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> g(log_mu);
    log.push_back(l);
  };
  BrowserVm browser(o);
  for (int i = 0; i < 5; ++i) {
    auto [mine, theirs] = Pair();
    ASSERT_GE(mine, 0);
    browser.ConnectCdp(mine);
    char c;
    EXPECT_EQ(read(theirs, &c, 1), 0) << "the stream was not closed";
    close(theirs);
  }
  browser.Shutdown();
  EXPECT_EQ(plans.load(), 0);
  EXPECT_EQ(browser.autostarts(), 0u);
  std::lock_guard<std::mutex> g(log_mu);
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log.back().find("--browser-autostart on"), std::string::npos) << log.back();
}

TEST(BrowserVmAutostartTest, ManyConnectionsCauseOneStartAndAFailureIsNotRetriedAtOnce) {
  std::atomic<int> plans{0};
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  BrowserVm::Options o;
  o.store_root = "/nonexistent";
  o.workspace = "ws";
  o.autostart_enabled = [] { return true; };
  o.autostart = [&]() -> Result<BrowserVm::Options::AutostartPlan> {
    if (++plans == 1) {
      entered.set_value();
      // The start "runs" until the test lets it fail (bounded, so that a broken gate, which
      // would start again and wait for this thread, ends in a failed expectation, not a hang).
      released.wait_for(std::chrono::seconds(10));
    }
    return Error(ErrorCode::kNotFound, "no browser image");
  };
  BrowserVm browser(o);
  // SECURITY: a hostile guest opens many streams while no browser VM runs.
  std::vector<int> theirs;
  for (int i = 0; i < 40; ++i) {
    auto [mine, other] = Pair();
    ASSERT_GE(mine, 0);
    browser.ConnectCdp(mine);
    theirs.push_back(other);
  }
  entered.get_future().wait();
  EXPECT_EQ(browser.autostarts(), 1u);
  // The first kMaxPendingCdp wait (open); the rest were closed at once.
  size_t closed_now = 0;
  for (int fd : theirs) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 1) ++closed_now;
  }
  EXPECT_EQ(closed_now, theirs.size() - kMaxPendingCdp);
  release.set_value();
  // The failed start closes the waiting streams.
  for (int fd : theirs) {
    char c;
    EXPECT_EQ(read(fd, &c, 1), 0);
    close(fd);
  }
  // Within the back-off, more connections start nothing.
  for (int i = 0; i < 20; ++i) {
    auto [mine, other] = Pair();
    ASSERT_GE(mine, 0);
    browser.ConnectCdp(mine);
    char c;
    EXPECT_EQ(read(other, &c, 1), 0);
    close(other);
  }
  browser.Shutdown();
  EXPECT_EQ(plans.load(), 1);
  EXPECT_EQ(browser.autostarts(), 1u);
}

}  // namespace
}  // namespace cloister::vm

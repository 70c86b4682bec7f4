// The browser role's config parsing, Chromium's command line and the supervisor (with a fake
// `chromium` on PATH and an injected mount): DevTools on loopback only, the profile's mount fails
// closed, restarts are bounded.
#include "guest/browser.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <gtest/gtest.h>

#include "guest/config.h"

namespace cloister::guest {
namespace {

namespace fs = std::filesystem;

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(BrowserConfigTest, ParsesTheBrowserKeyAndAnEmptyHomeDevice) {
  auto c = ParseAgentConfig(
      R"({"version":1,"home_device":"","browser":{"cdp_port":9333,"profile_device":"/dev/vdb"}})");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->browser.enabled);
  EXPECT_EQ(c->browser.cdp_port, 9333);
  EXPECT_EQ(c->browser.profile_device, "/dev/vdb");
  EXPECT_EQ(c->home_device, "");

  auto tmpfs = ParseAgentConfig(R"({"browser":{"cdp_port":9222,"profile_device":""}})");
  ASSERT_TRUE(tmpfs.ok());
  EXPECT_TRUE(tmpfs->browser.enabled);
  EXPECT_EQ(tmpfs->browser.profile_device, "");

  auto none = ParseAgentConfig(R"({"version":1})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->browser.enabled);
  EXPECT_EQ(none->browser.cdp_port, protocol::kBrowserCdpPort);
}

TEST(BrowserConfigTest, RejectsBadPortsAndDevices) {
  for (const char* bad : {
           R"({"browser":[]})",
           R"({"browser":{"cdp_port":0}})",
           R"({"browser":{"cdp_port":65536}})",
           R"({"browser":{"cdp_port":"9222"}})",
           R"({"browser":{"profile_device":7}})",
           R"({"browser":{"profile_device":"vdb"}})",
           R"({"browser":{"profile_device":"/dev/"}})",
           R"({"browser":{"profile_device":"/dev/../etc/shadow"}})",
           R"({"browser":{"profile_device":"/dev/vdb --flag"}})",
           R"({"browser":{"profile_device":"/tmp/profile.img"}})",
       }) {
    auto c = ParseAgentConfig(bad);
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_NE(c.error().message().find("browser"), std::string::npos) << bad;
    }
  }
}

TEST(BrowserConfigTest, AcceptsAProfileDiskSerial) {
  auto c = ParseAgentConfig(R"({"browser":{"profile_device":"serial:cloister-profile"}})");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->browser.profile_device, "serial:cloister-profile");
  for (const char* bad : {R"({"browser":{"profile_device":"serial:"}})",
                          R"({"browser":{"profile_device":"serial:../../etc"}})",
                          R"({"browser":{"profile_device":"serial:Cloister"}})",
                          R"({"browser":{"profile_device":"serial:a-serial-longer-than-20"}})",
                          R"({"browser":{"profile_device":"cloister-profile"}})"}) {
    EXPECT_FALSE(ParseAgentConfig(bad).ok()) << bad;
  }
}

class ProfileDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/cloister-sysblock-XXXXXX";
    ASSERT_NE(mkdtemp(t), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Disk(const std::string& name, const std::string& serial) {
    fs::create_directories(dir_ + "/" + name);
    if (!serial.empty()) std::ofstream(dir_ + "/" + name + "/serial") << serial;
  }
  std::string dir_;
};

TEST_F(ProfileDeviceTest, ASerialResolvesToExactlyOneDisk) {
  Disk("vda", "");
  Disk("vdb", "cloister-plain\n");
  Disk("vdc", "");
  EXPECT_EQ(ResolveProfileDevice("serial:cloister-profile", dir_).error().code(),
            ErrorCode::kNotFound);
  Disk("vdd", "cloister-profile\n");
  auto got = ResolveProfileDevice("serial:cloister-profile", dir_, "/dev");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, "/dev/vdd");
  EXPECT_EQ(*ResolveProfileDevice("/dev/vdb", dir_), "/dev/vdb");
  // A prefix of a serial is not the serial; and two disks with it are refused (fail closed).
  EXPECT_FALSE(ResolveProfileDevice("serial:cloister", dir_).ok());
  Disk("vde", "cloister-profile");
  auto twice = ResolveProfileDevice("serial:cloister-profile", dir_);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(ResolveProfileDevice("vdd", dir_).ok());
}

TEST(BrowserArgvTest, DevToolsOnLoopbackOnlyWithTheProfileAndTheSandboxOn) {
  BrowserConfig c;
  c.enabled = true;
  c.cdp_port = 9222;
  BrowserPaths p = BrowserPathsFor("/var/lib/cloister-browser");
  auto argv = ChromiumArgv(c, p, "http://127.0.0.1:3128");
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv[0], "chromium");  // PATH lookup
  EXPECT_TRUE(Has(argv, "--headless"));
  EXPECT_TRUE(Has(argv, "--remote-debugging-address=127.0.0.1"));
  EXPECT_TRUE(Has(argv, "--remote-debugging-port=9222"));
  EXPECT_TRUE(Has(argv, "--user-data-dir=/var/lib/cloister-browser/chromium"));
  EXPECT_TRUE(Has(argv, "--proxy-server=http://127.0.0.1:3128"));
  EXPECT_TRUE(Has(argv, "--disable-quic"));
  for (const auto& a : argv) {
    EXPECT_EQ(a.find("--no-sandbox"), std::string::npos);
    EXPECT_EQ(a.find("0.0.0.0"), std::string::npos);
    // Exactly one address flag, and it is the loopback one.
    if (a.rfind("--remote-debugging-address=", 0) == 0) {
      EXPECT_EQ(a, "--remote-debugging-address=127.0.0.1");
    }
  }
  EXPECT_FALSE(Has(ChromiumArgv(c, p, ""), "--proxy-server="));
  c.cdp_port = 9333;
  EXPECT_TRUE(Has(ChromiumArgv(c, p, ""), "--remote-debugging-port=9333"));
}

TEST(BrowserArgvTest, ProxyComesFromTheProxyForward) {
  AgentConfig c;
  c.forwards = {{"unix:/run/cloister/ssh-agent.sock", "ssh-agent"},
                {"tcp:127.0.0.1:3128", "proxy"}};
  EXPECT_EQ(BrowserProxy(c), "http://127.0.0.1:3128");
  c.forwards = {{"tcp:127.0.0.1:9222", "cdp"}};
  EXPECT_EQ(BrowserProxy(c), "");
}

TEST(BrowserProfileMountTest, TmpfsOwnedByTheUserOrTheProfileDevice) {
  UserInfo u;
  u.uid = 1000;
  u.gid = 1000;
  BrowserConfig c;
  MountSpec t = ProfileMount(c, u, "/var/lib/cloister-browser");
  EXPECT_EQ(t.fstype, "tmpfs");
  EXPECT_EQ(t.target, "/var/lib/cloister-browser");
  EXPECT_NE(t.data.find("mode=0700"), std::string::npos);
  EXPECT_NE(t.data.find("uid=1000"), std::string::npos);
  EXPECT_TRUE(t.flags & MS_NOSUID);
  EXPECT_TRUE(t.flags & MS_NODEV);
  c.profile_device = "/dev/vdb";
  MountSpec d = ProfileMount(c, u, "/var/lib/cloister-browser");
  EXPECT_EQ(d.source, "/dev/vdb");
  EXPECT_EQ(d.fstype, "ext4");
  EXPECT_TRUE(d.flags & MS_NOSUID);
}

// A temporary directory with a fake `chromium` first on PATH.
class FakeChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/cloister-browser-test-XXXXXX";
    ASSERT_NE(mkdtemp(t), nullptr);
    dir_ = t;
    fs::create_directories(dir_ + "/bin");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WriteFake(const std::string& body) {
    std::ofstream(dir_ + "/bin/chromium") << "#!/bin/sh\n" << body;
    fs::permissions(dir_ + "/bin/chromium", fs::perms::owner_all);
  }

  BrowserOptions Options(int port) {
    BrowserOptions o;
    o.config.enabled = true;
    o.config.cdp_port = port;
    o.user.name = "me";
    o.user.uid = getuid();
    o.user.gid = getgid();
    o.user.home = dir_;
    o.switch_user = false;
    o.mount_point = dir_ + "/profile";
    o.log_file = dir_ + "/chromium.log";
    o.env = {"PATH=" + dir_ + "/bin:/usr/bin:/bin", "HOME=/nonexistent"};
    o.mount = [this](const MountSpec& m) {
      mounts_.push_back(m);
      return 0;
    };
    return o;
  }

  // A free loopback port (bound then released).
  static int FreePort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

  std::string dir_;
  std::vector<MountSpec> mounts_;
};

TEST_F(FakeChromium, StartsChromiumWithItsArgvAndIsReadyOnceThePortAccepts) {
  // The fake records its argv and HOME, then listens where --remote-debugging-port says.
  WriteFake("printf '%s\\n' \"$@\" > \"" + dir_ + "/argv\"\n"
            "echo \"$HOME\" > \"" + dir_ + "/home\"\n"
            "for a in \"$@\"; do case \"$a\" in --remote-debugging-port=*) p=${a#*=};; esac; done\n"
            "exec python3 -c 'import socket,sys,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind((\"127.0.0.1\", int(sys.argv[1]))); s.listen(5); time.sleep(600)' \"$p\"\n");
  int port = FreePort();
  auto o = Options(port);
  BrowserSupervisor b(o);
  EXPECT_FALSE(LoopbackPortAccepts(port));
  ASSERT_TRUE(b.Start().ok());
  auto st = b.WaitUntilAccepting(std::chrono::seconds(60));
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  EXPECT_TRUE(LoopbackPortAccepts(port));
  EXPECT_EQ(b.starts(), 1);
  ASSERT_EQ(mounts_.size(), 1u);  // the profile was mounted before Chromium ran
  EXPECT_EQ(mounts_[0].fstype, "tmpfs");
  EXPECT_EQ(mounts_[0].target, dir_ + "/profile");
  std::ifstream argv_file(dir_ + "/argv");
  std::string argv((std::istreambuf_iterator<char>(argv_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(argv.find("--remote-debugging-address=127.0.0.1\n"), std::string::npos) << argv;
  EXPECT_NE(argv.find("--user-data-dir=" + dir_ + "/profile/chromium\n"), std::string::npos);
  std::ifstream home_file(dir_ + "/home");
  std::string home;
  std::getline(home_file, home);
  EXPECT_EQ(home, dir_ + "/profile/home");  // everything of the session below the profile mount
  EXPECT_TRUE(fs::is_directory(dir_ + "/profile/chromium"));
}

TEST_F(FakeChromium, RefusesToStartChromiumWhenTheProfileCannotBeMounted) {
  WriteFake("touch \"" + dir_ + "/ran\"\nsleep 600\n");
  auto o = Options(FreePort());
  o.config.profile_device = "/dev/vdb";
  o.mount = [this](const MountSpec& m) {
    mounts_.push_back(m);
    return EIO;
  };
  BrowserSupervisor b(o);
  Status st = b.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("/dev/vdb"), std::string::npos) << st.error().message();
  ASSERT_EQ(mounts_.size(), 1u);
  EXPECT_EQ(mounts_[0].fstype, "ext4");
  EXPECT_EQ(b.starts(), 0);
  EXPECT_FALSE(b.WaitUntilAccepting(std::chrono::milliseconds(300)).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/ran"));
  EXPECT_FALSE(fs::exists(dir_ + "/profile/chromium"));
}

TEST_F(FakeChromium, MountsTheProfileDiskFoundBySerialAndRefusesWithoutIt) {
  WriteFake("touch \"" + dir_ + "/ran\"\nsleep 600\n");
  auto o = Options(FreePort());
  o.config.profile_device = "serial:cloister-profile";
  o.sys_block = dir_ + "/sys";
  o.dev_dir = "/dev";
  o.device_wait = std::chrono::milliseconds(0);
  fs::create_directories(dir_ + "/sys/vdb");
  {
    BrowserSupervisor absent(o);
    Status st = absent.Start();
    ASSERT_FALSE(st.ok());  // SECURITY: no disk, no Chromium (never a tmpfs instead)
    EXPECT_NE(st.error().message().find("cloister-profile"), std::string::npos);
    EXPECT_TRUE(mounts_.empty());
    EXPECT_FALSE(fs::exists(dir_ + "/ran"));
  }
  fs::create_directories(dir_ + "/sys/vdd");
  std::ofstream(dir_ + "/sys/vdd/serial") << "cloister-profile\n";
  BrowserSupervisor b(o);
  ASSERT_TRUE(b.Start().ok());
  ASSERT_EQ(mounts_.size(), 1u);
  EXPECT_EQ(mounts_[0].source, "/dev/vdd");
  EXPECT_EQ(mounts_[0].fstype, "ext4");
  EXPECT_EQ(mounts_[0].flags & (MS_NOSUID | MS_NODEV | MS_NOEXEC), MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

TEST_F(FakeChromium, RestartsADeadChromiumAndGivesUpAfterTheBudget) {
  WriteFake("echo died-once >> \"" + dir_ + "/runs\"\nexit 3\n");
  auto o = Options(FreePort());
  o.max_restarts = 2;
  std::vector<std::string> lines;
  std::mutex mu;
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> g(mu);
    lines.push_back(l);
  };
  BrowserSupervisor b(o);
  ASSERT_TRUE(b.Start().ok());
  auto st = b.WaitUntilAccepting(std::chrono::seconds(60));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("keeps dying"), std::string::npos) << st.error().message();
  EXPECT_EQ(b.starts(), 3);  // the first start and two restarts
  std::lock_guard<std::mutex> g(mu);
  bool exit_logged = false;
  for (const auto& l : lines) exit_logged |= l.find("chromium exited 3") != std::string::npos;
  EXPECT_TRUE(exit_logged);
}

}  // namespace
}  // namespace cloister::guest

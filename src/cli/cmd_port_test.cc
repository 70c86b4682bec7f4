// `create -p` / `--auto-ports` (stored in config.json "ports") and `cloister port` on a stopped
// workspace. In-process, temp store, real workspaces on a sparse base (the live verbs are proven
// in supervisor/ports_vm_test.cc).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <sstream>
#include <thread>

#include "cli/port_watch.h"
#include "cli/testing.h"
#include "supervisor/control.h"
#include "supervisor/workspace.h"
#include "store/store.h"
#include "supervisor/ports.h"

namespace cloister::cli {
namespace {

class PortCliTest : public testing::SparseBaseTest {
 protected:
  Result<vm::PortsConfig> Stored(const std::string& name) {
    auto store = Store::Open(store_);
    if (!store.ok()) return store.error();
    auto cfg = (*store)->LoadConfig(name);
    if (!cfg.ok()) return cfg.error();
    return vm::PortsConfigFromConfig(*cfg);
  }
};

TEST_F(PortCliTest, CreateStoresPublishedPorts) {
  testing::Outcome c = Run({"create", "ws", "--image", base_, "--home-size", "64M", "-p", "8080:80",
                            "-p", "0.0.0.0:9000:9000", "--publish", "[::1]:5173:5173",
                            "--auto-ports"});
  ASSERT_EQ(c.code, 0) << c.err;
  // A spelled-out non-loopback address is allowed, and said to expose the guest's port.
  EXPECT_NE(c.err.find("0.0.0.0:9000:9000 listens beyond loopback"), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find("127.0.0.1:8080:80 listens beyond"), std::string::npos) << c.err;
  auto p = Stored("ws");
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  ASSERT_EQ(p->publish.size(), 3u);
  EXPECT_EQ(p->publish[0].ToString(), "127.0.0.1:8080:80");
  EXPECT_EQ(p->publish[1].ToString(), "0.0.0.0:9000:9000");
  EXPECT_EQ(p->publish[2].ToString(), "[::1]:5173:5173");
  EXPECT_TRUE(p->auto_ports);

  // `port ls` of the stopped workspace: what comes up at its next start.
  testing::Outcome ls = Run({"port", "ws", "ls", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  nlohmann::json j = ls.json();
  EXPECT_EQ(j["state"], "stopped");
  EXPECT_EQ(j["auto_ports"], true);
  ASSERT_EQ(j["ports"].size(), 3u);
  EXPECT_EQ(j["ports"][0]["host_port"], 8080);
  EXPECT_EQ(j["ports"][0]["origin"], "config");
  testing::Outcome table = Run({"port", "ws"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("127.0.0.1:8080"), std::string::npos) << table.out;
  EXPECT_NE(table.err.find("next start"), std::string::npos) << table.err;

  // Without -p nothing is stored (no "ports" key).
  ASSERT_EQ(Create("plain").code, 0);
  auto none = Stored("plain");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->publish.empty());
  EXPECT_FALSE(none->auto_ports);
}

TEST_F(PortCliTest, BadPublishFlagCreatesNothing) {
  for (const char* bad : {"80", "localhost:8080:80", "8080:0", "99999:80"}) {
    testing::Outcome c = Run({"create", "ws", "--image", base_, "--home-size", "64M", "-p", bad});
    EXPECT_NE(c.code, 0) << bad;
    EXPECT_NE(c.err.find("HOST_PORT:GUEST_PORT"), std::string::npos) << c.err;
    EXPECT_NE(Run({"describe", "ws"}).code, 0) << bad << ": the workspace was created anyway";
  }
  // The same host port twice.
  testing::Outcome twice =
      Run({"create", "ws", "--image", base_, "--home-size", "64M", "-p", "8080:80", "-p", "8080:81"});
  EXPECT_NE(twice.code, 0);
  EXPECT_NE(twice.err.find("published twice"), std::string::npos) << twice.err;
}

TEST_F(PortCliTest, ConfigTurnsAutoPortsOnAndOff) {
  testing::Outcome c = Run({"create", "ws", "--image", base_, "--home-size", "64M", "-p", "8080:80"});
  ASSERT_EQ(c.code, 0) << c.err;
  ASSERT_EQ(Run({"config", "ws", "--auto-ports", "on"}).code, 0);
  auto on = Stored("ws");
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->auto_ports);
  ASSERT_EQ(on->publish.size(), 1u);  // the -p ports are kept
  testing::Outcome shown = Run({"config", "ws", "--json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(shown.json()["auto_ports"], true);
  EXPECT_EQ(shown.json()["publish"][0], "127.0.0.1:8080:80");
  EXPECT_EQ(shown.json()["tool"], "shell");  // untouched
  ASSERT_EQ(Run({"config", "ws", "--auto-ports", "off"}).code, 0);
  EXPECT_FALSE(Stored("ws")->auto_ports);
  EXPECT_NE(Run({"config", "ws", "--auto-ports", "maybe"}).code, 0);
}

TEST_F(PortCliTest, ChangesNeedARunningWorkspace) {
  ASSERT_EQ(Create("ws").code, 0);
  testing::Outcome add = Run({"port", "ws", "add", "8080:80"});
  EXPECT_NE(add.code, 0);
  EXPECT_NE(add.err.find("cloister start ws"), std::string::npos) << add.err;
  testing::Outcome rm = Run({"port", "ws", "rm", "8080"});
  EXPECT_NE(rm.code, 0);
  testing::Outcome empty = Run({"port", "ws", "add"});
  EXPECT_NE(empty.code, 0);
  EXPECT_NE(empty.err.find("needs a port"), std::string::npos) << empty.err;
  testing::Outcome bad = Run({"port", "ws", "add", "localhost:1:2"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(Run({"port", "ws", "open"}).code, 0);  // not an action
  EXPECT_NE(Run({"port", "nope", "ls"}).code, 0);
}

// The attach terminal's line (`attach` and `run` under --auto-ports): each automatic forward the
// supervisor reports is announced once, with the host port the host picked; other forwards are
// not (their port is the user's own). The supervisor here answers its control socket's "ports" op
// as the real one does.
TEST_F(PortCliTest, AttachTerminalAnnouncesEachAutomaticForwardOnce) {
  testing::Outcome c = Run({"create", "ws", "--image", base_, "--home-size", "64M", "-p", "8080:80",
                            "--auto-ports"});
  ASSERT_EQ(c.code, 0) << c.err;
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  vm::RunPaths paths = vm::RunPathsFor(**store, "ws");
  std::filesystem::create_directories(paths.run_dir);
  auto lfd = vm::ListenUnix(paths.supervisor_socket);
  ASSERT_TRUE(lfd.ok()) << lfd.error().ToString();
  std::atomic<int> answered{0};
  std::thread supervisor([&] {
    nlohmann::json ports = nlohmann::json::array(
        {{{"host_ip", "127.0.0.1"}, {"host_port", 8080}, {"guest_port", 80}, {"origin", "config"}},
         {{"host_ip", "127.0.0.1"}, {"host_port", 41234}, {"guest_port", 5173}, {"origin", "auto"}}});
    for (;;) {
      int fd = accept4(*lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      vm::LineConn conn(fd);
      auto req = conn.Read(std::chrono::steady_clock::now() + std::chrono::seconds(10));
      if (!req.ok() || vm::JsonString(*req, "op") != vm::kPortsControlOp) continue;
      // The second answer has one more automatic forward.
      if (++answered == 2) {
        ports.push_back({{"host_ip", "127.0.0.1"}, {"host_port", 41999}, {"guest_port", 3000},
                         {"origin", "auto"}});
      }
      (void)conn.Send({{"ok", true}, {"ports", ports}});
    }
  });
  std::ostringstream out;
  {
    auto announcer = AnnounceAutoPorts(**store, "ws", out);
    ASSERT_NE(announcer, nullptr);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (answered < 3 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, bounded
    }
  }
  shutdown(*lfd, SHUT_RDWR);
  supervisor.join();
  close(*lfd);
  const std::string said = out.str();
  EXPECT_NE(said.find("cloister: ws: published 127.0.0.1:41234 -> guest port 5173 (auto)"),
            std::string::npos) << said;
  EXPECT_NE(said.find("127.0.0.1:41999 -> guest port 3000 (auto)"), std::string::npos) << said;
  EXPECT_EQ(said.find("8080"), std::string::npos) << "a -p forward announced: " << said;
  EXPECT_EQ(said.find("41234"), said.rfind("41234")) << "announced twice: " << said;
  // Without --auto-ports nothing is announced.
  ASSERT_EQ(Create("plain").code, 0);
  EXPECT_EQ(AnnounceAutoPorts(**store, "plain", out), nullptr);
}

}  // namespace
}  // namespace cloister::cli

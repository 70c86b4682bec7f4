#include "supervisor/boot_plan.h"

#include "devcontainer/workspace.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace cloister::vm {
namespace {

// A workspace "ws" in a store at /s, with raw system and qcow2 home disks.
BootInputs Inputs() {
  BootInputs in;
  in.workspace = "ws";
  in.boot_id = "0123456789abcdef0123456789abcdef";
  in.config.name = "ws";
  in.config.cpus = 3;
  in.config.memory_mib = 1536;
  in.config.mac = "02:00:00:00:00:07";
  in.config.image.path = "/s/images/base/disk.raw";
  in.disks.system = {"/s/workspaces/ws/system-1.raw", layout::DiskFormat::kRaw, 1u << 30};
  in.disks.home = {"/s/workspaces/ws/home-2.qcow2", layout::DiskFormat::kQcow2, 1u << 30};
  in.kernel = {"/s/images/base/vmlinuz", "/s/images/base/initrd.img"};
  in.guest.env = {{"HTTPS_PROXY", "http://127.0.0.1:3128"}, {"GH_TOKEN", "ghp_PLACEHOLDER"}};
  in.guest.files = {{"/home/dev/.git-credentials", "https://x:ghp_PLACEHOLDER@github.com\n", 0600,
                     "dev"}};
  in.guest.ca_pem = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
  in.paths.name = "ws";
  in.paths.workspace_dir = "/s/workspaces/ws";
  in.paths.run_dir = "/s/workspaces/ws/run";
  in.paths.supervisor_log = "/s/workspaces/ws/run/supervisor.log";
  in.paths.qmp_socket = "/s/workspaces/ws/run/qmp.sock";
  in.paths.channel_socket = "/s/workspaces/ws/run/channel.sock";
  in.paths.meta_disk = "/s/workspaces/ws/run/meta.img";
  in.paths.console_log = "/s/workspaces/ws/console.log";
  in.paths.suspend_state = "/s/workspaces/ws/run/suspend.state";
  return in;
}

// A BootFd's fields as one comparable line.
std::string Describe(const BootFd& f) {
  static const char* kSlots[] = {"system", "home", "meta", "kernel", "initrd", "share", "console"};
  std::string s = kSlots[static_cast<int>(f.slot)];
  s += f.how == BootFd::How::kFdSet ? " fdset " : " proc ";
  s += f.path;
  if ((f.flags & O_ACCMODE) == O_RDWR) s += " rw";
  if ((f.flags & O_ACCMODE) == O_RDONLY) s += " ro";
  if ((f.flags & O_ACCMODE) == O_WRONLY) s += " wo";
  if (f.flags & O_APPEND) s += " append";
  if (f.flags & O_DIRECTORY) s += " dir";
  if (!f.format.empty()) s += " " + f.format;
  if (f.copy_if_uid_dropped) s += " copy-if-dropped";
  if (f.slot == BootFd::Slot::kShare) s += " #" + std::to_string(f.share);
  return s;
}

std::vector<std::string> Fds(const BootPlan& plan) {
  std::vector<std::string> out;
  for (const BootFd& f : plan.fds) out.push_back(Describe(f));
  return out;
}

TEST(BootPlanTest, AFreshBootPassesEveryFileAsAnFdInOrder) {
  auto plan = PlanBoot(Inputs());
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_EQ(Fds(*plan), (std::vector<std::string>{
                            "system fdset /s/workspaces/ws/system-1.raw rw raw",
                            "home fdset /s/workspaces/ws/home-2.qcow2 rw qcow2",
                            "meta fdset /s/workspaces/ws/run/meta.img ro",
                            "kernel proc /s/images/base/vmlinuz ro copy-if-dropped",
                            "initrd proc /s/images/base/initrd.img ro copy-if-dropped",
                            "console fdset /s/workspaces/ws/console.log wo append",
                        }));
  EXPECT_EQ(plan->backing_dirs, std::vector<std::string>{"/s/workspaces/ws"});
  EXPECT_EQ(plan->backing_files, std::vector<std::string>{"/s/images/base/disk.raw"});
  EXPECT_TRUE(plan->build_meta_disk);
  EXPECT_EQ(plan->meta_disk, "/s/workspaces/ws/run/meta.img");
  EXPECT_TRUE(plan->truncate_console_log);
  // The guest's listeners: the proxy and SSH agent defaults, and the browser's DevTools (cdp).
  std::vector<std::string> forwards;
  for (const MetaForward& f : plan->meta.forwards) forwards.push_back(f.listen + " " + f.service);
  EXPECT_EQ(forwards, (std::vector<std::string>{"tcp:127.0.0.1:3128 proxy",
                                                "unix:/run/cloister/ssh-agent.sock ssh-agent",
                                                "tcp:127.0.0.1:9222 cdp"}));
  EXPECT_FALSE(plan->meta.browser.has_value());

  const VmSpec& spec = plan->spec;
  EXPECT_EQ(spec.name, "ws");
  EXPECT_EQ(spec.accel, Accel::kTcg);
  EXPECT_EQ(spec.cpus, 3);
  EXPECT_EQ(spec.memory_mib, 1536);
  EXPECT_EQ(spec.mac, "02:00:00:00:00:07");
  EXPECT_EQ(spec.tcg_cpu, kTcgCpuModel);
  EXPECT_EQ(spec.qmp_socket, "/s/workspaces/ws/run/qmp.sock");
  EXPECT_EQ(spec.channel_socket, "/s/workspaces/ws/run/channel.sock");
  EXPECT_FALSE(spec.incoming_defer);
  EXPECT_TRUE(spec.sandbox);
  // The fd-backed fields are LaunchQemu's: no host path of the store lands in the spec.
  EXPECT_EQ(spec.system_disk.path, "");
  EXPECT_EQ(spec.home_disk.path, "");
  EXPECT_EQ(spec.meta_disk, "");
  EXPECT_EQ(spec.kernel, "");
  EXPECT_EQ(spec.initrd, "");
  EXPECT_EQ(spec.console_log, "");
  EXPECT_TRUE(spec.fd_sets.empty());
  EXPECT_TRUE(spec.shares.empty());

  const MetaConfig& meta = plan->meta;
  EXPECT_EQ(meta.workspace, "ws");
  EXPECT_EQ(meta.boot_id, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(meta.tool, "shell");
  EXPECT_EQ(meta.workdir, "");
  EXPECT_TRUE(meta.shares.empty());
  EXPECT_EQ(meta.ca_certificate, Inputs().guest.ca_pem);
  ASSERT_EQ(meta.files.size(), 1u);
  EXPECT_EQ(meta.files[0].path, "/home/dev/.git-credentials");
  EXPECT_EQ(meta.files[0].content, "https://x:ghp_PLACEHOLDER@github.com\n");
  EXPECT_EQ(meta.files[0].mode, 0600u);
  EXPECT_EQ(meta.files[0].owner, "dev");
  EXPECT_EQ(meta.env, (std::map<std::string, std::string>{
                          {"HTTPS_PROXY", "http://127.0.0.1:3128"}, {"GH_TOKEN", "ghp_PLACEHOLDER"}}));
}

TEST(BootPlanTest, SharesGetTagsInOrderAndTheirFoldersAsDirectoryFds) {
  BootInputs in = Inputs();
  in.config.volumes = {{"/home/u/src", "/work", false}, {"/home/u/ref", "/ref", true}};
  auto plan = PlanBoot(in);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  ASSERT_EQ(plan->spec.shares.size(), 2u);
  EXPECT_EQ(plan->spec.shares[0].host_path, "/home/u/src");
  EXPECT_EQ(plan->spec.shares[0].tag, "share0");
  EXPECT_FALSE(plan->spec.shares[0].readonly);
  EXPECT_EQ(plan->spec.shares[1].host_path, "/home/u/ref");
  EXPECT_EQ(plan->spec.shares[1].tag, "share1");
  EXPECT_TRUE(plan->spec.shares[1].readonly);
  ASSERT_EQ(plan->meta.shares.size(), 2u);
  EXPECT_EQ(plan->meta.shares[0].tag, "share0");
  EXPECT_EQ(plan->meta.shares[0].guest_path, "/work");
  EXPECT_FALSE(plan->meta.shares[0].readonly);
  EXPECT_EQ(plan->meta.shares[1].tag, "share1");
  EXPECT_EQ(plan->meta.shares[1].guest_path, "/ref");
  EXPECT_TRUE(plan->meta.shares[1].readonly);
  EXPECT_EQ(plan->meta.workdir, "/work");  // the agent's window starts in the first share
  std::vector<std::string> fds = Fds(*plan);
  ASSERT_EQ(fds.size(), 8u);
  // After the initramfs, before the console log; never copied (QEMU's uid reaches them by fd).
  EXPECT_EQ(fds[5], "share proc /home/u/src ro dir #0");
  EXPECT_EQ(fds[6], "share proc /home/u/ref ro dir #1");
  EXPECT_EQ(fds[7], "console fdset /s/workspaces/ws/console.log wo append");
}

TEST(BootPlanTest, ResumeAndOptionsTable) {
  struct Case {
    const char* what;
    std::function<void(BootInputs&)> edit;
    bool build_meta_disk;
    bool truncate_console_log;
    bool incoming_defer;
    std::string tcg_cpu;
    bool sandbox;
    Accel accel;
  };
  const std::vector<Case> cases = {
      {"fresh boot", [](BootInputs&) {}, true, true, false, kTcgCpuModel, true, Accel::kTcg},
      {"fresh boot, a stale metadata disk is rebuilt", [](BootInputs& in) { in.meta_disk_present = true; },
       true, true, false, kTcgCpuModel, true, Accel::kTcg},
      {"resume keeps the metadata disk the guest booted with",
       [](BootInputs& in) { in.resume = in.meta_disk_present = true; }, false, false, true,
       kTcgCpuModel, true, Accel::kTcg},
      {"resume without its metadata disk builds one", [](BootInputs& in) { in.resume = true; },
       true, false, true, kTcgCpuModel, true, Accel::kTcg},
      {"CLOISTER_TCG_CPU", [](BootInputs& in) { in.tcg_cpu = "qemu64"; }, true, true, false,
       "qemu64", true, Accel::kTcg},
      {"--no-sandbox, kvm", [](BootInputs& in) { in.sandbox = false; in.accel = Accel::kKvm; },
       true, true, false, kTcgCpuModel, false, Accel::kKvm},
  };
  for (const Case& c : cases) {
    BootInputs in = Inputs();
    c.edit(in);
    auto plan = PlanBoot(in);
    ASSERT_TRUE(plan.ok()) << c.what << ": " << plan.error().ToString();
    EXPECT_EQ(plan->build_meta_disk, c.build_meta_disk) << c.what;
    EXPECT_EQ(plan->truncate_console_log, c.truncate_console_log) << c.what;
    EXPECT_EQ(plan->spec.incoming_defer, c.incoming_defer) << c.what;
    EXPECT_EQ(plan->spec.tcg_cpu, c.tcg_cpu) << c.what;
    EXPECT_EQ(plan->spec.sandbox, c.sandbox) << c.what;
    EXPECT_EQ(plan->spec.accel, c.accel) << c.what;
  }
}

TEST(BootPlanTest, ToolAndRegistryEnvironmentTable) {
  struct Case {
    const char* what;
    std::string tool;
    std::string registry;
    std::map<std::string, std::string> guest_env;
    std::map<std::string, std::string> want_env;
  };
  const std::vector<Case> cases = {
      {"shell adds nothing", "shell", "", {{"A", "1"}}, {{"A", "1"}}},
      {"claude: no updater, no telemetry", "claude", "", {{"A", "1"}},
       {{"A", "1"}, {"DISABLE_AUTOUPDATER", "1"}, {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"}}},
      {"codex adds nothing", "codex", "", {}, {}},
      {"the registry, with its slash", "shell", "https://registry.test", {},
       {{"npm_config_registry", "https://registry.test/"}}},
      {"the tool's settings and the registry win over the egress view", "claude",
       "https://r.test/", {{"DISABLE_AUTOUPDATER", "0"}, {"npm_config_registry", "https://x/"}},
       {{"DISABLE_AUTOUPDATER", "1"}, {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"},
        {"npm_config_registry", "https://r.test/"}}},
  };
  for (const Case& c : cases) {
    BootInputs in = Inputs();
    in.config.tool = c.tool;
    in.npm_registry = c.registry;
    in.guest.env = c.guest_env;
    auto plan = PlanBoot(in);
    ASSERT_TRUE(plan.ok()) << c.what << ": " << plan.error().ToString();
    EXPECT_EQ(plan->meta.env, c.want_env) << c.what;
    EXPECT_EQ(plan->meta.tool, c.tool) << c.what;
  }
}

TEST(BootPlanTest, AnUnknownToolOrABadRegistryRefusesTheBootWithTheFix) {
  struct Case {
    const char* what;
    std::string tool;
    std::string registry;
    std::string message;
    std::string hint;
  };
  const std::vector<Case> cases = {
      {"unknown tool", "emacs", "", "workspace ws: unknown tool 'emacs'",
       "`cloister config ws --tool shell`"},
      {"unknown tool first", "", "http://plain.test/", "unknown tool ''", "--tool shell"},
      {"plain http registry", "shell", "http://plain.test/", "CLOISTER_GUEST_NPM_REGISTRY",
       "https://"},
      {"quote in the registry", "shell", "https://a.test/'x", "bad URL", "unset it"},
  };
  for (const Case& c : cases) {
    BootInputs in = Inputs();
    in.config.tool = c.tool;
    in.npm_registry = c.registry;
    auto plan = PlanBoot(in);
    ASSERT_FALSE(plan.ok()) << c.what;
    EXPECT_EQ(plan.error().code(), ErrorCode::kInvalidArgument) << c.what;
    EXPECT_NE(plan.error().message().find(c.message), std::string::npos)
        << c.what << ": " << plan.error().ToString();
    EXPECT_NE(plan.error().hint().find(c.hint), std::string::npos)
        << c.what << ": " << plan.error().ToString();
  }
}

}  // namespace
}  // namespace cloister::vm

namespace cloister::vm {
namespace {

// The benches' other sides (CLOISTER_TCG_TB_SIZE, CLOISTER_FREE_PAGE_REPORTING); a malformed
// value refuses the boot with the fix, never falls back silently.
TEST(BootPlanTest, TbSizeAndFreePageReportingOverridesTable) {
  struct Case {
    std::string tb_size;
    std::string reporting;
    bool ok;
    int want_tb;
    bool want_reporting;
  };
  const std::vector<Case> cases = {
      {"", "", true, kTcgTbSizeMib, true},  {"64", "", true, 64, true},
      {"0", "1", true, 0, true},            {"", "0", true, kTcgTbSizeMib, false},
      {"-1", "", false, 0, false},          {"256M", "", false, 0, false},
      {"99999", "", false, 0, false},       {"", "off", false, 0, false},
      {"", "yes", false, 0, false},
  };
  for (const Case& c : cases) {
    BootInputs in = Inputs();
    in.tcg_tb_size = c.tb_size;
    in.free_page_reporting = c.reporting;
    auto plan = PlanBoot(in);
    ASSERT_EQ(plan.ok(), c.ok) << c.tb_size << "/" << c.reporting;
    if (!c.ok) {
      EXPECT_FALSE(plan.error().hint().empty()) << plan.error().ToString();
      continue;
    }
    EXPECT_EQ(plan->spec.tcg_tb_size_mib, c.want_tb) << c.tb_size;
    EXPECT_EQ(plan->spec.free_page_reporting, c.want_reporting) << c.reporting;
  }
}

}  // namespace
}  // namespace cloister::vm

namespace cloister::vm {
namespace {

// A workspace made from a devcontainer (devcontainer/workspace.h): its environment goes under
// cloister's own, its lifecycle commands into the metadata; a credential put into the stored
// section refuses the boot.
TEST(BootPlanTest, ADevcontainersEnvironmentAndCommandsReachTheGuestUnderCloistersOwn) {
  BootInputs in = Inputs();
  devcontainer::WorkspaceDevcontainer dc;
  dc.env = {{"EDITOR", "vi"}, {"PATH", "/opt/tool/bin:/usr/bin:/bin"}};
  dc.remote_user = "root";
  dc.steps = {{"postCreateCommand", "devcontainer.json",
               *devcontainer::ParseLifecycleCommand(nlohmann::json("make setup"), "k")}};
  ASSERT_TRUE(PutConfigSection(devcontainer::WorkspaceDevcontainerSection(), in.config, dc).ok());
  auto plan = PlanBoot(in);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_EQ(plan->meta.env.at("EDITOR"), "vi");
  EXPECT_EQ(plan->meta.env.at("HTTPS_PROXY"), "http://127.0.0.1:3128");
  EXPECT_EQ(plan->meta.env.at("PATH"), "/opt/tool/bin:/usr/bin:/bin");
  ASSERT_FALSE(plan->meta.devcontainer.is_null());
  EXPECT_EQ(plan->meta.devcontainer["user"], "root");
  EXPECT_EQ(plan->meta.devcontainer["create"][0]["commands"][0]["shell"], "make setup");
  EXPECT_EQ(MetaConfigJson(plan->meta)["devcontainer"], plan->meta.devcontainer);
  // Without the section: no devcontainer key at all.
  auto plain = PlanBoot(Inputs());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(MetaConfigJson(plain->meta).contains("devcontainer"));
  // A key written into the stored section by hand: the boot is refused.
  in.config.extra[devcontainer::kWorkspaceKey]["env"]["K"] = "sk-ant-api03-" + std::string(40, 'k');
  auto refused = PlanBoot(in);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kPermissionDenied);
}

}  // namespace
}  // namespace cloister::vm

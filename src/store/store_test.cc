#include "store/store.h"

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/pid_file.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "store/image_ref.h"
#include "store/fault_injection_env.h"
#include "store/mac.h"
#include "store/test_util.h"

namespace cloister {
namespace {

using testing::GuestReads;
using testing::GuestWrite;
using testing::SameGuestView;
using layout::DiskFormat;

constexpr uint64_t kBaseSize = 256ull << 20;
constexpr uint64_t kHomeSize = 128ull << 20;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.Sub("base.raw");
    testing::MakeBaseImage(base_, kBaseSize);
    root_ = tmp_.Sub("store");
    StoreOptions o;
    o.clock = clock_.fn();
    o.system_disk_mode = SystemDiskMode::kQcow2;
    o.make_ssh_key = FakeSshKeyHook(&key_calls_);
    o.make_sshd_host_key = [this](const std::string& name, const std::string& dir) {
      host_key_calls_.push_back(name + "@" + dir.substr(dir.rfind('/') + 1));
      return OkStatus();
    };
    store_ = std::move(Store::Open(root_, o)).value();
  }

  // Stands in for sshagent's hook: writes only a public key (a fresh random one each call).
  static std::function<Status(const std::string&, const std::string&)> FakeSshKeyHook(int* calls) {
    return [calls](const std::string& name, const std::string& dir) -> Status {
      ++*calls;
      Env* env = Env::Default();
      RETURN_IF_ERROR(env->CreateDirs(dir + "/ssh", 0700));
      std::string nonce = std::to_string(*calls) + "-" + std::to_string(getpid()) + "-" +
                          std::to_string(reinterpret_cast<uintptr_t>(&nonce));
      return env->AtomicWriteFile(dir + "/ssh/id_ed25519.pub",
                                  "ssh-ed25519 FAKE" + nonce + " cloister:" + name + "\n");
    };
  }

  CreateRequest Req(const std::string& name) {
    CreateRequest r;
    r.name = name;
    r.image = base_;
    r.home_size = kHomeSize;
    return r;
  }

  WorkspaceConfig MustCreate(const std::string& name) {
    Result<WorkspaceConfig> c = store_->Create(Req(name));
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    return c.ok() ? *c : WorkspaceConfig{};
  }

  LiveDisks Disks(const std::string& name) {
    return store_->LiveDiskPaths(name, *store_->LoadConfig(name));
  }

  std::string Consistent(bool no_garbage = true) { return testing::CheckStore(root_, no_garbage); }

  testing::TempDir tmp_;
  testing::FakeClock clock_;
  std::string base_, root_;
  std::unique_ptr<Store> store_;
  int key_calls_ = 0;
  std::vector<std::string> host_key_calls_;  // "NAME@DIRNAME" per make_sshd_host_key call
};

// The guest sshd's host key (IDE access) is new at create and at wipe, kept by wipe-home and
// reset: a pin made before a wipe must stop matching, one made before wipe-home must not.
TEST_F(StoreTest, SshdHostKeyIsMadeAtCreateAndWipeOnly) {
  MustCreate("ws");
  ASSERT_EQ(host_key_calls_.size(), 1u);
  EXPECT_EQ(host_key_calls_[0].substr(0, 3), "ws@");
  EXPECT_NE(host_key_calls_[0], "ws@ws");  // the staging directory, before the commit
  ASSERT_TRUE(store_->WipeHome("ws").ok());
  ASSERT_TRUE(store_->Reset("ws").ok());
  EXPECT_EQ(host_key_calls_.size(), 1u);
  ASSERT_TRUE(store_->Wipe("ws").ok());
  ASSERT_EQ(host_key_calls_.size(), 2u);
  EXPECT_EQ(host_key_calls_[1], "ws@ws");
}

TEST_F(StoreTest, CreateMakesEveryFileOfTheWorkspace) {
  WorkspaceConfig c = MustCreate("dev");
  WorkspacePaths p = store_->Paths("dev");
  Env* env = Env::Default();
  EXPECT_EQ(*env->ReadFile(root_ + "/layout-version"), "1\n");
  // Config on disk is what Create returned.
  EXPECT_EQ(ConfigToJson(*store_->LoadConfig("dev")), ConfigToJson(c));
  EXPECT_EQ(c.image.path, base_);
  EXPECT_EQ(c.image.size, kBaseSize);
  EXPECT_EQ(c.image.sha256, *Sha256File(base_));
  EXPECT_EQ(c.home_size, kHomeSize);
  EXPECT_EQ(c.memory_mib, kDefaultMemoryMib);
  EXPECT_EQ(c.id.size(), 32u);
  // System disk: qcow2 overlay with the absolute base path as backing; the guest sees the base.
  LiveDisks d = Disks("dev");
  EXPECT_EQ(d.system.format, DiskFormat::kQcow2);
  EXPECT_EQ(testing::BackingOf(d.system.path), base_);
  EXPECT_TRUE(SameGuestView(d.system.path, DiskFormat::kQcow2, base_, DiskFormat::kRaw));
  EXPECT_LT(env->Stat(d.system.path)->allocated, 1u << 20);
  // Home: sparse raw ext4 of the requested apparent size, root owned by uid/gid 1000.
  FileInfo home = *env->Stat(d.home.path);
  EXPECT_EQ(d.home.format, DiskFormat::kRaw);
  EXPECT_EQ(home.apparent, kHomeSize);
  EXPECT_LT(home.allocated, 16u << 20);
  Result<RunOutput> fsck = RunProcess({"e2fsck", "-fn", d.home.path});
  ASSERT_TRUE(fsck.ok());
  EXPECT_EQ(fsck->exit_code, 0) << fsck->out << fsck->err;
  Result<RunOutput> st = RunProcessChecked({"debugfs", "-R", "stat /", d.home.path});
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->out.find("User:  1000   Group:  1000"), std::string::npos) << st->out;
  Result<RunOutput> label = RunProcessChecked({"e2label", d.home.path});
  EXPECT_EQ(Trim(label->out), "cloister-home");
  // MAC reserved for this workspace id.
  EXPECT_TRUE(IsLocalUnicastMac(c.mac));
  auto macs = *MacRegistry(env, root_ + "/macs.json").Load();
  ASSERT_EQ(macs.size(), 1u);
  EXPECT_EQ(macs[0].id, c.id);
  EXPECT_EQ(macs[0].mac, c.mac);
  // The SSH key hook ran once, in the workspace dir; the store itself writes no key material.
  EXPECT_EQ(key_calls_, 1);
  EXPECT_NE(env->ReadFile(p.ssh_public_key)->find("cloister:dev"), std::string::npos);
  EXPECT_EQ(*env->ListDir(p.ssh_dir), std::vector<std::string>{"id_ed25519.pub"});
  EXPECT_EQ(Consistent(), "");
}

TEST_F(StoreTest, EachWorkspaceHasItsOwnQemuIdFromTheRegistry) {
  MustCreate("dev");
  MustCreate("dev2");
  auto a = store_->QemuId("dev");
  auto b = store_->QemuId("dev2");
  ASSERT_TRUE(a.ok() && b.ok()) << (a.ok() ? b.error().ToString() : a.error().ToString());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*store_->QemuId("dev"), *a);  // stable
  // Removed, its id is free again with its MAC; the other keeps its own.
  ASSERT_TRUE(store_->Remove("dev").ok());
  EXPECT_EQ(*store_->QemuId("dev2"), *b);
  EXPECT_FALSE(store_->QemuId("dev").ok());
}

TEST_F(StoreTest, BadInputIsOneErrorWithAHintAndChangesNothing) {
  MustCreate("dev");
  std::string before = *Env::Default()->ReadFile(store_->Paths("dev").config);
  struct Case {
    CreateRequest req;
    ErrorCode code;
  };
  std::vector<Case> cases;
  for (const char* n : {"../evil", "a/b", "UP", "", ".x"}) cases.push_back({Req(n), ErrorCode::kInvalidArgument});
  cases.push_back({Req("dev"), ErrorCode::kAlreadyExists});
  CreateRequest missing = Req("m");
  missing.image = tmp_.Sub("nope.raw");
  cases.push_back({missing, ErrorCode::kNotFound});
  CreateRequest vol = Req("v");
  vol.volumes = {{tmp_.Sub("no-such-dir"), "/mnt/x", false}};
  cases.push_back({vol, ErrorCode::kNotFound});
  CreateRequest tool = Req("tl");
  tool.tool = "emacs";  // not a tool of base/agent_tools.h
  cases.push_back({tool, ErrorCode::kInvalidArgument});
  CreateRequest tiny = Req("t");
  tiny.home_size = 1 << 20;
  cases.push_back({tiny, ErrorCode::kInvalidArgument});
  std::string q = tmp_.Sub("q.qcow2");
  ASSERT_TRUE(RunProcessChecked({"qemu-img", "create", "-q", "-f", "qcow2", q, "64M"}).ok());
  CreateRequest qc = Req("q");
  qc.image = q;
  cases.push_back({qc, ErrorCode::kInvalidArgument});
  for (const Case& c : cases) {
    Result<WorkspaceConfig> r = store_->Create(c.req);
    ASSERT_FALSE(r.ok()) << c.req.name;
    EXPECT_EQ(r.error().code(), c.code) << c.req.name << ": " << r.error().ToString();
    EXPECT_FALSE(r.error().hint().empty()) << r.error().ToString();
    EXPECT_EQ(r.error().message().find('\n'), std::string::npos);
  }
  EXPECT_EQ(*Env::Default()->ReadFile(store_->Paths("dev").config), before);
  EXPECT_EQ(store_->List()->size(), 1u);
  EXPECT_EQ(Consistent(), "");
  for (auto verb : {&Store::Reset, &Store::Wipe, &Store::WipeHome, &Store::Remove}) {
    Status s = (store_.get()->*verb)("ghost");
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code(), ErrorCode::kNotFound);
    EXPECT_NE(s.error().hint().find("cloister ls"), std::string::npos);
  }
}

TEST_F(StoreTest, FullDiskFailsCleanly) {
  FaultInjectionEnv fi(Env::Default());
  StoreOptions o;
  o.env = &fi;
  o.system_disk_mode = SystemDiskMode::kQcow2;
  auto store = std::move(Store::Open(root_, o)).value();
  fi.FakeFreeSpace(10 << 20);
  Result<WorkspaceConfig> r = store->Create(Req("full"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNoSpace);
  EXPECT_NE(r.error().hint().find("free space"), std::string::npos);
  // ENOSPC from mkfs.ext4 in the middle of create: nothing left behind.
  fi.FakeFreeSpace(std::nullopt);
  fi.ResetCounter();
  Result<WorkspaceConfig> ok = store->Create(Req("probe"));
  ASSERT_TRUE(ok.ok());
  int64_t steps = fi.steps();
  ASSERT_TRUE(store->Remove("probe").ok());
  for (int64_t step = 0; step < steps; ++step) {
    fi.ResetCounter();
    fi.FailStepWith(step, ErrnoError("write", ENOSPC));
    Result<WorkspaceConfig> f = store->Create(Req("full"));
    if (f.ok()) {
      Status removed = store->Remove("full");  // a failed fsync of a best-effort step
      ASSERT_TRUE(removed.ok()) << step << "/" << steps << ": " << removed.error().ToString();
      continue;
    }
    EXPECT_EQ(f.error().code(), ErrorCode::kNoSpace) << step << ": " << f.error().ToString();
    EXPECT_TRUE(store->List()->empty()) << step;
    EXPECT_EQ(Consistent(), "") << "step " << step;
  }
  fi.FailStepWith(-1, Error(ErrorCode::kInternal, ""));
}

TEST_F(StoreTest, SecondConcurrentMutationIsBusyAndChangesNothing) {
  MustCreate("dev");
  std::string before = *Env::Default()->ReadFile(store_->Paths("dev").config);
  Result<WorkspaceLock> held = store_->LockWorkspace("dev");
  ASSERT_TRUE(held.ok());
  for (auto verb : {&Store::Reset, &Store::Wipe, &Store::WipeHome, &Store::Remove}) {
    Status s = (store_.get()->*verb)("dev");
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code(), ErrorCode::kBusy) << s.error().ToString();
    EXPECT_FALSE(s.error().hint().empty());
  }
  EXPECT_EQ(store_->CreateCheckpoint("dev").error().code(), ErrorCode::kBusy);
  EXPECT_EQ(*Env::Default()->ReadFile(store_->Paths("dev").config), before);
  // MarkCompromised does not need the workspace lock (the VM holds it while running).
  EXPECT_TRUE(store_->MarkCompromised("dev", "test").ok());
  EXPECT_TRUE(store_->LoadConfig("dev")->compromised);
}

TEST_F(StoreTest, RunningWorkspaceRefusesDisposal) {
  MustCreate("dev");
  WorkspacePaths p = store_->Paths("dev");
  ASSERT_TRUE(Env::Default()->CreateDirs(p.run_dir).ok());
  // A live supervisor holds the pid file's lock (base/pid_file.h).
  auto held = ClaimPidFile(p.supervisor_pid);
  ASSERT_TRUE(held.ok()) << held.error().ToString();
  EXPECT_EQ(store_->State("dev"), lifecycle::State::kRunning);
  Status s = store_->Reset("dev");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(s.error().hint().find("cloister stop dev"), std::string::npos);
  close(*held);
  // The supervisor died: its pid (still alive here, as a recycled pid would be) does not count.
  ASSERT_EQ(*Env::Default()->ReadFile(p.supervisor_pid), std::to_string(getpid()) + "\n");
  EXPECT_EQ(store_->State("dev"), lifecycle::State::kBroken);
  EXPECT_TRUE(store_->Reset("dev").ok());
  // A pid file naming a live process that never held the lock: not running either.
  ASSERT_TRUE(Env::Default()->WriteFile(p.supervisor_pid, "1\n").ok());
  EXPECT_EQ(store_->State("dev"), lifecycle::State::kBroken);
  EXPECT_TRUE(store_->WipeHome("dev").ok());
}

TEST_F(StoreTest, ResetDropsSystemDiskKeepsHomeAndReclonesAtStart) {
  MustCreate("dev");
  LiveDisks d = Disks("dev");
  GuestWrite(d.system.path, d.system.format, 2 << 20, 4096, 0x51);  // "apt install" in /usr
  GuestWrite(d.home.path, d.home.format, 32 << 20, 4096, 0x48);     // a file in ~
  WorkspacePaths p = store_->Paths("dev");
  ASSERT_TRUE(Env::Default()->WriteFile(p.secrets, "sealed").ok());
  std::string key = *Env::Default()->ReadFile(p.ssh_public_key);
  ASSERT_TRUE(Env::Default()->WriteFile(p.suspend_state, "ram").ok());
  ASSERT_TRUE(store_->Reset("dev").ok());
  EXPECT_FALSE(Env::Default()->Exists(p.suspend_state)) << "a RAM image of the old disk must go";
  WorkspaceConfig c = *store_->LoadConfig("dev");
  EXPECT_TRUE(c.system_top.empty());
  EXPECT_FALSE(Env::Default()->Exists(d.system.path));
  EXPECT_TRUE(GuestReads(d.home.path, d.home.format, 32 << 20, 4096, 0x48));
  EXPECT_EQ(*Env::Default()->ReadFile(p.secrets), "sealed");
  EXPECT_EQ(*Env::Default()->ReadFile(p.ssh_public_key), key);
  EXPECT_EQ(Consistent(), "");
  // Start: a fresh clone that reads exactly as the base.
  auto lock = store_->LockWorkspace("dev");
  Result<LiveDisks> live = store_->EnsureSystemDisk(*lock);
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  EXPECT_NE(live->system.path, d.system.path);
  EXPECT_TRUE(SameGuestView(live->system.path, live->system.format, base_, DiskFormat::kRaw));
  EXPECT_EQ(live->home.path, d.home.path);
  // Idempotent: a second start keeps the disk.
  EXPECT_EQ(store_->EnsureSystemDisk(*lock)->system.path, live->system.path);
}

TEST_F(StoreTest, WipeHomeMakesFreshHomeAndKeypairKeepsSystem) {
  MustCreate("dev");
  LiveDisks d = Disks("dev");
  WorkspacePaths p = store_->Paths("dev");
  GuestWrite(d.system.path, d.system.format, 2 << 20, 4096, 0x51);
  GuestWrite(d.home.path, d.home.format, 32 << 20, 4096, 0x48);
  ASSERT_TRUE(store_->CreateCheckpoint("dev").ok());
  std::string key = *Env::Default()->ReadFile(p.ssh_public_key);
  ASSERT_TRUE(Env::Default()->WriteFile(p.secrets, "sealed").ok());
  ASSERT_TRUE(store_->WipeHome("dev").ok());
  LiveDisks after = Disks("dev");
  EXPECT_NE(after.home.path, d.home.path);
  EXPECT_FALSE(GuestReads(after.home.path, after.home.format, 32 << 20, 4096, 0x48));
  EXPECT_EQ(Env::Default()->Stat(after.home.path)->apparent, kHomeSize);
  EXPECT_TRUE(GuestReads(after.system.path, after.system.format, 2 << 20, 4096, 0x51));
  EXPECT_NE(*Env::Default()->ReadFile(p.ssh_public_key), key);
  EXPECT_EQ(*Env::Default()->ReadFile(p.secrets), "sealed");
  EXPECT_TRUE(store_->LoadConfig("dev")->checkpoints.empty());
  // No copy of the old home survives anywhere in the workspace.
  WorkspaceConfig wiped = *store_->LoadConfig("dev");
  for (const DiskLayer& l : wiped.layers) {
    if (l.disk == DiskKind::kHome) EXPECT_EQ(l.file, wiped.home_top);
  }
  EXPECT_EQ(Consistent(), "");
}

TEST_F(StoreTest, WipeClearsCompromiseKeepsSettingsAndHostFoldersNewKey) {
  std::string host = tmp_.Sub("project");
  ASSERT_TRUE(Env::Default()->CreateDirs(host).ok());
  ASSERT_TRUE(Env::Default()->WriteFile(host + "/main.c", "int main;").ok());
  CreateRequest r = Req("dev");
  r.volumes = {{host, "/src", false}};
  r.memory_mib = 3000;
  ASSERT_TRUE(store_->Create(r).ok());
  LiveDisks d = Disks("dev");
  WorkspacePaths p = store_->Paths("dev");
  GuestWrite(d.system.path, d.system.format, 2 << 20, 4096, 0x51);
  GuestWrite(d.home.path, d.home.format, 32 << 20, 4096, 0x48);
  ASSERT_TRUE(store_->CreateCheckpoint("dev").ok());
  ASSERT_TRUE(Env::Default()->WriteFile(p.secrets, "sealed").ok());
  std::string key = *Env::Default()->ReadFile(p.ssh_public_key);
  ASSERT_TRUE(store_->MarkCompromised("dev", "ghp_ placeholder sent to evil.example").ok());
  ASSERT_TRUE(store_->MarkCompromised("dev", "second reason").ok());
  WorkspaceConfig bad = *store_->LoadConfig("dev");
  EXPECT_EQ(bad.compromised_reason, "ghp_ placeholder sent to evil.example");
  auto lock = store_->LockWorkspace("dev");
  Result<LiveDisks> start = store_->EnsureSystemDisk(*lock);
  ASSERT_FALSE(start.ok());
  EXPECT_EQ(start.error().code(), ErrorCode::kCompromised);
  EXPECT_NE(start.error().hint().find("cloister wipe dev"), std::string::npos);
  lock = Error(ErrorCode::kInternal, "release");

  ASSERT_TRUE(store_->Wipe("dev").ok());
  WorkspaceConfig c = *store_->LoadConfig("dev");
  EXPECT_FALSE(c.compromised);
  EXPECT_TRUE(c.checkpoints.empty());
  EXPECT_TRUE(c.system_top.empty());
  EXPECT_EQ(c.layers.size(), 1u);
  EXPECT_EQ(c.memory_mib, 3000u);
  EXPECT_EQ(c.volumes.size(), 1u);
  EXPECT_EQ(c.mac, bad.mac);
  EXPECT_EQ(*Env::Default()->ReadFile(p.secrets), "sealed");
  // A new workspace keypair (the hook ran again), like wipe-home.
  EXPECT_NE(*Env::Default()->ReadFile(p.ssh_public_key), key);
  EXPECT_EQ(*Env::Default()->ReadFile(host + "/main.c"), "int main;");
  EXPECT_FALSE(Env::Default()->Exists(p.checkpoints_dir + "/" + bad.checkpoints.at(0).id));
  LiveDisks after = Disks("dev");
  EXPECT_FALSE(GuestReads(after.home.path, after.home.format, 32 << 20, 4096, 0x48));
  lock = store_->LockWorkspace("dev");
  start = store_->EnsureSystemDisk(*lock);
  ASSERT_TRUE(start.ok()) << start.error().ToString();
  EXPECT_TRUE(SameGuestView(start->system.path, start->system.format, base_, DiskFormat::kRaw));
  EXPECT_EQ(Consistent(), "");
}

TEST_F(StoreTest, RemoveDeletesEverythingAndReleasesMac) {
  WorkspaceConfig c = MustCreate("dev");
  MustCreate("other");
  WorkspacePaths p = store_->Paths("dev");
  ASSERT_TRUE(store_->CreateCheckpoint("dev").ok());
  ASSERT_TRUE(Env::Default()->WriteFile(p.secrets, "sealed").ok());
  ASSERT_TRUE(store_->Remove("dev").ok());
  EXPECT_FALSE(Env::Default()->Exists(p.dir));
  EXPECT_EQ(testing::CountRegularFiles(root_ + "/trash"), 0);
  auto macs = *MacRegistry(Env::Default(), root_ + "/macs.json").Load();
  ASSERT_EQ(macs.size(), 1u);
  EXPECT_NE(macs[0].id, c.id);
  ASSERT_EQ(store_->List()->size(), 1u);
  EXPECT_EQ(store_->Remove("dev").error().code(), ErrorCode::kNotFound);
  // Same name again: same derived MAC (it was released), new id.
  WorkspaceConfig again = MustCreate("dev");
  EXPECT_EQ(again.mac, c.mac);
  EXPECT_NE(again.id, c.id);
  EXPECT_EQ(Consistent(), "");
}

TEST_F(StoreTest, ListAndDescribeReportSizesAndState) {
  MustCreate("a");
  MustCreate("b");
  ASSERT_TRUE(store_->MarkCompromised("b", "test").ok());
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "a");
  EXPECT_FALSE((*list)[0].config->compromised);
  EXPECT_TRUE((*list)[1].config->compromised);
  EXPECT_GT((*list)[0].total_allocated, 0u);
  Result<WorkspaceInfo> info = store_->Describe("a");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, lifecycle::State::kStopped);
  ASSERT_EQ(info->layers.size(), 2u);
  for (const LayerUsage& u : info->layers) {
    EXPECT_EQ(u.role, "live");
    EXPECT_EQ(u.allocated, Env::Default()->Stat(info->paths.dir + "/" + u.layer.file)->allocated);
  }
  EXPECT_GE(info->total_apparent, kHomeSize);
  EXPECT_LT(info->total_allocated, 32u << 20);
  // A damaged workspace is listed with its problem, not hidden, and ls still works.
  ASSERT_TRUE(Env::Default()->WriteFile(store_->Paths("b").config, "{oops").ok());
  list = store_->List();
  ASSERT_TRUE(list.ok());
  EXPECT_FALSE((*list)[1].problem.empty());
  EXPECT_TRUE(store_->Remove("b").ok()) << "a damaged workspace can still be deleted";
}

TEST_F(StoreTest, ChangedBaseImageIsRefusedAtStart) {
  MustCreate("dev");
  ASSERT_TRUE(store_->Reset("dev").ok());
  testing::MakeBaseImage(base_, kBaseSize, 'X');
  ASSERT_EQ(truncate(base_.c_str(), kBaseSize + 4096), 0);
  auto lock = store_->LockWorkspace("dev");
  Result<LiveDisks> r = store_->EnsureSystemDisk(*lock);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition);
}

TEST_F(StoreTest, StoreFromTheFutureIsRefused) {
  MustCreate("dev");
  ASSERT_TRUE(Env::Default()->WriteFile(root_ + "/layout-version", "7\n").ok());
  Result<WorkspaceConfig> r = store_->Create(Req("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cloister

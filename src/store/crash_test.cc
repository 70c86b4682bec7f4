// Crash tests, as LevelDB's fault_injection_test: every verb is run over a FaultInjectionEnv
// that "kills" the process at mutating step N, for every N from 0 until the verb completes
// without reaching N. After each crash, a fresh Store over the real Env must (1) find every
// workspace consistent (what `ls` reports is true: each layer the config names exists with the
// backing it says, checkpoints name existing layers, MACs are reserved), and (2) complete the
// verb when it is run again, leaving no garbage. One table row per verb (kVerbs below): its
// starting state, the call, what a re-run may answer, and the end state it must reach.
#include <gtest/gtest.h>

#include <functional>

#include "base/subprocess.h"
#include "store/fault_injection_env.h"
#include "store/store.h"
#include "store/test_util.h"

namespace cloister {
namespace {

using layout::DiskFormat;
using testing::GuestReads;
using testing::GuestWrite;

constexpr uint64_t kCrashBaseSize = 64ull << 20;
constexpr uint64_t kCrashHomeSize = 64ull << 20;
constexpr uint64_t kSysOff = 3 << 20;
constexpr uint64_t kHomeOff = 40 << 20;

std::function<Status(const std::string&, const std::string&)> KeyHook(Env* env) {
  return [env](const std::string& name, const std::string& dir) -> Status {
    RETURN_IF_ERROR(env->CreateDirs(dir + "/ssh", 0700));
    return env->AtomicWriteFile(dir + "/ssh/id_ed25519.pub", "ssh-ed25519 FAKE cloister:" + name);
  };
}

// A verb's Result as the Status the table's rows return.
template <typename T>
Status OkOr(const Result<T>& r) {
  if (!r.ok()) return r.error();
  return OkStatus();
}

struct VerbCase;

class CrashTest : public ::testing::TestWithParam<VerbCase> {
 public:
  void SetUp() override {
    base_ = tmp_.Sub("base.raw");
    testing::MakeBaseImage(base_, kCrashBaseSize);
    root_ = tmp_.Sub("store");
    template_ = tmp_.Sub("template");
  }

  std::unique_ptr<Store> Open(Env* env) {
    StoreOptions o;
    o.env = env;
    o.clock = clock_.fn();
    o.system_disk_mode = SystemDiskMode::kQcow2;
    o.make_ssh_key = KeyHook(env);
    return std::move(Store::Open(root_, o)).value();
  }

  LiveDisks Disks(Store& s, const std::string& name) {
    return s.LiveDiskPaths(name, *s.LoadConfig(name));
  }

  void Session(Store& s, int pattern) {
    LiveDisks d = Disks(s, "dev");
    if (!d.system.path.empty()) GuestWrite(d.system.path, d.system.format, kSysOff, 4096, pattern);
    GuestWrite(d.home.path, d.home.format, kHomeOff, 4096, pattern);
  }

  bool HomeReads(Store& s, int pattern) {
    LiveDisks d = Disks(s, "dev");
    return GuestReads(d.home.path, d.home.format, kHomeOff, 4096, pattern);
  }
  bool SystemReads(Store& s, int pattern) {
    LiveDisks d = Disks(s, "dev");
    return !d.system.path.empty() &&
           GuestReads(d.system.path, d.system.format, kSysOff, 4096, pattern);
  }

  void CreateDev(Store& s) {
    CreateRequest r;
    r.name = "dev";
    r.image = base_;
    r.home_size = kCrashHomeSize;
    Result<WorkspaceConfig> c = s.Create(r);
    ASSERT_TRUE(c.ok()) << c.error().ToString();
  }

  // Copies the template store into place (same absolute path, so qcow2 backing names hold).
  void RestoreTemplate() {
    ASSERT_TRUE(Env::Default()->RemoveAll(root_).ok());
    if (!Env::Default()->Exists(template_)) {
      ASSERT_TRUE(Env::Default()->CreateDirs(root_).ok());
      return;
    }
    ASSERT_TRUE(RunProcessChecked({"cp", "-a", "--sparse=always", template_, root_}).ok());
  }

  // The common starting state: two guest sessions around one checkpoint (0x11, then 0x22).
  void SessionsAroundCheckpoint(Store& s) {
    CreateDev(s);
    Session(s, 0x11);
    ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
    Session(s, 0x22);
  }

  void RunEveryCrashPoint(const VerbCase& sc);

  testing::TempDir tmp_;
  testing::FakeClock clock_;
  std::string base_, root_, template_;
  std::string first_checkpoint_;  // CheckpointRemove's victim, set by its setup
};

// One verb under fault injection.
struct VerbCase {
  std::string name;
  // Builds the starting state with the real Env.
  std::function<void(CrashTest&, Store&)> setup;
  // The verb under test.
  std::function<Status(CrashTest&, Store&)> verb;
  // May a re-run after a crash answer this error code (the verb had committed)?
  std::vector<ErrorCode> rerun_may_say;
  // Checks the end state (real Env).
  std::function<void(CrashTest&, Store&)> verify;
};

// gtest prints a parameter in each test's listing (and ctest's name): the verb, not its bytes.
void PrintTo(const VerbCase& c, std::ostream* os) { *os << c.name; }

void CrashTest::RunEveryCrashPoint(const VerbCase& sc) {
  // The starting state, built once, copied before every run.
  {
    auto s = Open(Env::Default());
    sc.setup(*this, *s);
    if (::testing::Test::HasFatalFailure()) return;
    if (Env::Default()->Exists(root_)) {
      ASSERT_TRUE(RunProcessChecked({"cp", "-a", "--sparse=always", root_, template_}).ok());
    }
  }
  int64_t n = 0;
  for (;; ++n) {
    SCOPED_TRACE("crash at step " + std::to_string(n));
    RestoreTemplate();
    FaultInjectionEnv fi(Env::Default());
    fi.CrashAtStep(n);
    Status first;
    {
      auto faulty = Open(&fi);
      first = sc.verb(*this, *faulty);
    }
    auto real = Open(Env::Default());
    if (!fi.crashed()) {
      ASSERT_TRUE(first.ok()) << first.error().ToString();
      sc.verify(*this, *real);
      ASSERT_EQ(testing::CheckStore(root_, /*no_garbage=*/true), "");
      break;
    }
    // What a fresh process sees right after the crash is consistent...
    ASSERT_TRUE(real->List().ok());
    ASSERT_EQ(testing::CheckStore(root_, /*no_garbage=*/false), "");
    // ...and running the verb again completes it.
    Status again = sc.verb(*this, *real);
    if (!again.ok()) {
      bool allowed = false;
      for (ErrorCode c : sc.rerun_may_say) allowed |= again.error().code() == c;
      ASSERT_TRUE(allowed) << "re-run failed: " << again.error().ToString();
      // The verb had committed before the crash: a later mutating verb cleans up after it.
      auto lock = real->LockWorkspace("dev");
      if (lock.ok()) {
        lock = Error(ErrorCode::kInternal, "release");
        ASSERT_TRUE(real->ApplyRetention("dev").ok());
      }
    }
    sc.verify(*this, *real);
    ASSERT_EQ(testing::CheckStore(root_, /*no_garbage=*/true), "");
  }
  EXPECT_GT(n, 3) << "the verb should have several steps";
  std::printf("[ crash    ] %lld crash points, each recovered\n", static_cast<long long>(n));
}

const std::vector<VerbCase> kVerbs = {
    {"Create",
     [](CrashTest&, Store&) {},
     [](CrashTest& t, Store& s) -> Status {
       CreateRequest r;
       r.name = "dev";
       r.image = t.base_;
       r.home_size = kCrashHomeSize;
       return OkOr(s.Create(r));
     },
     {ErrorCode::kAlreadyExists},
     [](CrashTest& t, Store& s) {
       auto list = s.List();
       ASSERT_EQ(list->size(), 1u);
       LiveDisks d = t.Disks(s, "dev");
       EXPECT_TRUE(testing::SameGuestView(d.system.path, d.system.format, t.base_, DiskFormat::kRaw));
       EXPECT_EQ(Env::Default()->Stat(d.home.path)->apparent, kCrashHomeSize);
       EXPECT_TRUE(Env::Default()->Exists(s.Paths("dev").ssh_public_key));
     }},
    {"Reset",
     [](CrashTest& t, Store& s) { t.SessionsAroundCheckpoint(s); },
     [](CrashTest&, Store& s) { return s.Reset("dev"); },
     {},
     [](CrashTest& t, Store& s) {
       WorkspaceConfig c = *s.LoadConfig("dev");
       EXPECT_TRUE(c.system_top.empty());
       EXPECT_EQ(c.checkpoints.size(), 1u);
       EXPECT_TRUE(t.HomeReads(s, 0x22));
     }},
    {"WipeHome",
     [](CrashTest& t, Store& s) { t.SessionsAroundCheckpoint(s); },
     [](CrashTest&, Store& s) { return s.WipeHome("dev"); },
     {},
     [](CrashTest& t, Store& s) {
       WorkspaceConfig c = *s.LoadConfig("dev");
       EXPECT_TRUE(c.checkpoints.empty());
       EXPECT_FALSE(t.HomeReads(s, 0x22));
       EXPECT_FALSE(t.HomeReads(s, 0x11));
       EXPECT_TRUE(t.SystemReads(s, 0x22));
     }},
    {"Wipe",
     [](CrashTest& t, Store& s) {
       t.SessionsAroundCheckpoint(s);
       ASSERT_TRUE(s.MarkCompromised("dev", "test").ok());
     },
     [](CrashTest&, Store& s) { return s.Wipe("dev"); },
     {},
     [](CrashTest& t, Store& s) {
       WorkspaceConfig c = *s.LoadConfig("dev");
       EXPECT_FALSE(c.compromised);
       EXPECT_TRUE(c.checkpoints.empty());
       EXPECT_TRUE(c.system_top.empty());
       EXPECT_EQ(c.layers.size(), 1u);
       EXPECT_FALSE(t.HomeReads(s, 0x22));
     }},
    {"Remove",
     [](CrashTest& t, Store& s) {
       t.CreateDev(s);
       t.Session(s, 0x11);
       ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
     },
     [](CrashTest&, Store& s) { return s.Remove("dev"); },
     {},
     [](CrashTest& t, Store& s) {
       EXPECT_TRUE(s.List()->empty());
       EXPECT_EQ(testing::CountRegularFiles(t.root_ + "/workspaces"), 0);
       EXPECT_EQ(testing::CountRegularFiles(t.root_ + "/trash"), 0);
     }},
    {"CheckpointCreate",
     [](CrashTest& t, Store& s) {
       t.CreateDev(s);
       t.Session(s, 0x11);
     },
     [](CrashTest&, Store& s) { return OkOr(s.CreateCheckpoint("dev")); },
     {},
     [](CrashTest& t, Store& s) {
       WorkspaceConfig c = *s.LoadConfig("dev");
       ASSERT_GE(c.checkpoints.size(), 1u);
       t.Session(s, 0x33);
       ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints.back().id).ok());
       EXPECT_TRUE(t.HomeReads(s, 0x11));
       EXPECT_TRUE(t.SystemReads(s, 0x11));
     }},
    {"CheckpointCreateWithRetention",
     [](CrashTest& t, Store& s) {
       t.CreateDev(s);
       for (int i = 0; i < 4; ++i) {
         t.Session(s, 0x11 + i);
         ASSERT_TRUE(s.CreateCheckpoint("dev", {true}).ok());
         t.clock_.now += 3600;
       }
       t.Session(s, 0x20);
       t.clock_.now += 10 * 86400;
     },
     [](CrashTest&, Store& s) { return OkOr(s.CreateCheckpoint("dev", {true})); },
     {},
     [](CrashTest& t, Store& s) {
       WorkspaceConfig c = *s.LoadConfig("dev");
       // Newest 3 kept: the new one and the two newest of the old ones.
       ASSERT_EQ(c.checkpoints.size(), 3u);
       EXPECT_TRUE(t.HomeReads(s, 0x20));
       // The oldest survivor is the 3rd newest of the first four, or the 4th when a crash after
       // the commit made the re-run take a second new checkpoint.
       int want = c.checkpoints[1].id.rfind(c.checkpoints[2].id.substr(0, 15), 0) == 0 ? 0x14
                                                                                       : 0x13;
       ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints[0].id).ok());
       EXPECT_TRUE(t.HomeReads(s, want));
       EXPECT_TRUE(t.SystemReads(s, want));
     }},
    {"CheckpointRestore",
     [](CrashTest& t, Store& s) {
       t.CreateDev(s);
       t.Session(s, 0x11);
       ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
       t.clock_.now += 60;
       t.Session(s, 0x22);
     },
     [](CrashTest&, Store& s) {
       return s.RestoreCheckpoint("dev", s.LoadConfig("dev")->checkpoints.at(0).id);
     },
     {},
     [](CrashTest& t, Store& s) {
       EXPECT_TRUE(t.HomeReads(s, 0x11));
       EXPECT_TRUE(t.SystemReads(s, 0x11));
     }},
    {"CheckpointRemove",
     [](CrashTest& t, Store& s) {
       t.CreateDev(s);
       t.Session(s, 0x11);
       t.first_checkpoint_ = s.CreateCheckpoint("dev")->id;
       t.clock_.now += 60;
       t.Session(s, 0x22);
       ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
       t.Session(s, 0x33);
     },
     [](CrashTest& t, Store& s) { return s.RemoveCheckpoint("dev", t.first_checkpoint_); },
     {ErrorCode::kNotFound},
     [](CrashTest& t, Store& s) {
       WorkspaceConfig c = *s.LoadConfig("dev");
       ASSERT_EQ(c.checkpoints.size(), 1u);
       EXPECT_NE(c.checkpoints[0].id, t.first_checkpoint_);
       EXPECT_TRUE(t.HomeReads(s, 0x33));
       EXPECT_TRUE(t.SystemReads(s, 0x33));
       ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints[0].id).ok());
       EXPECT_TRUE(t.HomeReads(s, 0x22));
       EXPECT_TRUE(t.SystemReads(s, 0x22));
     }},
    // A fork copies a three-layer chain under the source's lock; a re-run after the commit finds
    // the fork made.
    {"Fork",
     [](CrashTest& t, Store& s) { t.SessionsAroundCheckpoint(s); },
     [](CrashTest&, Store& s) -> Status {
       ForkRequest f;
       f.source = "dev";
       f.name = "fork";
       return OkOr(s.Fork(f));
     },
     {ErrorCode::kAlreadyExists},
     [](CrashTest& t, Store& s) {
       EXPECT_TRUE(t.HomeReads(s, 0x22));
       LiveDisks d = s.LiveDiskPaths("fork", *s.LoadConfig("fork"));
       EXPECT_TRUE(GuestReads(d.home.path, d.home.format, kHomeOff, 4096, 0x22));
       EXPECT_TRUE(GuestReads(d.system.path, d.system.format, kSysOff, 4096, 0x22));
       EXPECT_EQ(s.LoadConfig("fork")->checkpoints.size(), 0u);
     }},
    // The VM module's proven-boot checkpoint: prepare, QEMU switches to the overlays (here: the
    // guest writes into them), commit with the VM running.
    {"LiveCheckpointPrepareCommit",
     [](CrashTest& t, Store& s) {
       t.CreateDev(s);
       t.Session(s, 0x11);
     },
     [](CrashTest&, Store& s) -> Status {
       ASSIGN_OR_RETURN(WorkspaceLock lock, s.LockWorkspace("dev"));
       ASSIGN_OR_RETURN(PreparedCheckpoint p, s.PrepareCheckpoint(lock, {true}));
       for (const auto& d : p.disks) {
         GuestWrite(d.new_top_path, DiskFormat::kQcow2,
                    d.disk == DiskKind::kSystem ? kSysOff : kHomeOff, 4096, 0x22);
       }
       return OkOr(s.CommitCheckpoint(lock, p, /*vm_running=*/true));
     },
     {},
     [](CrashTest& t, Store& s) {
       WorkspaceConfig c = *s.LoadConfig("dev");
       ASSERT_GE(c.checkpoints.size(), 1u);
       EXPECT_TRUE(t.HomeReads(s, 0x22));
       EXPECT_TRUE(t.SystemReads(s, 0x22));
       ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints.front().id).ok());
       EXPECT_TRUE(t.HomeReads(s, 0x11));
       EXPECT_TRUE(t.SystemReads(s, 0x11));
     }},
};

TEST_P(CrashTest, EveryStepRecovers) { RunEveryCrashPoint(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Verbs, CrashTest, ::testing::ValuesIn(kVerbs),
                         [](const ::testing::TestParamInfo<VerbCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace cloister

// Crash tests, as LevelDB's fault_injection_test: every verb is run over a FaultInjectionEnv
// that "kills" the process at mutating step N, for every N from 0 until the verb completes
// without reaching N. After each crash, a fresh Store over the real Env must (1) find every
// workspace consistent (what `ls` reports is true: each layer the config names exists with the
// backing it says, checkpoints name existing layers, MACs are reserved), and (2) complete the
// verb when it is run again, leaving no garbage.
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

constexpr uint64_t kBaseSize = 64ull << 20;
constexpr uint64_t kHomeSize = 64ull << 20;
constexpr uint64_t kSysOff = 3 << 20;
constexpr uint64_t kHomeOff = 40 << 20;

std::function<Status(const std::string&, const std::string&)> KeyHook(Env* env) {
  return [env](const std::string& name, const std::string& dir) -> Status {
    RETURN_IF_ERROR(env->CreateDirs(dir + "/ssh", 0700));
    return env->AtomicWriteFile(dir + "/ssh/id_ed25519.pub", "ssh-ed25519 FAKE cloister:" + name);
  };
}

struct Scenario {
  // Builds the starting state with the real Env.
  std::function<void(Store&)> setup;
  // The verb under test.
  std::function<Status(Store&)> verb;
  // May a re-run after a crash answer this error code (the verb had committed)?
  std::vector<ErrorCode> rerun_may_say;
  // Checks the end state (real Env).
  std::function<void(Store&)> verify;
};

class CrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.Sub("base.raw");
    testing::MakeBaseImage(base_, kBaseSize);
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
    r.home_size = kHomeSize;
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

  void RunEveryCrashPoint(const Scenario& sc) {
    // The starting state, built once, copied before every run.
    {
      auto s = Open(Env::Default());
      sc.setup(*s);
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
        first = sc.verb(*faulty);
      }
      auto real = Open(Env::Default());
      if (!fi.crashed()) {
        ASSERT_TRUE(first.ok()) << first.error().ToString();
        sc.verify(*real);
        ASSERT_EQ(testing::CheckStore(root_, /*no_garbage=*/true), "");
        break;
      }
      // What a fresh process sees right after the crash is consistent...
      ASSERT_TRUE(real->List().ok());
      ASSERT_EQ(testing::CheckStore(root_, /*no_garbage=*/false), "");
      // ...and running the verb again completes it.
      Status again = sc.verb(*real);
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
      sc.verify(*real);
      ASSERT_EQ(testing::CheckStore(root_, /*no_garbage=*/true), "");
    }
    EXPECT_GT(n, 3) << "the verb should have several steps";
    std::printf("[ crash    ] %lld crash points, each recovered\n", static_cast<long long>(n));
  }

  testing::TempDir tmp_;
  testing::FakeClock clock_;
  std::string base_, root_, template_;
};

TEST_F(CrashTest, Create) {
  RunEveryCrashPoint({
      [](Store&) {},
      [this](Store& s) -> Status {
        CreateRequest r;
        r.name = "dev";
        r.image = base_;
        r.home_size = kHomeSize;
        Result<WorkspaceConfig> c = s.Create(r);
        if (!c.ok()) return c.error();
        return OkStatus();
      },
      {ErrorCode::kAlreadyExists},
      [this](Store& s) {
        auto list = s.List();
        ASSERT_EQ(list->size(), 1u);
        LiveDisks d = Disks(s, "dev");
        EXPECT_TRUE(testing::SameGuestView(d.system.path, d.system.format, base_, DiskFormat::kRaw));
        EXPECT_EQ(Env::Default()->Stat(d.home.path)->apparent, kHomeSize);
        EXPECT_TRUE(Env::Default()->Exists(s.Paths("dev").ssh_public_key));
      },
  });
}

TEST_F(CrashTest, Reset) {
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
        ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
        Session(s, 0x22);
      },
      [](Store& s) { return s.Reset("dev"); },
      {},
      [this](Store& s) {
        WorkspaceConfig c = *s.LoadConfig("dev");
        EXPECT_TRUE(c.system_top.empty());
        EXPECT_EQ(c.checkpoints.size(), 1u);
        EXPECT_TRUE(HomeReads(s, 0x22));
      },
  });
}

TEST_F(CrashTest, WipeHome) {
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
        ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
        Session(s, 0x22);
      },
      [](Store& s) { return s.WipeHome("dev"); },
      {},
      [this](Store& s) {
        WorkspaceConfig c = *s.LoadConfig("dev");
        EXPECT_TRUE(c.checkpoints.empty());
        EXPECT_FALSE(HomeReads(s, 0x22));
        EXPECT_FALSE(HomeReads(s, 0x11));
        EXPECT_TRUE(SystemReads(s, 0x22));
      },
  });
}

TEST_F(CrashTest, Wipe) {
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
        ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
        Session(s, 0x22);
        ASSERT_TRUE(s.MarkCompromised("dev", "test").ok());
      },
      [](Store& s) { return s.Wipe("dev"); },
      {},
      [this](Store& s) {
        WorkspaceConfig c = *s.LoadConfig("dev");
        EXPECT_FALSE(c.compromised);
        EXPECT_TRUE(c.checkpoints.empty());
        EXPECT_TRUE(c.system_top.empty());
        EXPECT_EQ(c.layers.size(), 1u);
        EXPECT_FALSE(HomeReads(s, 0x22));
      },
  });
}

TEST_F(CrashTest, Remove) {
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
        ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
      },
      [](Store& s) { return s.Remove("dev"); },
      {},
      [this](Store& s) {
        EXPECT_TRUE(s.List()->empty());
        EXPECT_EQ(testing::CountRegularFiles(root_ + "/workspaces"), 0);
        EXPECT_EQ(testing::CountRegularFiles(root_ + "/trash"), 0);
      },
  });
}

TEST_F(CrashTest, CheckpointCreate) {
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
      },
      [](Store& s) -> Status {
        Result<CheckpointRecord> r = s.CreateCheckpoint("dev");
        if (!r.ok()) return r.error();
        return OkStatus();
      },
      {},
      [this](Store& s) {
        WorkspaceConfig c = *s.LoadConfig("dev");
        ASSERT_GE(c.checkpoints.size(), 1u);
        Session(s, 0x33);
        ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints.back().id).ok());
        EXPECT_TRUE(HomeReads(s, 0x11));
        EXPECT_TRUE(SystemReads(s, 0x11));
      },
  });
}

TEST_F(CrashTest, CheckpointCreateWithRetention) {
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        for (int i = 0; i < 4; ++i) {
          Session(s, 0x11 + i);
          ASSERT_TRUE(s.CreateCheckpoint("dev", {true}).ok());
          clock_.now += 3600;
        }
        Session(s, 0x20);
        clock_.now += 10 * 86400;
      },
      [](Store& s) -> Status {
        Result<CheckpointRecord> r = s.CreateCheckpoint("dev", {true});
        if (!r.ok()) return r.error();
        return OkStatus();
      },
      {},
      [this](Store& s) {
        WorkspaceConfig c = *s.LoadConfig("dev");
        // Newest 3 kept: the new one and the two newest of the old ones.
        ASSERT_EQ(c.checkpoints.size(), 3u);
        EXPECT_TRUE(HomeReads(s, 0x20));
        // The oldest survivor is the 3rd newest of the first four, or the 4th when a crash after
        // the commit made the re-run take a second new checkpoint.
        int want = c.checkpoints[1].id.rfind(c.checkpoints[2].id.substr(0, 15), 0) == 0 ? 0x14
                                                                                        : 0x13;
        ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints[0].id).ok());
        EXPECT_TRUE(HomeReads(s, want));
        EXPECT_TRUE(SystemReads(s, want));
      },
  });
}

TEST_F(CrashTest, CheckpointRestore) {
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
        ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
        clock_.now += 60;
        Session(s, 0x22);
      },
      [](Store& s) {
        return s.RestoreCheckpoint("dev", s.LoadConfig("dev")->checkpoints.at(0).id);
      },
      {},
      [this](Store& s) {
        EXPECT_TRUE(HomeReads(s, 0x11));
        EXPECT_TRUE(SystemReads(s, 0x11));
      },
  });
}

TEST_F(CrashTest, CheckpointRemove) {
  std::string first;
  RunEveryCrashPoint({
      [this, &first](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
        first = s.CreateCheckpoint("dev")->id;
        clock_.now += 60;
        Session(s, 0x22);
        ASSERT_TRUE(s.CreateCheckpoint("dev").ok());
        Session(s, 0x33);
      },
      [&first](Store& s) { return s.RemoveCheckpoint("dev", first); },
      {ErrorCode::kNotFound},
      [this, &first](Store& s) {
        WorkspaceConfig c = *s.LoadConfig("dev");
        ASSERT_EQ(c.checkpoints.size(), 1u);
        EXPECT_NE(c.checkpoints[0].id, first);
        EXPECT_TRUE(HomeReads(s, 0x33));
        EXPECT_TRUE(SystemReads(s, 0x33));
        ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints[0].id).ok());
        EXPECT_TRUE(HomeReads(s, 0x22));
        EXPECT_TRUE(SystemReads(s, 0x22));
      },
  });
}

TEST_F(CrashTest, LiveCheckpointPrepareCommit) {
  // The VM module's proven-boot checkpoint: prepare, QEMU switches to the overlays (here: the
  // guest writes into them), commit with the VM running.
  RunEveryCrashPoint({
      [this](Store& s) {
        CreateDev(s);
        Session(s, 0x11);
      },
      [](Store& s) -> Status {
        ASSIGN_OR_RETURN(WorkspaceLock lock, s.LockWorkspace("dev"));
        ASSIGN_OR_RETURN(PreparedCheckpoint p, s.PrepareCheckpoint(lock, {true}));
        for (const auto& d : p.disks) {
          GuestWrite(d.new_top_path, DiskFormat::kQcow2, d.disk == DiskKind::kSystem ? kSysOff : kHomeOff,
                     4096, 0x22);
        }
        Result<CheckpointRecord> r = s.CommitCheckpoint(lock, p, /*vm_running=*/true);
        if (!r.ok()) return r.error();
        return OkStatus();
      },
      {},
      [this](Store& s) {
        WorkspaceConfig c = *s.LoadConfig("dev");
        ASSERT_GE(c.checkpoints.size(), 1u);
        EXPECT_TRUE(HomeReads(s, 0x22));
        EXPECT_TRUE(SystemReads(s, 0x22));
        ASSERT_TRUE(s.RestoreCheckpoint("dev", c.checkpoints.front().id).ok());
        EXPECT_TRUE(HomeReads(s, 0x11));
        EXPECT_TRUE(SystemReads(s, 0x11));
      },
  });
}

}  // namespace
}  // namespace cloister

// Store::Fork: the fork's disks start as the source's and then diverge; the fork owns every file
// it reads (removing the source leaves it whole); identity is new (id, MAC, keys, secrets file);
// a source that changes under the copy, a compromised source and credentials without a copier
// are refused.
#include <gtest/gtest.h>

#include <openssl/rand.h>

#include <set>

#include "base/strings.h"
#include "base/subprocess.h"
#include "store/store.h"
#include "store/test_util.h"

namespace cloister {
namespace {

using layout::DiskFormat;
using testing::GuestReads;
using testing::GuestWrite;

constexpr uint64_t kForkBaseSize = 64ull << 20;
constexpr uint64_t kForkHomeSize = 64ull << 20;
constexpr uint64_t kForkSysOff = 3 << 20;
constexpr uint64_t kForkHomeOff = 40 << 20;

std::string Random() {
  unsigned char b[16];
  RAND_bytes(b, sizeof b);
  return HexEncode(std::string(reinterpret_cast<char*>(b), sizeof b));
}

class ForkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.Sub("base.raw");
    testing::MakeBaseImage(base_, kForkBaseSize);
    root_ = tmp_.Sub("store");
    StoreOptions o;
    o.clock = clock_.fn();
    o.system_disk_mode = SystemDiskMode::kQcow2;
    // Stand-ins for the vault and sshagent hooks: a fresh random key each call.
    o.make_ssh_key = [](const std::string&, const std::string& dir) -> Status {
      RETURN_IF_ERROR(Env::Default()->CreateDirs(dir + "/ssh", 0700));
      RETURN_IF_ERROR(Env::Default()->AtomicWriteFile(dir + "/secrets.enc", Random(), 0600));
      return Env::Default()->AtomicWriteFile(dir + "/ssh/id_ed25519.pub", Random());
    };
    o.make_sshd_host_key = [](const std::string&, const std::string& dir) -> Status {
      RETURN_IF_ERROR(Env::Default()->CreateDirs(dir + "/ssh", 0700));
      return Env::Default()->AtomicWriteFile(dir + "/ssh/sshd_host_ed25519_key", Random(), 0600);
    };
    o.copy_credentials = [this](const std::string& src, const std::string& src_dir,
                                const std::string& name, const std::string& dir) -> Status {
      copied_ = src + " " + src_dir + " " + name + " " + dir;
      return OkStatus();
    };
    store_ = std::move(Store::Open(root_, o)).value();
    CreateRequest r;
    r.name = "src";
    r.image = base_;
    r.home_size = kForkHomeSize;
    ASSERT_TRUE(store_->Create(r).ok());
  }

  LiveDisks Disks(const std::string& name) {
    return store_->LiveDiskPaths(name, *store_->LoadConfig(name));
  }
  void Session(const std::string& name, int pattern) {
    LiveDisks d = Disks(name);
    GuestWrite(d.system.path, d.system.format, kForkSysOff, 4096, pattern);
    GuestWrite(d.home.path, d.home.format, kForkHomeOff, 4096, pattern);
  }
  bool Sees(const std::string& name, int pattern) {
    LiveDisks d = Disks(name);
    return GuestReads(d.system.path, d.system.format, kForkSysOff, 4096, pattern) &&
           GuestReads(d.home.path, d.home.format, kForkHomeOff, 4096, pattern);
  }
  Result<ForkResult> Fork(const std::string& name, std::string checkpoint = "") {
    ForkRequest f;
    f.source = "src";
    f.name = name;
    f.checkpoint = std::move(checkpoint);
    return store_->Fork(f);
  }
  std::string Read(const std::string& path) { return Env::Default()->ReadFile(path).value_or(""); }

  testing::TempDir tmp_;
  testing::FakeClock clock_;
  std::string base_, root_, copied_;
  std::unique_ptr<Store> store_;
};

// A chain of three layers (a checkpoint between two sessions) forks into the fork's own files;
// then each side's writes stay its own.
TEST_F(ForkTest, ForkStartsAsTheSourceAndThenDiverges) {
  Session("src", 0x11);
  ASSERT_TRUE(store_->CreateCheckpoint("src").ok());
  Session("src", 0x22);
  Result<ForkResult> f = Fork("f1");
  ASSERT_TRUE(f.ok()) << f.error().ToString();
  EXPECT_TRUE(Sees("f1", 0x22));
  Session("f1", 0x33);
  EXPECT_TRUE(Sees("src", 0x22));
  Session("src", 0x44);
  EXPECT_TRUE(Sees("f1", 0x33));
  EXPECT_TRUE(f->config.checkpoints.empty());
  EXPECT_EQ(testing::CheckStore(root_, /*no_garbage=*/true), "");
  // The fork's first start merges the copied chain like any other.
  ASSERT_TRUE(store_->EnsureSystemDisk(*store_->LockWorkspace("f1")).ok());
  EXPECT_TRUE(Sees("f1", 0x33));
}

// SECURITY: no file of the fork is a file of the source (no hard link), no backing name points
// into the source's directory, and removing the source leaves the fork reading what it did.
TEST_F(ForkTest, RemovingTheSourceNeverBreaksAFork) {
  Session("src", 0x11);
  ASSERT_TRUE(store_->CreateCheckpoint("src").ok());
  Session("src", 0x22);
  ASSERT_TRUE(Fork("f1").ok());
  WorkspacePaths sp = store_->Paths("src"), fp = store_->Paths("f1");
  WorkspaceConfig fc = *store_->LoadConfig("f1");
  std::set<uint64_t> source_inodes;
  WorkspaceConfig sc = *store_->LoadConfig("src");
  for (const DiskLayer& l : sc.layers) {
    source_inodes.insert(Env::Default()->Stat(sp.dir + "/" + l.file)->inode);
  }
  for (const DiskLayer& l : fc.layers) {
    std::string path = fp.dir + "/" + l.file;
    EXPECT_EQ(source_inodes.count(Env::Default()->Stat(path)->inode), 0u) << l.file;
    std::string backing = testing::BackingOf(path);
    EXPECT_FALSE(StartsWith(backing, sp.dir + "/")) << l.file << " -> " << backing;
    if (!backing.empty()) {
      EXPECT_TRUE(backing == base_ || StartsWith(backing, fp.dir + "/")) << backing;
    }
  }
  ASSERT_TRUE(store_->Remove("src").ok());
  EXPECT_TRUE(Sees("f1", 0x22));
  EXPECT_EQ(testing::CheckStore(root_, /*no_garbage=*/true), "");
}

// SECURITY: a fork is a new workspace, not a clone of the source's identity.
TEST_F(ForkTest, AForkHasItsOwnIdentityAndNoCredentials) {
  ASSERT_TRUE(store_->UpdateConfig("src", [](WorkspaceConfig& c) {
    c.extra["ports"] = nlohmann::json::array({"8080:80"});
    c.extra["egress"] = nlohmann::json::object({{"allow", {"example.com"}}});
    return OkStatus();
  }).ok());
  WorkspacePaths sp = store_->Paths("src");
  ASSERT_TRUE(Env::Default()->WriteFile(sp.suspend_state, "RAM").ok());
  ASSERT_TRUE(Env::Default()->WriteFile(sp.trace_log, "{}\n").ok());
  ASSERT_TRUE(store_->CreateCheckpoint("src").ok());
  ForkRequest req;
  req.source = "src";
  req.name = "f1";
  req.drop_settings = {"ports"};
  Result<ForkResult> f = store_->Fork(req);
  ASSERT_TRUE(f.ok()) << f.error().ToString();
  WorkspaceConfig s = *store_->LoadConfig("src");
  WorkspacePaths fp = store_->Paths("f1");
  EXPECT_NE(f->config.id, s.id);
  EXPECT_NE(f->config.mac, s.mac);
  EXPECT_FALSE(f->config.mac.empty());
  EXPECT_EQ(f->config.image.sha256, s.image.sha256);
  for (const char* file : {"/secrets.enc", "/ssh/id_ed25519.pub", "/ssh/sshd_host_ed25519_key"}) {
    EXPECT_FALSE(Read(fp.dir + file).empty()) << file;
    EXPECT_NE(Read(fp.dir + file), Read(sp.dir + file)) << file;
  }
  EXPECT_FALSE(Env::Default()->Exists(fp.suspend_state));
  EXPECT_FALSE(Env::Default()->Exists(fp.trace_log));
  EXPECT_FALSE(Env::Default()->Exists(fp.checkpoints_dir));
  EXPECT_EQ(f->config.extra.count("ports"), 0u);
  EXPECT_EQ(f->config.extra.count("egress"), 1u);
  EXPECT_TRUE(copied_.empty());  // no credentials unless asked
  req.name = "f2";
  req.with_credentials = true;
  ASSERT_TRUE(store_->Fork(req).ok());
  EXPECT_TRUE(StartsWith(copied_, "src " + sp.dir + " f2 " + root_ + "/staging/f2.")) << copied_;
}

// A running source is forked from a checkpoint its supervisor took: the fork reads that moment,
// not what the source wrote after it.
TEST_F(ForkTest, ForkOfACheckpointReadsTheCheckpoint) {
  Session("src", 0x11);
  std::string id = store_->CreateCheckpoint("src")->id;
  Session("src", 0x22);
  ASSERT_TRUE(Fork("f1", id).ok());
  EXPECT_TRUE(Sees("f1", 0x11));
  Result<ForkResult> missing = Fork("f2", "20990101-000000");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
}

// SECURITY (fail closed): a source file that changes while it is copied (a running source's
// supervisor merging or pruning) makes the fork fail and leave nothing behind.
TEST_F(ForkTest, ASourceChangedDuringTheCopyIsRefused) {
  Session("src", 0x11);
  std::string id = store_->CreateCheckpoint("src")->id;
  Session("src", 0x22);
  WorkspaceConfig s = *store_->LoadConfig("src");
  std::string victim = store_->Paths("src").dir + "/" + s.FindCheckpoint(id)->home;
  ForkRequest req;
  req.source = "src";
  req.name = "f1";
  req.checkpoint = id;
  bool touched = false;
  req.progress = [&](uint64_t, uint64_t) {
    if (touched) return;
    touched = true;
    testing::GuestWrite(victim, DiskFormat::kRaw, kForkHomeOff, 4096, 0x55);
  };
  Result<ForkResult> f = store_->Fork(req);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message().find("changed while it was being copied"), std::string::npos)
      << f.error().ToString();
  EXPECT_FALSE(Env::Default()->Exists(store_->Paths("f1").dir));
  EXPECT_EQ(testing::CheckStore(root_, /*no_garbage=*/true), "");
}

TEST_F(ForkTest, RefusesACompromisedSourceAndAnExistingName) {
  ASSERT_TRUE(store_->MarkCompromised("src", "placeholder to evil.example").ok());
  Result<ForkResult> f = Fork("f1");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), ErrorCode::kCompromised);
  ASSERT_TRUE(store_->Wipe("src").ok());
  ASSERT_TRUE(Fork("f1").ok());
  Result<ForkResult> again = Fork("f1");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kAlreadyExists);
  Result<ForkResult> self = Fork("src");
  ASSERT_FALSE(self.ok());
}

TEST_F(ForkTest, CredentialsWithoutACopierAreRefused) {
  StoreOptions o;
  o.system_disk_mode = SystemDiskMode::kQcow2;
  std::unique_ptr<Store> bare = std::move(Store::Open(root_, o)).value();
  ForkRequest req;
  req.source = "src";
  req.name = "f1";
  req.with_credentials = true;
  Result<ForkResult> f = bare->Fork(req);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), ErrorCode::kUnavailable);
  EXPECT_FALSE(Env::Default()->Exists(store_->Paths("f1").dir));
}

}  // namespace
}  // namespace cloister

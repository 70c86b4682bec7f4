// The encrypted browser profile disk without a VM: creation (LUKS qcow2 holding an ext4, key in
// the vault), the key's path into qemu-img (a pipe, never argv or env), data written through
// QEMU's LUKS layer is not on the host's disk in plaintext, a wrong key opens nothing, fail-closed
// refusals, DestroyProfile, and the store hooks (wipe-home/wipe/rm destroy it, reset keeps it).
#include "browser/profile_disk.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "store/store.h"
#include "store/test_util.h"
#include "vault/crypto.h"
#include "vault/vault.h"

namespace cloister::browser {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kSize = 64ull << 20;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t CountHits(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

class ProfileDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    fs::create_directories(tmp_.Sub("keys"));
    fs::create_directories(tmp_.Sub("ws"));
    loc_ = ProfileLocation{tmp_.Sub("keys"), tmp_.Sub("ws"), "web"};
  }
  void TearDown() override {
    if (!old_path_.empty()) setenv("PATH", old_path_.c_str(), 1);
  }

  std::string VaultKey() {
    auto v = vault::Vault::Open({loc_.keys_dir, loc_.SecretsPath(), loc_.workspace});
    EXPECT_TRUE(v.ok()) << v.error().ToString();
    if (!v.ok()) return "";
    const std::string* b = v->FindBlob(kProfileKeyBlob);
    return b ? *b : "";
  }

  // Puts a `qemu-img` first in PATH that logs its argv, environment and stdin's kind to `log`,
  // then runs the real one (or fails, with `fail`).
  std::string WrapQemuImg(bool fail) {
    std::string bin = tmp_.Sub("bin");
    fs::create_directories(bin);
    std::string log = tmp_.Sub("qemu-img.log");
    auto real = RunProcessChecked({"sh", "-c", "command -v qemu-img"});
    EXPECT_TRUE(real.ok());
    std::string real_path = real.ok() ? real->out.substr(0, real->out.find('\n')) : "";
    std::ofstream(bin + "/qemu-img")
        << "#!/bin/sh\n"
        << "{ echo ARGV: \"$@\"; env; echo STDIN: $(readlink /proc/self/fd/0); } >> " << log
        << "\n"
        << (fail ? "exit 3\n" : "exec " + real_path + " \"$@\"\n");
    fs::permissions(bin + "/qemu-img", fs::perms::owner_all);
    old_path_ = getenv("PATH");
    setenv("PATH", (bin + ":" + old_path_).c_str(), 1);
    return log;
  }

  // Writes `data` at `offset` through QEMU's LUKS layer (qemu-io with the passphrase on a pipe).
  Status WriteThroughLuks(const std::string& passphrase, const std::string& data, uint64_t offset) {
    std::string src = tmp_.Sub("src.bin");
    std::ofstream(src, std::ios::binary) << data;
    RunOptions run;
    run.stdin_data = passphrase;
    auto r = RunProcess({"qemu-io", "--object", "secret,id=s0,file=/dev/fd/0", "--image-opts",
                         "driver=qcow2,file.filename=" + loc_.DiskPath() + ",encrypt.key-secret=s0",
                         "-c", "write -s " + src + " " + std::to_string(offset) + " " +
                                   std::to_string(data.size())},
                        run);
    if (!r.ok()) return r.error();
    if (!r->success() || r->out.find("wrote") == std::string::npos) {
      return Error(ErrorCode::kIo, "qemu-io write: " + r->out + r->err);
    }
    return OkStatus();
  }

  // The guest's view of the disk as plain bytes (qemu-img convert with the passphrase).
  Result<std::string> ReadThroughLuks(const std::string& passphrase) {
    std::string out = tmp_.Sub("plain.raw");
    RunOptions run;
    run.stdin_data = passphrase;
    ASSIGN_OR_RETURN(RunOutput r, RunProcessChecked(
        {"qemu-img", "convert", "--object", "secret,id=s0,file=/dev/fd/0", "--image-opts",
         "driver=qcow2,file.filename=" + loc_.DiskPath() + ",encrypt.key-secret=s0", "-O", "raw",
         out}, run));
    (void)r;
    std::string bytes = ReadAll(out);
    fs::remove(out);
    return bytes;
  }

  testing::TempDir tmp_;
  ProfileLocation loc_;
  std::string old_path_;
};

TEST_F(ProfileDiskTest, CreatesALuksQcow2HoldingAnExt4WithItsKeyInTheVault) {
  auto d = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  EXPECT_EQ(d->path, loc_.DiskPath());
  EXPECT_EQ(d->virtual_size, kSize);
  EXPECT_EQ(d->key.size(), kProfileKeyBytes);
  EXPECT_EQ(VaultKey(), d->key);
  struct stat st;
  ASSERT_EQ(stat(d->path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto info = RunProcessChecked({"qemu-img", "info", d->path});
  ASSERT_TRUE(info.ok());
  EXPECT_NE(info->out.find("encrypted: yes"), std::string::npos) << info->out;
  EXPECT_NE(info->out.find("format: luks"), std::string::npos) << info->out;
  // The guest sees an ext4 labelled cloister-profile (superblock magic at 1080, label at 1144).
  auto plain = ReadThroughLuks(d->Passphrase());
  ASSERT_TRUE(plain.ok()) << plain.error().ToString();
  ASSERT_GT(plain->size(), 2048u);
  EXPECT_EQ(plain->substr(1080, 2), std::string("\x53\xef", 2));
  EXPECT_EQ(plain->substr(1144, std::string(kProfileLabel).size()), kProfileLabel);
  // No creation temporary (the plaintext ext4) survives.
  for (const auto& e : fs::directory_iterator(loc_.workspace_dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  // A second call reuses disk and key.
  ino_t ino = st.st_ino;
  auto again = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(again->key, d->key);
  ASSERT_EQ(stat(d->path.c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, ino);
}

// SECURITY property: the key reaches qemu-img on a pipe only (never argv or environment).
TEST_F(ProfileDiskTest, QemuImgGetsTheKeyOnAPipeNeverInArgvOrEnvironment) {
  std::string log = WrapQemuImg(/*fail=*/false);
  auto d = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  std::string text = ReadAll(log);
  ASSERT_NE(text.find("ARGV: convert"), std::string::npos) << text;
  EXPECT_NE(text.find("STDIN: pipe:"), std::string::npos) << text;
  const std::string pass = d->Passphrase();
  EXPECT_EQ(CountHits(text, pass), 0u) << "passphrase in qemu-img's argv or environment";
  EXPECT_EQ(CountHits(text, vault::Base64Encode(pass)), 0u);
  EXPECT_EQ(CountHits(text, d->key), 0u);
  // ...and in no file of the workspace directory but the encrypted secrets file.
  for (const auto& e : fs::recursive_directory_iterator(tmp_.path())) {
    if (!e.is_regular_file() || e.path() == loc_.SecretsPath()) continue;
    std::string bytes = ReadAll(e.path());
    EXPECT_EQ(CountHits(bytes, pass), 0u) << e.path();
    EXPECT_EQ(CountHits(bytes, d->key), 0u) << e.path();
  }
}

TEST_F(ProfileDiskTest, AFailedCreationLeavesNoPlaintextTemporary) {
  WrapQemuImg(/*fail=*/true);
  auto d = EnsureProfileDisk(loc_, kSize);
  ASSERT_FALSE(d.ok());
  EXPECT_FALSE(fs::exists(loc_.DiskPath()));
  for (const auto& e : fs::directory_iterator(loc_.workspace_dir)) {
    EXPECT_EQ(e.path().filename().string().find("browser-profile"), std::string::npos) << e.path();
  }
}

// SECURITY property: what the guest writes is not on the host's disk in plaintext. The same
// write to an unencrypted qcow2 is found (the search itself works), and the key reads it back.
TEST_F(ProfileDiskTest, DataWrittenThroughLuksIsNotInTheFileButReadsBackWithTheKey) {
  auto d = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  const std::string marker = "cookie:session=ZX81-profile-marker-4f1c9e";
  std::string data;
  while (data.size() < 4096) data += marker + "\n";
  data.resize(4096);
  ASSERT_TRUE(WriteThroughLuks(d->Passphrase(), data, 8 << 20).ok());
  EXPECT_EQ(CountHits(ReadAll(loc_.DiskPath()), marker), 0u) << "plaintext on the host's disk";
  auto plain = ReadThroughLuks(d->Passphrase());
  ASSERT_TRUE(plain.ok()) << plain.error().ToString();
  EXPECT_GT(CountHits(*plain, marker), 10u);
  // Control: the same write to a plain qcow2 is found by the same search.
  std::string control = tmp_.Sub("control.qcow2");
  ASSERT_TRUE(RunProcessChecked({"qemu-img", "create", "-q", "-f", "qcow2", control, "64M"}).ok());
  testing::GuestWriteBytes(control, layout::DiskFormat::kQcow2, 8 << 20, data);
  EXPECT_GT(CountHits(ReadAll(control), marker), 10u);
}

TEST_F(ProfileDiskTest, AWrongKeyOpensNothing) {
  auto d = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  auto wrong = ReadThroughLuks(vault::Base64Encode(std::string(32, 'x')));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().ToString().find("Invalid password"), std::string::npos)
      << wrong.error().ToString();
}

// SECURITY property (fail closed): a profile disk that is not encrypted is never handed out.
TEST_F(ProfileDiskTest, RefusesAnUnencryptedDiskAndADiskWithoutItsKey) {
  auto d = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  fs::remove(loc_.DiskPath());
  ASSERT_TRUE(
      RunProcessChecked({"qemu-img", "create", "-q", "-f", "qcow2", loc_.DiskPath(), "64M"}).ok());
  auto plain = EnsureProfileDisk(loc_, kSize);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.error().code(), ErrorCode::kCorrupt);
  EXPECT_NE(plain.error().hint().find("forget"), std::string::npos);
  // Disk without key: refused, not silently given a new key.
  ASSERT_TRUE(DestroyProfile(loc_).ok());
  ASSERT_TRUE(EnsureProfileDisk(loc_, kSize).ok());
  auto v = vault::Vault::Open({loc_.keys_dir, loc_.SecretsPath(), loc_.workspace});
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->RemoveBlob(kProfileKeyBlob).ok());
  ASSERT_TRUE(v->Save().ok());
  auto keyless = EnsureProfileDisk(loc_, kSize);
  ASSERT_FALSE(keyless.ok());
  EXPECT_EQ(keyless.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(VaultKey(), "");
}

// SECURITY property (fail closed, hostile header): only a LUKS qcow2 without backing passes.
TEST(ProfileDiskInfoTest, AcceptsOnlyALuksQcow2WithoutBacking) {
  const std::string luks =
      R"({"virtual-size": 67108864, "format": "qcow2", "format-specific": {"type": "qcow2",)"
      R"( "data": {"encrypt": {"format": "luks"}}}})";
  auto ok = ParseProfileDiskInfo(luks);
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(*ok, 67108864u);
  for (const char* bad : {
           R"({"virtual-size": 1, "format": "qcow2", "format-specific": {"data": {}}})",
           R"({"virtual-size": 1, "format": "raw", "format-specific": {"data": {"encrypt": {"format": "luks"}}}})",
           R"({"virtual-size": 1, "format": "qcow2", "backing-filename": "/etc/shadow", "format-specific": {"data": {"encrypt": {"format": "luks"}}}})",
           R"({"virtual-size": "1", "format": "qcow2", "format-specific": {"data": {"encrypt": {"format": "luks"}}}})",
           R"({"virtual-size": 1, "format": 7, "format-specific": {"data": {"encrypt": {"format": "luks"}}}})",
           R"({"virtual-size": 1, "format": "qcow2", "format-specific": {"data": {"encrypt": ["luks"]}}})",
           R"([1,2)", ""}) {
    auto r = ParseProfileDiskInfo(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt) << bad;
    }
  }
}

TEST_F(ProfileDiskTest, DestroyDropsDiskAndKeyAndIsIdempotent) {
  auto d = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  ASSERT_TRUE(*ProfileExists(loc_));
  ASSERT_TRUE(DestroyProfile(loc_).ok());
  EXPECT_FALSE(fs::exists(loc_.DiskPath()));
  EXPECT_EQ(VaultKey(), "");
  EXPECT_FALSE(*ProfileExists(loc_));
  EXPECT_TRUE(DestroyProfile(loc_).ok());
  // A new profile gets a new key.
  auto fresh = EnsureProfileDisk(loc_, kSize);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->key, d->key);
}

// SECURITY property: wipe-home, wipe and rm destroy the kept profile (disk and key); reset keeps it.
TEST_F(ProfileDiskTest, StoreVerbsDestroyTheProfileExceptReset) {
  std::string base = tmp_.Sub("base.raw");
  testing::MakeBaseImage(base, 64ull << 20);
  StoreOptions o;
  o.system_disk_mode = SystemDiskMode::kQcow2;
  std::string root = tmp_.Sub("store");
  std::string keys = root + "/" + std::string(layout::kKeysDir);
  o.destroy_browser_profile = DestroyProfileHook(keys);
  auto store = Store::Open(root, o);
  ASSERT_TRUE(store.ok());
  CreateRequest r;
  r.name = "web";
  r.image = base;
  r.home_size = 64ull << 20;
  ASSERT_TRUE((*store)->Create(r).ok());
  fs::create_directories(keys);
  ProfileLocation loc{keys, (*store)->Paths("web").dir, "web"};
  auto make = [&] {
    auto d = EnsureProfileDisk(loc, kSize);
    EXPECT_TRUE(d.ok()) << d.error().ToString();
    return d.ok() ? d->key : "";
  };
  auto key_in_vault = [&] {
    auto v = vault::Vault::Open({keys, loc.SecretsPath(), "web"});
    return v.ok() && v->FindBlob(kProfileKeyBlob) != nullptr;
  };
  std::string k1 = make();
  ASSERT_TRUE((*store)->Reset("web").ok());
  EXPECT_TRUE(fs::exists(loc.DiskPath())) << "reset keeps the profile";
  EXPECT_TRUE(key_in_vault());
  ASSERT_TRUE((*store)->WipeHome("web").ok());
  EXPECT_FALSE(fs::exists(loc.DiskPath())) << "wipe-home destroys the profile disk";
  EXPECT_FALSE(key_in_vault()) << "wipe-home destroys the profile key";
  make();
  ASSERT_TRUE((*store)->Wipe("web").ok());
  EXPECT_FALSE(fs::exists(loc.DiskPath())) << "wipe destroys the profile disk";
  EXPECT_FALSE(key_in_vault()) << "wipe destroys the profile key";
  make();
  ASSERT_TRUE((*store)->Remove("web").ok());
  EXPECT_FALSE(fs::exists(loc.DiskPath()));
  EXPECT_FALSE(fs::exists(loc.SecretsPath()));
  EXPECT_FALSE(fs::exists(loc.workspace_dir));
}

}  // namespace
}  // namespace cloister::browser

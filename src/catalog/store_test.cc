#include "catalog/store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "catalog/sha256.h"
#include "catalog/signing.h"
#include "catalog/testdata.h"

namespace cloister::catalog {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// An image entry whose artifacts exist in `dir` with matching sizes and hashes.
ImageEntry MakeArtifacts(const std::string& dir, const std::string& name, const std::string& seed) {
  ImageEntry e = testdata::Entry(name, std::string(64, 'a'));
  for (auto& a : e.artifacts) {
    std::string data = seed + "/" + a.file + std::string(a.role == kRoleDisk ? 70000 : 10, 'x');
    Write(dir + "/" + a.file, data);
    a.size = data.size();
    a.sha256 = Sha256Hex(data);
  }
  return e;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/cloister-catalog-XXXXXX";
    tmp_ = mkdtemp(t);
    store_root_ = tmp_ + "/store";
    fs::create_directories(store_root_);
    store_ = std::make_unique<CatalogStore>(store_root_);
    auto k = PublisherKey::Generate();
    ASSERT_TRUE(k.ok());
    remote_ = std::make_unique<PublisherKey>(*k);
  }
  void TearDown() override { fs::remove_all(tmp_); }

  // A publisher's directory: catalog (channel, sequence) of one image, signed by `key`.
  std::string Publish(const std::string& channel, uint64_t seq, const PublisherKey& key,
                      const std::string& seed = "v1", bool with_sig = true,
                      const std::string& image = "remote") {
    std::string dir = tmp_ + "/pub-" + channel + "-" + std::to_string(seq) + "-" + seed +
                      std::to_string(counter_++);
    Catalog c;
    c.channel = channel;
    c.sequence = seq;
    c.signed_at = 1704067200 + static_cast<int64_t>(seq);
    c.images.push_back(MakeArtifacts(dir + "/" + image, image, seed));
    Write(dir + "/catalog.json", SerializeCatalog(c));
    if (with_sig) {
      auto sig = key.Sign(CanonicalBytes(c));
      EXPECT_TRUE(sig.ok());
      Write(dir + "/catalog.json.sig", SerializeSignature({key.key_id(), *sig}));
    }
    return dir;
  }

  void TrustRemote(const std::string& channel) {
    ASSERT_TRUE(store_->TrustKey(FormatPublicKey(remote_->public_key(), "remote"), channel).ok());
  }

  Rejection ImportRejection(const std::string& dir, const std::string& channel) {
    auto r = store_->Import(dir, channel);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return Rejection::kMalformed;
    auto reason = RejectionOf(r.error());
    EXPECT_TRUE(reason.has_value()) << r.error().ToString();
    return reason.value_or(Rejection::kMalformed);
  }

  // Nothing adopted and nothing left in images/ (no staging directories either).
  void ExpectNothingAdopted(const std::string& channel) {
    auto c = store_->LoadAdopted(channel);
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(c->has_value());
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(store_root_ + "/images", ec)) {
      ADD_FAILURE() << "left behind: " << e.path();
    }
  }

  std::string tmp_, store_root_;
  std::unique_ptr<CatalogStore> store_;
  std::unique_ptr<PublisherKey> remote_;
  int counter_ = 0;
};

TEST_F(StoreTest, LocalBuildIsSignedAdoptedAndResolvable) {
  std::string built = tmp_ + "/built";
  ImageEntry e = MakeArtifacts(built, "test", "a");
  ASSERT_TRUE(store_->PublishLocal(e, built).ok());
  auto r = store_->Resolve("test", Rehash::kYes);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->channel, "local");
  EXPECT_EQ(r->sha256, e.FindArtifact(kRoleDisk)->sha256);
  EXPECT_EQ(r->disk_path, store_root_ + "/images/test/disk.raw");
  EXPECT_EQ(Read(r->disk_path).substr(0, 11), "a/disk.raw" + std::string("x"));
  EXPECT_FALSE(fs::exists(built));  // moved, not copied

  // The private key is 0600 and its public half is trusted for "local" only.
  struct stat st;
  ASSERT_EQ(stat((store_root_ + "/keys/publisher.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto keyring = Keyring::Load(store_->KeyringPath());
  ASSERT_TRUE(keyring.ok());
  ASSERT_EQ(keyring->keys().size(), 1u);
  EXPECT_EQ(keyring->keys()[0].channels, std::vector<std::string>{"local"});

  // A second build of another image bumps the sequence and keeps the first.
  std::string built2 = tmp_ + "/built2";
  ASSERT_TRUE(store_->PublishLocal(MakeArtifacts(built2, "other", "b"), built2).ok());
  auto c = store_->LoadAdopted("local");
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->sequence, 2u);
  EXPECT_EQ((*c)->images.size(), 2u);
  auto list = store_->ListImages();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_TRUE((*list)[0].present && (*list)[1].present);
}

TEST_F(StoreTest, ImportOfTrustedCatalogInstallsVerifiedArtifacts) {
  TrustRemote("stable");
  auto c = store_->Import(Publish("stable", 3, *remote_), "stable");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  auto r = store_->Resolve("remote", Rehash::kYes);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->channel, "stable");
  // Same sequence, same content: idempotent. Newer sequence: adopted.
  EXPECT_TRUE(store_->Import(Publish("stable", 3, *remote_), "stable").ok());
  EXPECT_TRUE(store_->Import(Publish("stable", 4, *remote_, "v2"), "").ok());
  EXPECT_EQ((*store_->LoadAdopted("stable"))->sequence, 4u);
}

TEST_F(StoreTest, MissingSignatureIsRejected) {
  TrustRemote("stable");
  EXPECT_EQ(ImportRejection(Publish("stable", 1, *remote_, "v1", /*with_sig=*/false), "stable"),
            Rejection::kMissingSignature);
  ExpectNothingAdopted("stable");
}

TEST_F(StoreTest, BadSignatureIsRejected) {
  TrustRemote("stable");
  std::string dir = Publish("stable", 1, *remote_);
  // Change one signed field after signing.
  std::string text = Read(dir + "/catalog.json");
  text.replace(text.find("1+linux-6.1"), 11, "2+linux-6.1");
  Write(dir + "/catalog.json", text);
  EXPECT_EQ(ImportRejection(dir, "stable"), Rejection::kBadSignature);
  // A garbled signature file is as bad.
  std::string dir2 = Publish("stable", 1, *remote_);
  Write(dir2 + "/catalog.json.sig", "cloister-catalog-sig-v1 ed25519 zz\n");
  EXPECT_EQ(ImportRejection(dir2, "stable"), Rejection::kBadSignature);
  ExpectNothingAdopted("stable");
}

TEST_F(StoreTest, UnknownKeyIsRejected) {
  EXPECT_EQ(ImportRejection(Publish("stable", 1, *remote_), "stable"), Rejection::kUnknownKey);
  ExpectNothingAdopted("stable");
}

TEST_F(StoreTest, KeyTrustedForAnotherChannelIsRejected) {
  TrustRemote("stable");
  EXPECT_EQ(ImportRejection(Publish("beta", 1, *remote_), ""), Rejection::kKeyNotForChannel);
  ExpectNothingAdopted("beta");
}

TEST_F(StoreTest, CatalogOfAnotherChannelIsRejected) {
  TrustRemote("stable");
  TrustRemote("beta");
  // Validly signed for "beta", presented as "stable": the channel is in the signed bytes.
  EXPECT_EQ(ImportRejection(Publish("beta", 9, *remote_), "stable"), Rejection::kWrongChannel);
  ExpectNothingAdopted("stable");
  ExpectNothingAdopted("beta");
}

TEST_F(StoreTest, RollbackIsRejected) {
  TrustRemote("stable");
  ASSERT_TRUE(store_->Import(Publish("stable", 5, *remote_), "stable").ok());
  EXPECT_EQ(ImportRejection(Publish("stable", 4, *remote_), "stable"), Rejection::kRollback);
  // Same sequence, different content: also refused.
  EXPECT_EQ(ImportRejection(Publish("stable", 5, *remote_, "other"), "stable"),
            Rejection::kRollback);
  EXPECT_EQ((*store_->LoadAdopted("stable"))->sequence, 5u);
  EXPECT_TRUE(store_->Resolve("remote", Rehash::kYes).ok());
}

TEST_F(StoreTest, ArtifactWithWrongHashOrSizeIsRejected) {
  TrustRemote("stable");
  std::string dir = Publish("stable", 1, *remote_);
  std::string disk = dir + "/remote/disk.raw";
  const std::string original = Read(disk);
  std::string data = original;
  data[100] ^= 1;  // same size, different bytes
  Write(disk, data);
  EXPECT_EQ(ImportRejection(dir, "stable"), Rejection::kArtifactMismatch);
  ExpectNothingAdopted("stable");
  Write(disk, data + "x");
  EXPECT_EQ(ImportRejection(dir, "stable"), Rejection::kArtifactMismatch);
  ExpectNothingAdopted("stable");
  Write(disk, original);
  fs::remove(dir + "/remote/vmlinuz");
  EXPECT_EQ(ImportRejection(dir, "stable"), Rejection::kMissingArtifact);
  ExpectNothingAdopted("stable");
}

TEST_F(StoreTest, MalformedOrTruncatedCatalogIsRejected) {
  TrustRemote("stable");
  std::string dir = Publish("stable", 1, *remote_);
  std::string text = Read(dir + "/catalog.json");
  Write(dir + "/catalog.json", text.substr(0, text.size() - 20));
  EXPECT_EQ(ImportRejection(dir, "stable"), Rejection::kMalformed);
  ExpectNothingAdopted("stable");
}

TEST_F(StoreTest, TamperingAfterAdoptionIsCaught) {
  std::string built = tmp_ + "/built";
  ASSERT_TRUE(store_->PublishLocal(MakeArtifacts(built, "test", "a"), built).ok());
  std::string disk = store_root_ + "/images/test/disk.raw";
  std::string data = Read(disk);
  data[5] ^= 1;
  Write(disk, data);
  // Size still matches: only a re-hash sees it.
  EXPECT_TRUE(store_->Resolve("test", Rehash::kNo).ok());
  auto r = store_->Resolve("test", Rehash::kYes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(RejectionOf(r.error()), Rejection::kArtifactMismatch);
  // Editing the adopted catalog breaks its signature: nothing resolves from it.
  std::string cat = store_root_ + "/catalogs/local/catalog.json";
  std::string text = Read(cat);
  text.replace(text.find("\"sequence\": 1"), 13, "\"sequence\": 9");
  Write(cat, text);
  auto r2 = store_->Resolve("test");
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(RejectionOf(r2.error()), Rejection::kBadSignature);
  // And a deleted signature is as fatal.
  fs::remove(store_root_ + "/catalogs/local/catalog.json.sig");
  EXPECT_EQ(RejectionOf(store_->Resolve("test").error()), Rejection::kMissingSignature);
}

// Rehash::kIfChanged (what `create` uses): the bytes hashed at build time are trusted only while
// the file is the very same (inode, size, mtime, ctime); any write means a full re-hash.
TEST_F(StoreTest, IfChangedRehashesAnyWrittenFileEvenWithItsMtimePutBack) {
  std::string built = tmp_ + "/built";
  ImageEntry e = MakeArtifacts(built, "test", "a");
  ASSERT_TRUE(store_->PublishLocal(e, built).ok());
  std::string verified = store_root_ + "/images/test/verified.json";
  ASSERT_TRUE(fs::exists(verified));  // recorded at publish: the builder hashed these bytes
  ASSERT_TRUE(store_->Resolve("test", Rehash::kIfChanged).ok());

  std::string disk = store_root_ + "/images/test/disk.raw";
  struct stat before;
  ASSERT_EQ(stat(disk.c_str(), &before), 0);
  std::string data = Read(disk);
  auto write_in_place = [&](const std::string& bytes) {
    std::fstream f(disk, std::ios::in | std::ios::out | std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(utimensat(AT_FDCWD, disk.c_str(), times, 0), 0);
  };
  std::string tampered = data;
  tampered[7] ^= 1;
  write_in_place(tampered);
  auto r = store_->Resolve("test", Rehash::kIfChanged);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(RejectionOf(r.error()), Rejection::kArtifactMismatch);
  EXPECT_EQ(RejectionOf(store_->Resolve("test").error()), Rejection::kArtifactMismatch)
      << "the default is kIfChanged";

  // The original bytes back: a re-hash proves them, and the new identity is recorded.
  std::string old_record = Read(verified);
  write_in_place(data);
  ASSERT_TRUE(store_->Resolve("test", Rehash::kIfChanged).ok());
  EXPECT_NE(Read(verified), old_record);

  // A record whose digest is not the catalog's is not trusted, whatever its file identity.
  std::string rec = Read(verified);
  std::string sha = e.FindArtifact(kRoleDisk)->sha256;
  rec.replace(rec.find(sha), sha.size(), std::string(64, 'f'));
  Write(verified, rec);
  ASSERT_TRUE(store_->Resolve("test", Rehash::kIfChanged).ok());  // re-hashed: bytes are right
  EXPECT_NE(Read(verified).find(sha), std::string::npos);
}

TEST_F(StoreTest, ReproducibleRebuildKeepsTheFilesWorkspacesUse) {
  std::string built = tmp_ + "/built";
  ASSERT_TRUE(store_->PublishLocal(MakeArtifacts(built, "test", "a"), built).ok());
  std::string disk = store_root_ + "/images/test/disk.raw";
  struct stat first;
  ASSERT_EQ(stat(disk.c_str(), &first), 0);
  // Same bytes again: the files in place stay (same inode and mtime: overlays stay valid).
  std::string again = tmp_ + "/again";
  ASSERT_TRUE(store_->PublishLocal(MakeArtifacts(again, "test", "a"), again).ok());
  struct stat second;
  ASSERT_EQ(stat(disk.c_str(), &second), 0);
  EXPECT_EQ(second.st_ino, first.st_ino);
  EXPECT_EQ(second.st_mtim.tv_nsec, first.st_mtim.tv_nsec);
  EXPECT_FALSE(fs::exists(again));
  EXPECT_EQ((*store_->LoadAdopted("local"))->sequence, 2u);
  // Different bytes replace them.
  std::string other = tmp_ + "/other";
  ImageEntry changed = MakeArtifacts(other, "test", "b");
  ASSERT_TRUE(store_->PublishLocal(changed, other).ok());
  struct stat third;
  ASSERT_EQ(stat(disk.c_str(), &third), 0);
  EXPECT_NE(third.st_ino, first.st_ino);
  auto r = store_->Resolve("test", Rehash::kYes);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sha256, changed.FindArtifact(kRoleDisk)->sha256);
}

TEST_F(StoreTest, UnknownImageIsNotFoundAndBadNamesAreRefused) {
  EXPECT_EQ(store_->Resolve("debian-12").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(store_->Resolve("../../etc").error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(StoreTest, RemoveLocalDropsEntryRemoveImportedKeepsCatalog) {
  std::string built = tmp_ + "/built";
  ASSERT_TRUE(store_->PublishLocal(MakeArtifacts(built, "test", "a"), built).ok());
  ASSERT_TRUE(store_->Remove("test").ok());
  EXPECT_FALSE(fs::exists(store_root_ + "/images/test"));
  auto local = store_->LoadAdopted("local");
  ASSERT_TRUE(local.ok() && local->has_value());
  EXPECT_EQ((*local)->sequence, 2u);
  EXPECT_TRUE((*local)->images.empty());

  TrustRemote("stable");
  ASSERT_TRUE(store_->Import(Publish("stable", 2, *remote_), "stable").ok());
  ASSERT_TRUE(store_->Remove("remote").ok());
  EXPECT_EQ(RejectionOf(store_->Resolve("remote").error()), Rejection::kMissingArtifact);
  auto list = store_->ListImages();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_FALSE((*list)[0].present);
  // The catalog stays adopted: an older one still cannot come back.
  EXPECT_EQ(ImportRejection(Publish("stable", 1, *remote_), "stable"), Rejection::kRollback);
  EXPECT_EQ(store_->Remove("nothing").error().code(), ErrorCode::kNotFound);
}

TEST_F(StoreTest, ImageNamesAreUniqueAcrossChannelsAndLocalIsReserved) {
  TrustRemote("stable");
  ASSERT_TRUE(store_->Import(Publish("stable", 1, *remote_, "v1", true, "test"), "stable").ok());
  std::string built = tmp_ + "/built";
  auto s = store_->PublishLocal(MakeArtifacts(built, "test", "a"), built);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kAlreadyExists);
  EXPECT_FALSE(store_->TrustKey(FormatPublicKey(remote_->public_key(), ""), "local").ok());
}

}  // namespace
}  // namespace cloister::catalog

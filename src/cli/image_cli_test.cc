// `cloister image ...` driven in-process through RunCli.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "catalog/sha256.h"
#include "catalog/signing.h"
#include "catalog/store.h"
#include "catalog/testdata.h"
#include "cli/cli.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string out, err;
};

class ImageCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/cloister-image-cli-XXXXXX";
    tmp_ = mkdtemp(t);
    store_ = tmp_ + "/store";
  }
  void TearDown() override { fs::remove_all(tmp_); }

  CliRun Cli(std::vector<std::string> args) {
    std::vector<std::string> full{"cloister", "--store", store_};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<const char*> argv;
    for (auto& a : full) argv.push_back(a.c_str());
    std::ostringstream out, err;
    std::istringstream in;
    int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, in);
    return {code, out.str(), err.str()};
  }

  // Publishes a small fake image "test" into the local catalog, as a build would.
  void PublishFake() {
    std::string built = tmp_ + "/built";
    fs::create_directories(built);
    catalog::ImageEntry e = catalog::testdata::Entry("test", std::string(64, 'a'));
    for (auto& a : e.artifacts) {
      std::string data = a.file + std::string(5000, 'z');
      std::ofstream(built + "/" + a.file) << data;
      a.size = data.size();
      a.sha256 = catalog::Sha256Hex(data);
    }
    catalog::CatalogStore store(store_);
    ASSERT_TRUE(store.PublishLocal(e, built).ok());
  }

  std::string tmp_, store_;
};

TEST_F(ImageCliTest, LsOnEmptyStoreSaysHowToBuild) {
  CliRun r = Cli({"image", "ls"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cloister image build"), std::string::npos);
}

TEST_F(ImageCliTest, LsVerifyAndRm) {
  PublishFake();
  CliRun ls = Cli({"image", "ls", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  auto j = nlohmann::json::parse(ls.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["name"], "test");
  EXPECT_EQ(j[0]["channel"], "local");
  EXPECT_EQ(j[0]["present"], true);
  EXPECT_EQ(j[0]["post_install"][0], "boot-hook");

  CliRun v = Cli({"image", "verify", "test"});
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("ok test"), std::string::npos);

  // Flip one byte of the disk: verify fails with the artifact-mismatch rejection.
  std::string disk = store_ + "/images/test/disk.raw";
  std::fstream f(disk, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(10);
  f.put('Q');
  f.close();
  CliRun bad = Cli({"image", "verify"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("catalog rejected (artifact-mismatch)"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("Hint:"), std::string::npos);

  CliRun no = Cli({"image", "rm", "test"});  // no terminal, no --yes
  EXPECT_EQ(no.code, 1);
  EXPECT_TRUE(fs::exists(disk));
  CliRun rm = Cli({"image", "rm", "--yes", "test"});
  EXPECT_EQ(rm.code, 0) << rm.err;
  EXPECT_FALSE(fs::exists(disk));
  EXPECT_EQ(Cli({"image", "verify", "test"}).code, 1);
}

TEST_F(ImageCliTest, ImportNeedsSignatureAndTrustedKey) {
  // Another machine publishes a catalog for channel "build-host".
  auto key = catalog::PublisherKey::Generate();
  ASSERT_TRUE(key.ok());
  std::string pub = tmp_ + "/pub";
  fs::create_directories(pub + "/remote");
  catalog::ImageEntry e = catalog::testdata::Entry("remote", std::string(64, 'a'));
  for (auto& a : e.artifacts) {
    std::string data = "remote " + a.file;
    std::ofstream(pub + "/remote/" + a.file) << data;
    a.size = data.size();
    a.sha256 = catalog::Sha256Hex(data);
  }
  catalog::Catalog c;
  c.channel = "build-host";
  c.sequence = 1;
  c.signed_at = 1704067200;
  c.images = {e};
  std::ofstream(pub + "/catalog.json") << catalog::SerializeCatalog(c);

  CliRun nosig = Cli({"image", "import", pub});
  EXPECT_EQ(nosig.code, 1);
  EXPECT_NE(nosig.err.find("missing-signature"), std::string::npos) << nosig.err;

  std::ofstream(pub + "/catalog.json.sig")
      << catalog::SerializeSignature({key->key_id(), *key->Sign(catalog::CanonicalBytes(c))});
  CliRun unknown = Cli({"image", "import", pub});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("unknown-key"), std::string::npos) << unknown.err;

  std::ofstream(tmp_ + "/key.pub") << catalog::FormatPublicKey(key->public_key(), "builder");
  EXPECT_NE(Cli({"image", "trust", tmp_ + "/key.pub", "--channel", "local"}).code, 0);
  CliRun trust = Cli({"image", "trust", tmp_ + "/key.pub", "--channel", "build-host"});
  ASSERT_EQ(trust.code, 0) << trust.err;
  CliRun wrong = Cli({"image", "import", pub, "--channel", "stable"});
  EXPECT_NE(wrong.err.find("wrong-channel"), std::string::npos) << wrong.err;
  CliRun ok = Cli({"image", "import", pub});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("imported channel build-host sequence 1: remote"), std::string::npos);
  EXPECT_EQ(Cli({"image", "verify", "remote"}).code, 0);
}

TEST_F(ImageCliTest, KeyPrintsAShareablePublicKeyAndKeepsThePrivateOne0600) {
  CliRun k = Cli({"image", "key"});
  ASSERT_EQ(k.code, 0) << k.err;
  auto pub = catalog::ParsePublicKey(k.out);
  ASSERT_TRUE(pub.ok()) << k.out;
  EXPECT_EQ(pub->size(), 32u);
  EXPECT_EQ(Cli({"image", "key"}).out, k.out);  // stable
  EXPECT_EQ(fs::status(store_ + "/keys/publisher.key").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

}  // namespace
}  // namespace cloister::cli

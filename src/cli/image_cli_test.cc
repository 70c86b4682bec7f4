// `cloister image ...` driven in-process through RunCli.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "catalog/sha256.h"
#include "catalog/signing.h"
#include "catalog/store.h"
#include "catalog/testdata.h"
#include "cli/cli.h"
#include "cli/devcontainer_image.h"

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

  // Publishes a small fake image NAME into the local catalog, as a build would. Its disk is
  // 64 KiB (a raw image's size is a multiple of 512). Returns the disk's SHA-256.
  std::string PublishFake(const std::string& name = "test") {
    std::string built = tmp_ + "/built-" + name;
    fs::create_directories(built);
    catalog::ImageEntry e = catalog::testdata::Entry(name, std::string(64, 'a'));
    std::string disk_sha;
    for (auto& a : e.artifacts) {
      std::string data = a.file + std::string(5000, 'z');
      if (a.role == catalog::kRoleDisk) data.resize(64 << 10, 'd');
      std::ofstream(built + "/" + a.file) << data;
      a.size = data.size();
      a.sha256 = catalog::Sha256Hex(data);
      if (a.role == catalog::kRoleDisk) disk_sha = a.sha256;
    }
    catalog::CatalogStore store(store_);
    Status s = store.PublishLocal(e, built);
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    return disk_sha;
  }

  // Overwrites one byte of an image's disk in place, then puts its mtime back (an editor or an
  // attacker covering their tracks): only the ctime and the bytes tell.
  void TamperDisk(const std::string& name) {
    std::string disk = store_ + "/images/" + name + "/disk.raw";
    struct stat before;
    ASSERT_EQ(stat(disk.c_str(), &before), 0);
    std::fstream f(disk, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('Q');
    f.close();
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(utimensat(AT_FDCWD, disk.c_str(), times, 0), 0);
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

TEST_F(ImageCliTest, CreateByNameRecordsTheImageAndDescribeShowsIt) {
  std::string sha = PublishFake("test");
  CliRun c = Cli({"create", "ws", "--image", "test", "--home-size", "64M"});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("image:       test 1+linux-6.1 (channel local), sha256 " + sha),
            std::string::npos)
      << c.out;
  CliRun d = Cli({"describe", "ws", "--json"});
  ASSERT_EQ(d.code, 0) << d.err;
  auto img = nlohmann::json::parse(d.out)["config"]["image"];
  EXPECT_EQ(img["name"], "test");
  EXPECT_EQ(img["version"], "1+linux-6.1");
  EXPECT_EQ(img["channel"], "local");
  EXPECT_EQ(img["sha256"], sha);
  std::string dir = fs::canonical(store_ + "/images/test").string();
  EXPECT_EQ(img["path"], dir + "/disk.raw");
  EXPECT_EQ(img["kernel"], dir + "/vmlinuz");
  EXPECT_EQ(img["initrd"], dir + "/initrd.img");
  EXPECT_EQ(img["kernel_cmdline"], "root=/dev/vda rw console=ttyS0");
  CliRun h = Cli({"describe", "ws"});
  ASSERT_EQ(h.code, 0) << h.err;
  EXPECT_NE(h.out.find("Image:       test 1+linux-6.1 (channel local)"), std::string::npos)
      << h.out;
  EXPECT_NE(h.out.find("sha256:    " + sha), std::string::npos) << h.out;
}

TEST_F(ImageCliTest, CreateWithoutImageUsesTheDefaultImage) {
  PublishFake("test");
  CliRun none = Cli({"create", "ws", "--home-size", "64M"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("image \"debian-12\" is not in any verified catalog"), std::string::npos)
      << none.err;
  EXPECT_NE(none.err.find("cloister image ls"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("cloister image build"), std::string::npos) << none.err;

  std::string sha = PublishFake("debian-12");
  CliRun c = Cli({"create", "ws", "--home-size", "64M", "--json"});
  ASSERT_EQ(c.code, 0) << c.err;
  auto img = nlohmann::json::parse(c.out)["image"];
  EXPECT_EQ(img["name"], "debian-12");
  EXPECT_EQ(img["sha256"], sha);
}

TEST_F(ImageCliTest, CreateRefusesAnImageWhoseBytesNoLongerMatchTheSignedDigest) {
  PublishFake("test");
  ASSERT_EQ(Cli({"create", "before", "--image", "test", "--home-size", "64M"}).code, 0);
  TamperDisk("test");
  CliRun c = Cli({"create", "ws", "--image", "test", "--home-size", "64M"});
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("refusing to create from image \"test\""), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("catalog rejected (artifact-mismatch)"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("cloister image rm test"), std::string::npos) << c.err;
  EXPECT_FALSE(fs::exists(store_ + "/workspaces/ws"));
  // The path of the image's disk is the same image: it gets the same check.
  CliRun p = Cli({"create", "ws", "--image", store_ + "/images/test/disk.raw", "--home-size", "64M"});
  EXPECT_EQ(p.code, 1);
  EXPECT_NE(p.err.find("artifact-mismatch"), std::string::npos) << p.err;
  // And it stays refused (a failed check records nothing).
  EXPECT_EQ(Cli({"create", "ws", "--image", "test", "--home-size", "64M"}).code, 1);
  EXPECT_EQ(Cli({"image", "verify", "test"}).code, 1);
}

TEST_F(ImageCliTest, CreateWithAnUnknownNameSaysWhereImagesComeFrom) {
  PublishFake("test");
  CliRun c = Cli({"create", "ws", "--image", "nosuch", "--home-size", "64M"});
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("image \"nosuch\" is not in any verified catalog"), std::string::npos)
      << c.err;
  EXPECT_NE(c.err.find("`cloister image ls`"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("`cloister image build`"), std::string::npos) << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 2) << "error + hint: " << c.err;
  // Not an image name either: says how to pass a file.
  CliRun bad = Cli({"create", "ws", "--image", "Base.RAW", "--home-size", "64M"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("./Base.RAW"), std::string::npos) << bad.err;
}

TEST_F(ImageCliTest, CreateFromARawPathStillWorks) {
  std::string raw = tmp_ + "/base.raw";
  {
    std::ofstream f(raw, std::ios::binary);
    f << std::string(1 << 20, 'r');
  }
  CliRun c = Cli({"create", "ws", "--image", raw, "--home-size", "64M", "--json"});
  ASSERT_EQ(c.code, 0) << c.err;
  auto img = nlohmann::json::parse(c.out)["image"];
  EXPECT_EQ(img["name"], "base.raw");
  EXPECT_EQ(img["path"], fs::canonical(raw).string());
  EXPECT_EQ(img["sha256"], catalog::Sha256Hex(std::string(1 << 20, 'r')));
  EXPECT_FALSE(img.contains("channel"));
  CliRun h = Cli({"describe", "ws"});
  EXPECT_NE(h.out.find("(raw image file)"), std::string::npos) << h.out;
}

TEST_F(ImageCliTest, ImageRmIsRefusedWhileAWorkspaceUsesItAndAllowedAfterRm) {
  PublishFake("test");
  PublishFake("other");
  ASSERT_EQ(Cli({"create", "ws1", "--image", "test", "--home-size", "64M"}).code, 0);
  ASSERT_EQ(Cli({"create", "ws2", "--image", "test", "--home-size", "64M"}).code, 0);
  ASSERT_EQ(Cli({"create", "ws3", "--image", "other", "--home-size", "64M"}).code, 0);
  std::string disk = store_ + "/images/test/disk.raw";

  CliRun r = Cli({"image", "rm", "--yes", "test"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("image \"test\" is used by 2 workspaces (ws1, ws2)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cloister rm"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(disk));
  ASSERT_EQ(Cli({"image", "verify", "test"}).code, 0);  // untouched, still listed

  // A reset workspace still clones the image at its next start: still in use.
  ASSERT_EQ(Cli({"reset", "--yes", "ws1"}).code, 0);
  ASSERT_EQ(Cli({"rm", "--yes", "ws2"}).code, 0);
  r = Cli({"image", "rm", "--yes", "test"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("used by 1 workspace (ws1)"), std::string::npos) << r.err;

  ASSERT_EQ(Cli({"rm", "--yes", "ws1"}).code, 0);
  r = Cli({"image", "rm", "--yes", "test"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(disk));
  // The other image and its workspace are untouched.
  EXPECT_EQ(Cli({"image", "verify", "other"}).code, 0);
  EXPECT_EQ(Cli({"describe", "ws3"}).code, 0);
}

TEST_F(ImageCliTest, ImageRmIsRefusedWhileAWorkspaceIsBeingCreated) {
  PublishFake("test");
  ASSERT_EQ(Cli({"image", "ls"}).code, 0);
  // A create in progress: its staging directory, locked (what Store::Create holds while cloning).
  ASSERT_EQ(Cli({"create", "seed", "--image", "test", "--home-size", "64M"}).code, 0);
  ASSERT_EQ(Cli({"rm", "--yes", "seed"}).code, 0);
  std::string staging = store_ + "/staging/newws.00112233445566778899aabbccddeeff";
  fs::create_directories(staging);
  int fd = open((staging + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  CliRun r = Cli({"image", "rm", "--yes", "test"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("newws (being created)"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(store_ + "/images/test/disk.raw"));
  close(fd);  // the create "died": its staging dir is garbage now
  r = Cli({"image", "rm", "--yes", "test"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(staging));
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

// `create --devcontainer`: what is refused is refused before anything is copied or built, and
// leaves no workspace and nothing in the store (the refusals' end-to-end side of
// DevcontainerVmTest, without its boots).
TEST_F(ImageCliTest, CreateFromADevcontainerRefusesBeforeBuilding) {
  std::string repo = tmp_ + "/repo";
  fs::create_directories(repo + "/.git");
  fs::create_directories(repo + "/.devcontainer");
  auto write = [&](const std::string& text) {
    std::ofstream(repo + "/.devcontainer/devcontainer.json") << text;
  };
  const std::string secret = "ghp_" + std::string(36, 'Q');
  // No Dockerfile: were the value let through, the build would stop there, before any VM.
  write(R"({"build": {"dockerfile": "Dockerfile"}, "containerEnv": {"PROJECT_SETTING": ")" +
        secret + R"("}})");
  CliRun leak = Cli({"create", "ws", "--devcontainer", repo});
  EXPECT_NE(leak.code, 0);
  EXPECT_NE(leak.err.find("devcontainer.json:1: containerEnv \"PROJECT_SETTING\" looks like a "
                          "credential"),
            std::string::npos)
      << leak.err;
  EXPECT_NE(leak.err.find("cloister cred add"), std::string::npos) << leak.err;
  EXPECT_EQ((leak.out + leak.err).find(secret), std::string::npos) << leak.err;

  write("{\n  \"image\": \"debian:12\",\n  \"forwardPorts\": [\"db:5432\"]\n}");
  CliRun bad = Cli({"create", "ws", "--devcontainer", repo});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("devcontainer.json:3"), std::string::npos) << bad.err;

  write(R"({"image": "debian:12"})");
  CliRun both = Cli({"create", "ws", "--devcontainer", repo, "--image", "test"});
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("--image and --devcontainer"), std::string::npos) << both.err;

  EXPECT_FALSE(fs::exists(store_ + "/workspaces/ws"));
  if (fs::exists(store_ + "/images")) {
    for (const auto& e : fs::directory_iterator(store_ + "/images")) ADD_FAILURE() << e.path();
  }
}

// An image of the devcontainer's name that a workspace stands on, from other inputs: refused
// before the build (which could not be published over it), naming the workspace and --image-name.
TEST_F(ImageCliTest, CreateFromADevcontainerWhoseImageNameIsInUseRefusesBeforeBuilding) {
  std::string repo = tmp_ + "/repo";
  fs::create_directories(repo + "/.git");
  fs::create_directories(repo + "/.devcontainer");
  std::ofstream(repo + "/.devcontainer/devcontainer.json") << R"({"image": "debian:12"})";
  PublishFake("dc-repo");
  ASSERT_EQ(Cli({"create", "ws", "--image", "dc-repo", "--home-size", "64M"}).code, 0);
  CliRun c = Cli({"create", "ws2", "--devcontainer", repo, "--home-size", "64M"});
  EXPECT_NE(c.code, 0);
  EXPECT_NE(c.err.find("image \"dc-repo\" was built from other inputs and is used by ws"),
            std::string::npos)
      << c.err;
  EXPECT_NE(c.err.find("--image-name"), std::string::npos) << c.err;
  EXPECT_FALSE(fs::exists(store_ + "/workspaces/ws2"));
  EXPECT_FALSE(fs::exists(store_ + "/images/builder")) << "a builder was made: " << c.err;
}

TEST(DevcontainerPortsTest, ForwardPortsArePublishedOnLoopbackOnly) {
  EXPECT_EQ(ForwardPortSpecs({3000, 80}),
            (std::vector<std::string>{"127.0.0.1:3000:3000", "127.0.0.1::80"}));
}

}  // namespace
}  // namespace cloister::cli

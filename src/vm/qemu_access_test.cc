#include "vm/qemu_access.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/subprocess.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;

class QemuAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/qemu-access-XXXXXX";
    root_ = mkdtemp(t);
    fs::create_directories(root_ + "/ws/checkpoints/c1");
    fs::create_directories(root_ + "/images/base");
    fs::create_directories(root_ + "/other");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Img(const std::string& path, const std::string& backing = "",
           const std::string& backing_fmt = "") {
    std::vector<std::string> argv = {"qemu-img", "create", "-q", "-f", "qcow2"};
    if (!backing.empty()) {
      argv.insert(argv.end(), {"-u", "-b", backing});
      if (!backing_fmt.empty()) argv.insert(argv.end(), {"-F", backing_fmt});
    }
    argv.insert(argv.end(), {path, "16M"});
    auto r = RunProcessChecked(argv);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  }
  std::string root_;
};

TEST_F(QemuAccessTest, ChainInsideTheWorkspaceAndTheBaseImage) {
  std::string base = root_ + "/images/base/disk.raw";
  std::ofstream(base).close();
  fs::resize_file(base, 16 << 20);
  Img(root_ + "/ws/checkpoints/c1/system.qcow2", base, "raw");
  Img(root_ + "/ws/system.2.qcow2", root_ + "/ws/checkpoints/c1/system.qcow2", "qcow2");
  auto chain = ReadBackingChain(root_ + "/ws/system.2.qcow2", "qcow2", {root_ + "/ws"}, {base});
  ASSERT_TRUE(chain.ok()) << chain.error().ToString();
  ASSERT_EQ(chain->size(), 2u);
  EXPECT_EQ((*chain)[0].path, fs::canonical(root_ + "/ws/checkpoints/c1/system.qcow2").string());
  EXPECT_EQ((*chain)[0].format, "qcow2");
  EXPECT_EQ((*chain)[1].path, fs::canonical(base).string());
  EXPECT_EQ((*chain)[1].format, "raw");
  // A raw top has no chain; a qcow2 without a backing file has an empty one.
  EXPECT_TRUE(ReadBackingChain(base, "raw", {root_ + "/ws"}, {})->empty());
  Img(root_ + "/ws/home.qcow2");
  EXPECT_TRUE(ReadBackingChain(root_ + "/ws/home.qcow2", "qcow2", {root_ + "/ws"}, {})->empty());
}

// SECURITY: a top layer whose header (rewritten by a compromised QEMU) names a file outside the
// workspace and its base image is refused, also through a symlink or "..".
TEST_F(QemuAccessTest, BackingOutsideTheWorkspaceIsRefused) {
  Img(root_ + "/other/victim.qcow2");
  Img(root_ + "/ws/system.qcow2", root_ + "/other/victim.qcow2", "qcow2");
  auto chain = ReadBackingChain(root_ + "/ws/system.qcow2", "qcow2", {root_ + "/ws"}, {});
  ASSERT_FALSE(chain.ok());
  EXPECT_EQ(chain.error().code(), ErrorCode::kCorrupt);
  EXPECT_NE(chain.error().message().find("outside"), std::string::npos);

  Img(root_ + "/ws/dots.qcow2", root_ + "/ws/../other/victim.qcow2", "qcow2");
  EXPECT_FALSE(ReadBackingChain(root_ + "/ws/dots.qcow2", "qcow2", {root_ + "/ws"}, {}).ok());
  fs::create_symlink(root_ + "/other/victim.qcow2", root_ + "/ws/link.qcow2");
  Img(root_ + "/ws/via-link.qcow2", root_ + "/ws/link.qcow2", "qcow2");
  EXPECT_FALSE(ReadBackingChain(root_ + "/ws/via-link.qcow2", "qcow2", {root_ + "/ws"}, {}).ok());
  // /ws2 is not inside /ws.
  fs::create_directories(root_ + "/ws2");
  Img(root_ + "/ws2/x.qcow2");
  Img(root_ + "/ws/prefix.qcow2", root_ + "/ws2/x.qcow2", "qcow2");
  EXPECT_FALSE(ReadBackingChain(root_ + "/ws/prefix.qcow2", "qcow2", {root_ + "/ws"}, {}).ok());
}

TEST_F(QemuAccessTest, BackingWithoutAFormatIsNeverProbed) {
  Img(root_ + "/ws/lower.qcow2");
  Img(root_ + "/ws/top.qcow2", root_ + "/ws/lower.qcow2", "qcow2");
  {
    // Tamper with the header as a compromised QEMU could: turn the backing-format extension
    // (magic 0xE2792ACA) into an unknown one, so the header names a backing file but no format.
    std::fstream f(root_ + "/ws/top.qcow2", std::ios::in | std::ios::out | std::ios::binary);
    std::string head(65536, '\0');
    f.read(head.data(), static_cast<std::streamsize>(head.size()));
    size_t at = head.find(std::string("\xE2\x79\x2A\xCA", 4));
    ASSERT_NE(at, std::string::npos);
    f.clear();
    f.seekp(static_cast<std::streamoff>(at));
    f.write("\x12\x34\x56\x78", 4);
  }
  auto chain = ReadBackingChain(root_ + "/ws/top.qcow2", "qcow2", {root_ + "/ws"}, {});
  ASSERT_FALSE(chain.ok());
  EXPECT_NE(chain.error().message().find("format"), std::string::npos);
}

TEST_F(QemuAccessTest, IdentityIsPerWorkspaceAndUnprivileged) {
  auto a = QemuIdentityFor("52:54:00:12:34:56", false);
  auto b = QemuIdentityFor("52:54:00:12:34:57", false);
  ASSERT_TRUE(a.ok() && b.ok());
  if (geteuid() != 0) {
    EXPECT_FALSE(a->drop);
    return;
  }
  EXPECT_TRUE(a->drop);
  EXPECT_EQ(a->uid, kQemuIdBase + 0x123456u);
  EXPECT_EQ(a->gid, a->uid);
  EXPECT_TRUE(a->groups.empty());
  EXPECT_EQ(b->uid, a->uid + 1);
  EXPECT_FALSE(QemuIdentityFor("52:54:00:12:34", false).ok());
}

TEST_F(QemuAccessTest, FdSetsAndProcPaths) {
  std::string f = root_ + "/ws/file";
  std::ofstream(f) << "data";
  QemuFds fds;
  auto rw = fds.AddToFdSet(f, O_RDWR);
  ASSERT_TRUE(rw.ok());
  EXPECT_EQ(*rw, "/dev/fdset/1");
  auto ro = fds.AddToFdSet(f, O_RDONLY);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(*ro, "/dev/fdset/2");
  ASSERT_EQ(fds.fd_sets().size(), 3u);  // read-write file: an extra read-only fd in its set
  EXPECT_EQ(fds.fd_sets()[0].set, 1);
  EXPECT_EQ(fds.fd_sets()[1].set, 1);
  EXPECT_EQ(fcntl(fds.fd_sets()[1].fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(fds.fd_sets()[2].set, 2);
  // A file the world cannot read is copied into a memfd for the unprivileged QEMU.
  chmod(f.c_str(), 0600);
  auto copied = fds.AddProcPath(f, O_RDONLY, true);
  ASSERT_TRUE(copied.ok());
  std::string target = fs::read_symlink(*copied).string();
  EXPECT_NE(target.find("memfd:"), std::string::npos) << target;
  std::ifstream in(*copied);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "data");
  auto direct = fds.AddProcPath(root_ + "/ws", O_RDONLY | O_DIRECTORY, false);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(fs::read_symlink(*direct).string(), root_ + "/ws");
  EXPECT_FALSE(fds.AddToFdSet(root_ + "/missing", O_RDONLY).ok());
}

}  // namespace
}  // namespace cloister::vm

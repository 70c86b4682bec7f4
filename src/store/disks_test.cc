// The home image as mkfs leaves it (store/disks.h MakeHomeImage): sparse, and nothing left for the
// guest kernel to zero at its first mount.
#include "store/disks.h"

#include <sys/stat.h>

#include <string>

#include <gtest/gtest.h>

#include "base/strings.h"
#include "base/subprocess.h"
#include "store/env.h"
#include "store/test_util.h"

namespace cloister {
namespace {

// dumpe2fs's block group lines ("Group 7: (Blocks ...) csum 0x... [INODE_UNINIT, ITABLE_ZEROED]"),
// and how many of them carry `flag`.
struct Groups {
  int all = 0, with_flag = 0;
};
Groups CountGroups(const std::string& dump, const std::string& flag) {
  Groups g;
  for (const std::string& line : Split(dump, '\n')) {
    if (line.rfind("Group ", 0) != 0 || line.size() < 7 || line[6] < '0' || line[6] > '9') continue;
    ++g.all;
    g.with_flag += line.find(flag) != std::string::npos;
  }
  return g;
}

TEST(HomeImageTest, AFreshHomeIsSparseAndEveryInodeTableIsMarkedZeroed) {
  testing::TempDir tmp;
  const std::string home = tmp.Sub("home.img");
  constexpr uint64_t kSize = uint64_t{64} << 30;  // the default home size
  ASSERT_TRUE(MakeHomeImage(Env::Default(), home, kSize, DeriveUuid("disks-test"), 1796000000).ok());
  struct stat st;
  ASSERT_EQ(stat(home.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kSize);
  // Metadata only: a few MiB of the 64 GiB are allocated on the host.
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{32} << 20);
  // Every block group's inode table is marked zeroed: the guest's ext4lazyinit thread has nothing
  // to do at the first mount (with nodiscard it zeroed 1 GiB of them beside the boot).
  auto dump = RunProcess({"dumpe2fs", home});
  ASSERT_TRUE(dump.ok());
  ASSERT_EQ(dump->exit_code, 0) << dump->err;
  Groups g = CountGroups(dump->out, "ITABLE_ZEROED");
  EXPECT_EQ(g.all, 512);  // 64 GiB in 128 MiB groups
  EXPECT_EQ(g.with_flag, g.all);
}

}  // namespace
}  // namespace cloister

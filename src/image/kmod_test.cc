#include "image/kmod.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cloister::image {
namespace {

constexpr char kDep[] =
    "kernel/drivers/virtio/virtio_ring.ko:\n"
    "kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n"
    "kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko "
    "kernel/drivers/virtio/virtio_ring.ko\n"
    "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n"
    "kernel/lib/crc16.ko:\n"
    "kernel/fs/mbcache.ko:\n"
    "kernel/fs/jbd2/jbd2.ko:\n"
    "kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko "
    "kernel/drivers/virtio/virtio_ring.ko\n";

size_t IndexOf(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

TEST(KmodTest, DependenciesComeFirstAndOnce) {
  auto order = ModuleLoadOrder(kDep, {"virtio_blk", "ext4", "virtio-rng"});
  ASSERT_TRUE(order.ok()) << order.error().ToString();
  const auto& o = *order;
  EXPECT_EQ(o.size(), 8u);
  EXPECT_EQ(o[0], "kernel/drivers/virtio/virtio_ring.ko");
  EXPECT_LT(IndexOf(o, "kernel/drivers/virtio/virtio.ko"),
            IndexOf(o, "kernel/drivers/block/virtio_blk.ko"));
  EXPECT_LT(IndexOf(o, "kernel/fs/jbd2/jbd2.ko"), IndexOf(o, "kernel/fs/ext4/ext4.ko"));
  EXPECT_LT(IndexOf(o, "kernel/lib/crc16.ko"), IndexOf(o, "kernel/fs/ext4/ext4.ko"));
  EXPECT_EQ(o.back(), "kernel/drivers/char/hw_random/virtio-rng.ko");
  EXPECT_EQ(std::count(o.begin(), o.end(), "kernel/drivers/virtio/virtio_ring.ko"), 1);
}

TEST(KmodTest, UnknownModuleIsNotFound) {
  auto order = ModuleLoadOrder(kDep, {"virtio_gpu"});
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(order.error().code(), ErrorCode::kNotFound);
}

TEST(KmodTest, MalformedAndDanglingAreCorrupt) {
  EXPECT_EQ(ModuleLoadOrder("no colon here\n", {"x"}).error().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(ModuleLoadOrder("a.ko: b.ko\n", {"a"}).error().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(ModuleLoadOrder("a.ko: b.ko\nb.ko: a.ko\n", {"a"}).error().code(),
            ErrorCode::kCorrupt);
}

TEST(KmodTest, NamesAndBuiltins) {
  EXPECT_EQ(ModuleNameFromPath("kernel/drivers/char/hw_random/virtio-rng.ko.xz"), "virtio_rng");
  EXPECT_TRUE(IsBuiltin("kernel/fs/ext4/ext4.ko\nkernel/a/b.ko\n", "ext4"));
  EXPECT_FALSE(IsBuiltin("kernel/fs/ext4/ext4.ko\n", "ext"));
}

}  // namespace
}  // namespace cloister::image

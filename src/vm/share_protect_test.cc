#include "vm/share_protect.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace cloister::vm {
namespace {

constexpr DirId kTop{1, 2}, kHusky{1, 3}, kNewHusky{1, 4}, kOther{1, 5};

TEST(ShareProtectTest, TheEndIsRefusedAndTheWayOnlyAsADirectory) {
  ProtectedNames names;
  names.Add(kTop, {".husky", "_"});
  names.Add(kTop, {".gitconfig-shared"});
  EXPECT_EQ(names.Check(kTop, ".gitconfig-shared", false), EPERM);
  EXPECT_EQ(names.Check(kTop, ".gitconfig-shared", true), EPERM);
  EXPECT_EQ(names.Check(kTop, ".GITCONFIG-shared", false), EPERM);
  EXPECT_EQ(names.Check(kTop, ".husky", true), 0);        // mkdir .husky
  EXPECT_EQ(names.Check(kTop, ".husky", false), EPERM);   // a symlink, file or rename onto it
  EXPECT_EQ(names.Check(kTop, "src", false), 0);
  EXPECT_EQ(names.Check(kOther, "_", false), 0);
  // The made directory carries the rest: `_` in it is refused, in any other directory it is not.
  names.Made(kTop, ".husky", kHusky);
  EXPECT_EQ(names.Check(kHusky, "_", true), EPERM);
  EXPECT_EQ(names.Check(kHusky, "_", false), EPERM);
  EXPECT_EQ(names.Check(kHusky, "pre-commit", false), 0);
  // Renamed away and made again: the new one is followed too, the old one still is.
  names.Made(kTop, ".HUSKY", kNewHusky);
  EXPECT_EQ(names.Check(kNewHusky, "_", true), EPERM);
  EXPECT_EQ(names.Check(kHusky, "_", true), EPERM);
  // A directory made under another name carries nothing.
  names.Made(kTop, "src", kOther);
  EXPECT_EQ(names.Check(kOther, "_", true), 0);
}

TEST(ShareProtectTest, AFullTableRefusesRatherThanLosesTrack) {
  ProtectedNames names;
  names.Add(kTop, {"a", "b"});
  ino_t ino = 100;
  while (names.size() < ProtectedNames::kMaxContinuations) {
    ASSERT_EQ(names.Check(kTop, "a", true), 0);
    names.Made(kTop, "a", {1, ino++});
  }
  EXPECT_EQ(names.Check(kTop, "a", true), EPERM);
  EXPECT_EQ(names.Check(kTop, "x", true), 0);
}

}  // namespace
}  // namespace cloister::vm

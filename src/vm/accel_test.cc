#include "vm/accel.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;

class AccelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("accel_test_" + std::to_string(getpid()));
    fs::create_directories(root_ / "sys" / "module");
    std::ofstream(root_ / "kvm") << "";  // stands in for an openable /dev/kvm
    probe_.sysfs_root = (root_ / "sys").string();
    probe_.kvm_device = (root_ / "kvm").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  void MakePvm() { fs::create_directories(root_ / "sys" / "module" / "kvm_pvm"); }

  fs::path root_;
  AccelProbe probe_;
};

TEST_F(AccelTest, AutoUsesKvmWhenUsableAndNotPvm) {
  auto choice = ChooseAccel(AccelMode::kAuto, probe_);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->accel, Accel::kKvm);
  EXPECT_TRUE(choice->notice.empty());
}

TEST_F(AccelTest, AutoFallsBackToTcgOnPvmWithNotice) {
  MakePvm();
  auto choice = ChooseAccel(AccelMode::kAuto, probe_);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->accel, Accel::kTcg);
  EXPECT_NE(choice->notice.find("PVM"), std::string::npos);
  EXPECT_EQ(choice->notice.find('\n'), std::string::npos);  // one line
}

TEST_F(AccelTest, AutoFallsBackToTcgWithoutKvmDevice) {
  probe_.kvm_device = (root_ / "missing").string();
  auto choice = ChooseAccel(AccelMode::kAuto, probe_);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->accel, Accel::kTcg);
  EXPECT_NE(choice->notice.find("missing"), std::string::npos);
}

TEST_F(AccelTest, ExplicitKvmOnPvmIsAnErrorWithHint) {
  MakePvm();
  auto choice = ChooseAccel(AccelMode::kKvm, probe_);
  ASSERT_FALSE(choice.ok());
  EXPECT_NE(choice.error().hint().find("--accel tcg"), std::string::npos);
}

TEST_F(AccelTest, ExplicitKvmWithoutDeviceIsAnError) {
  probe_.kvm_device = (root_ / "missing").string();
  EXPECT_FALSE(ChooseAccel(AccelMode::kKvm, probe_).ok());
}

TEST_F(AccelTest, ExplicitTcgIgnoresKvm) {
  auto choice = ChooseAccel(AccelMode::kTcg, probe_);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->accel, Accel::kTcg);
  EXPECT_TRUE(choice->notice.empty());
}

TEST(AccelModeTest, Parses) {
  EXPECT_EQ(*ParseAccelMode("auto"), AccelMode::kAuto);
  EXPECT_EQ(*ParseAccelMode("kvm"), AccelMode::kKvm);
  EXPECT_EQ(*ParseAccelMode("tcg"), AccelMode::kTcg);
  EXPECT_FALSE(ParseAccelMode("hvf").ok());
}

}  // namespace
}  // namespace cloister::vm

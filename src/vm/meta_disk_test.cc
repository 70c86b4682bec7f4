#include "vm/meta_disk.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/subprocess.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;

TEST(MetaDiskTest, HoldsAgentAndConfigWithLabel) {
  fs::path dir = fs::temp_directory_path() / ("meta_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string agent = (dir / "agent-bin").string();
  std::ofstream(agent) << "#!/bin/sh\necho agent\n";
  MetaConfig config;
  config.workspace = "ws1";
  config.boot_id = NewBootId();
  config.shares.push_back({"share0", "/home/dev/src", true});
  std::string img = (dir / "meta.img").string();
  Status st = BuildMetaDisk(img, agent, config, {{"ca.pem", "CERT"}});
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  EXPECT_FALSE(fs::exists(img + ".d"));  // staging removed

  auto label = RunProcessChecked({"e2label", img});
  ASSERT_TRUE(label.ok());
  EXPECT_EQ(label->out, "CLOISTER-META\n");
  auto cfg = RunProcessChecked({"debugfs", "-R", "cat /config.json", img});
  ASSERT_TRUE(cfg.ok());
  auto doc = nlohmann::json::parse(cfg->out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << cfg->out;
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["workspace"], "ws1");
  EXPECT_EQ(doc["boot_id"], config.boot_id);
  EXPECT_EQ(doc["boot_id"].get<std::string>().size(), 32u);
  EXPECT_EQ(doc["home_device"], "/dev/vdb");
  EXPECT_EQ(doc["channel_port"], "org.cloister.channel.0");
  EXPECT_EQ(doc["shares"][0]["tag"], "share0");
  auto bin = RunProcessChecked({"debugfs", "-R", "cat /cloister-agent", img});
  ASSERT_TRUE(bin.ok());
  EXPECT_EQ(bin->out, "#!/bin/sh\necho agent\n");
  auto stat = RunProcessChecked({"debugfs", "-R", "stat /cloister-agent", img});
  ASSERT_TRUE(stat.ok());
  EXPECT_NE(stat->out.find("Mode:  0755"), std::string::npos) << stat->out;
  auto ca = RunProcessChecked({"debugfs", "-R", "cat /ca.pem", img});
  EXPECT_EQ(ca->out, "CERT");

  // Bad extra file names are refused.
  EXPECT_FALSE(BuildMetaDisk(img, agent, config, {{"../x", "y"}}).ok());
  // Missing agent binary: a clear not-found error.
  auto missing = BuildMetaDisk(img, (dir / "nope").string(), config);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cloister::vm

#include "store/config.h"

#include <gtest/gtest.h>

namespace cloister {
namespace {

WorkspaceConfig Sample() {
  WorkspaceConfig c;
  c.name = "dev-1";
  c.id = "00112233445566778899aabbccddeeff";
  c.created = 1796000000;
  c.image = {"base.raw", "", std::string(64, 'a'), "/images/base.raw", 1 << 30, 42};
  c.memory_mib = 4096;
  c.cpus = 4;
  c.home_size = 8ull << 30;
  c.volumes = {{"/src", "/src", false}, {"/data", "/mnt/data", true}};
  c.mac = "02:11:22:33:44:55";
  c.layers = {{"checkpoints/20261130-101500/system.qcow2", DiskKind::kSystem,
               layout::DiskFormat::kQcow2, "", true},
              {"system.3.qcow2", DiskKind::kSystem, layout::DiskFormat::kQcow2,
               "checkpoints/20261130-101500/system.qcow2", false},
              {"checkpoints/20261130-101500/home.img", DiskKind::kHome, layout::DiskFormat::kRaw,
               "", false},
              {"home.4.qcow2", DiskKind::kHome, layout::DiskFormat::kQcow2,
               "checkpoints/20261130-101500/home.img", false}};
  c.system_top = "system.3.qcow2";
  c.home_top = "home.4.qcow2";
  c.checkpoints = {{"20261130-101500", 1796034900, true,
                    "checkpoints/20261130-101500/system.qcow2",
                    "checkpoints/20261130-101500/home.img"}};
  c.next_generation = 5;
  return c;
}

TEST(ConfigTest, RoundTripsEveryField) {
  WorkspaceConfig c = Sample();
  c.compromised = true;
  c.compromised_reason = "placeholder for api.anthropic.com sent to evil.example";
  c.compromised_at = 1796000100;
  std::string text = ConfigToJson(c).dump();
  Result<WorkspaceConfig> back = ConfigFromJson(text);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(ConfigToJson(*back), ConfigToJson(c));
  EXPECT_EQ(back->volumes[1].guest, "/mnt/data");
  EXPECT_TRUE(back->volumes[1].read_only);
  EXPECT_EQ(back->layers[1].backing, "checkpoints/20261130-101500/system.qcow2");
  EXPECT_TRUE(back->compromised);
}

TEST(ConfigTest, RoundTripsCatalogImageIdentity) {
  WorkspaceConfig c = Sample();
  c.image.name = "debian-12";
  c.image.version = "1+linux-6.1.0-28";
  c.image.channel = "local";
  c.image.kernel_path = "/store/images/debian-12/vmlinuz";
  c.image.initrd_path = "/store/images/debian-12/initrd.img";
  c.image.kernel_cmdline = "root=/dev/vda rw console=ttyS0";
  Result<WorkspaceConfig> back = ConfigFromJson(ConfigToJson(c).dump());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->image.channel, "local");
  EXPECT_EQ(back->image.version, "1+linux-6.1.0-28");
  EXPECT_EQ(back->image.kernel_path, "/store/images/debian-12/vmlinuz");
  EXPECT_EQ(back->image.initrd_path, "/store/images/debian-12/initrd.img");
  EXPECT_EQ(back->image.kernel_cmdline, "root=/dev/vda rw console=ttyS0");
  // A raw-path image writes no catalog keys, so configs of older builds stay byte-identical.
  EXPECT_FALSE(ConfigToJson(Sample())["image"].contains("channel"));
}

TEST(ConfigTest, KeepsUnknownTopLevelKeys) {
  nlohmann::json j = ConfigToJson(Sample());
  j["egress_policy"] = {{"allow", {"api.anthropic.com"}}};
  Result<WorkspaceConfig> c = ConfigFromJson(j.dump());
  ASSERT_TRUE(c.ok());
  nlohmann::json again = ConfigToJson(*c);
  EXPECT_EQ(again["egress_policy"]["allow"][0], "api.anthropic.com");
}

TEST(ConfigTest, RejectsDamagedDocuments) {
  EXPECT_EQ(ConfigFromJson("{not json").error().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(ConfigFromJson("[]").error().code(), ErrorCode::kCorrupt);
  nlohmann::json j = ConfigToJson(Sample());
  j["cpus"] = "four";
  EXPECT_EQ(ConfigFromJson(j.dump()).error().code(), ErrorCode::kCorrupt);
  // A layer path escaping the workspace directory must never be accepted (the store deletes
  // layer files).
  for (const char* bad : {"../../etc/passwd", "/etc/passwd", "a//b", "checkpoints/../x", ""}) {
    nlohmann::json k = ConfigToJson(Sample());
    k["layers"][0]["file"] = bad;
    EXPECT_FALSE(ConfigFromJson(k.dump()).ok()) << bad;
  }
  nlohmann::json m = ConfigToJson(Sample());
  m["disks"]["home"] = "home.99.img";  // not listed in layers
  EXPECT_FALSE(ConfigFromJson(m.dump()).ok());
  nlohmann::json v = ConfigToJson(Sample());
  v["version"] = 99;
  EXPECT_EQ(ConfigFromJson(v.dump()).error().code(), ErrorCode::kFailedPrecondition);
}

TEST(ConfigTest, ToolIsStoredAndDefaultsToTheShell) {
  WorkspaceConfig c = Sample();
  EXPECT_EQ(c.tool, "shell");
  c.tool = "claude";
  Result<WorkspaceConfig> back = ConfigFromJson(ConfigToJson(c).dump());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->tool, "claude");
  // A config written before the tool existed is a shell workspace; `tool` is not kept in extra.
  nlohmann::json old = ConfigToJson(Sample());
  old.erase("tool");
  back = ConfigFromJson(old.dump());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tool, "shell");
  EXPECT_FALSE(back->extra.contains("tool"));
  // A newer build's tool name is kept as read (checked where it is used); a wrong type is not.
  nlohmann::json newer = ConfigToJson(Sample());
  newer["tool"] = "aider";
  EXPECT_EQ(ConfigFromJson(newer.dump())->tool, "aider");
  newer["tool"] = 7;
  EXPECT_EQ(ConfigFromJson(newer.dump()).error().code(), ErrorCode::kCorrupt);
  newer["tool"] = "";
  EXPECT_EQ(ConfigFromJson(newer.dump()).error().code(), ErrorCode::kCorrupt);
}

TEST(ConfigTest, WorkspaceNames) {
  for (const char* ok : {"a", "dev", "claude-1", "my.project_2", "0abc",
                         "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123"}) {
    EXPECT_TRUE(ValidateWorkspaceName(ok).ok()) << ok;
  }
  for (const char* bad : {"", ".", "..", "a..b", "../x", "a/b", "/abs", ".hidden", "-dash",
                          "Upper", "sp ace", "tab\t", "semi;colon", "ünï",
                          "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234"}) {
    Status s = ValidateWorkspaceName(bad);
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) {
      EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
      EXPECT_FALSE(s.error().hint().empty());
    }
  }
}

TEST(ConfigTest, VolumeSpecs) {
  Result<Volume> a = ParseVolumeSpec("/src/proj");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->guest, "/home/dev/proj");
  Result<Volume> in_home = ParseVolumeSpec("/src/proj/:/home/dev/work/proj");
  ASSERT_TRUE(in_home.ok());
  EXPECT_EQ(in_home->guest, "/home/dev/work/proj");
  EXPECT_FALSE(a->read_only);
  Result<Volume> b = ParseVolumeSpec("/data/:/mnt/data:ro");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "/data");
  EXPECT_EQ(b->guest, "/mnt/data");
  EXPECT_TRUE(b->read_only);
  for (const char* bad : {"relative", "/a:relative", "/a:/b:/c", "/a/../etc", "/a:/home/dev",
                          "/a:/home/dev/", "/a:/home/other/x", "/a:/run/cloister/meta", "/a:/",
                          "/", ""}) {
    EXPECT_FALSE(ParseVolumeSpec(bad).ok()) << bad;
  }
}

TEST(ConfigTest, CheckpointIds) {
  EXPECT_TRUE(IsValidCheckpointId("20261130-101500"));
  EXPECT_TRUE(IsValidCheckpointId("20261130-101500-2"));
  EXPECT_FALSE(IsValidCheckpointId("20261130-101500-"));
  EXPECT_FALSE(IsValidCheckpointId("../../etc"));
  EXPECT_FALSE(IsValidCheckpointId("20261130_101500"));
  EXPECT_EQ(FormatUtcCompact(1796034900), "20261130-103500");
  EXPECT_EQ(FormatUtcIso8601(0), "1970-01-01T00:00:00Z");
}

}  // namespace
}  // namespace cloister

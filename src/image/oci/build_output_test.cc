#include "image/oci/build_output.h"

#include <gtest/gtest.h>

#include "image/oci/builder_script.h"
#include "image/oci/finish.h"

namespace cloister::image::oci {
namespace {

const std::string kDigest =
    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

BuildFacts Read(const std::string& out, Status* last = nullptr) {
  LineSplitter split;
  std::vector<std::string> lines;
  split.Feed(out, lines);
  if (auto l = split.Finish()) lines.push_back(*l);
  BuildFacts f;
  for (const auto& l : lines) {
    Status s = ApplyLine(ClassifyLine(l), f);
    if (last && !s.ok()) *last = s;
  }
  return f;
}

TEST(BuildOutputTest, ReadsFactsAndErrors) {
  BuildFacts f = Read("Copying blob sha256:abc done\n"
                      "cloister-build: stage pull\n"
                      "cloister-build: digest " + kDigest + "\n"
                      "cloister-build: pulled 2048 bytes\n"
                      "cloister-build: has tmux=0 sshd=1 sh=1\n"
                      "cloister-build: disk 4096 bytes\n"
                      "cloister-build: result digest=" + kDigest + " arch=amd64\n");
  EXPECT_EQ(f.digest, kDigest);
  EXPECT_EQ(f.arch, "amd64");
  EXPECT_EQ(f.pulled_bytes, 2048u);
  EXPECT_EQ(f.rootfs_bytes, 4096u);
  EXPECT_EQ(f.tmux, false);
  EXPECT_EQ(f.sshd, true);
  EXPECT_TRUE(f.result);
  EXPECT_TRUE(f.error_kind.empty());

  f = Read("cloister-build: error not-found docker://x:1: manifest unknown\n");
  EXPECT_EQ(f.error_kind, "not-found");
  EXPECT_EQ(f.error_text, "docker://x:1: manifest unknown");
  EXPECT_FALSE(f.result);
}

TEST(BuildOutputTest, RefusesMalformedFacts) {
  for (const std::string& bad : std::vector<std::string>{"cloister-build: digest sha256:xyz", "cloister-build: pulled -1 bytes",
        "cloister-build: pulled 99999999999999999999 bytes", "cloister-build: has tmux=2",
        "cloister-build: has root=1", "cloister-build: result digest=" + kDigest + " arch=AMD64",
        "cloister-build: result digest=" + kDigest, "cloister-build: error BAD_KIND x"}) {
    Status s = OkStatus();
    BuildFacts f = Read(bad + "\n", &s);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_FALSE(f.result) << bad;
  }
  // A result whose digest is not the one reported before is refused.
  Status s = OkStatus();
  Read("cloister-build: digest " + kDigest + "\ncloister-build: result digest=sha256:" +
           std::string(64, 'f') + " arch=amd64\n",
       &s);
  EXPECT_FALSE(s.ok());
}

TEST(BuildOutputTest, OverlongLinesAreCutNotBuffered) {
  LineSplitter split;
  std::vector<std::string> lines;
  split.Feed(std::string(3 * kMaxLineBytes, 'x'), lines);
  split.Feed("\nshort\n", lines);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), kMaxLineBytes);
  EXPECT_EQ(lines[1], "short");
  BuildFacts f = Read("cloister-build: error step " + std::string(10000, 'y') + "\n");
  EXPECT_LE(f.error_text.size(), kMaxErrorBytes);
}

TEST(BuilderScriptTest, QuotesEveryPlanValue) {
  EXPECT_EQ(ShellQuote("a'b"), "'a'\\''b'");
  BuildPlan p;
  p.name = "x";
  p.source.kind = SourceKind::kRegistry;
  p.source.ref = "docker://registry.test/team/app:1";
  p.source.location = "registry.test/team/app:1";
  Step st;
  st.name = "feature 'q' $(x)";
  st.command = "./install.sh";
  st.env = {{"VERSION", "1'; rm -rf /"}};
  st.dir = "/d";
  p.steps.push_back(st);
  ScriptOptions o{"u-u-i-d", "h-a-s-h", 1704067200};
  std::string s = BuilderScript(p, o);
  // The tag is pinned away: the copy names the digest it inspected.
  EXPECT_NE(s.find("skopeo inspect --raw \"docker://registry.test/team/app:1\""), std::string::npos) << s;
  EXPECT_NE(s.find("copy 'docker://registry.test/team/app'\"@$DIGEST\""), std::string::npos) << s;
  EXPECT_NE(s.find("say 'step 0 feature '\\''q'\\'' $(x)'"), std::string::npos) << s;
  EXPECT_NE(s.find("-U 'u-u-i-d' -E 'hash_seed=h-a-s-h,"), std::string::npos);
  EXPECT_NE(s.find("E2FSPROGS_FAKE_TIME=1704067200"), std::string::npos);
  std::string step = StepScript(st);
  EXPECT_NE(step.find("export VERSION='1'\\''; rm -rf /'\n"), std::string::npos) << step;
  EXPECT_NE(step.find("cd /tmp/cloister-step\n"), std::string::npos);
  // The finishing step carries cloister's init and boot hook.
  EXPECT_NE(FinishStep().command.find(InitScript()), std::string::npos);
}

}  // namespace
}  // namespace cloister::image::oci

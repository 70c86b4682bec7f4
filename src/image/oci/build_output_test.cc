#include "image/oci/build_output.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/subprocess.h"

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


// Each reported failure becomes an error whose code and hint say what to do; the builder's text
// reaches the terminal without its control sequences.
TEST(BuildOutputTest, ErrorsNameTheirFix) {
  struct Case {
    std::string kind;
    ErrorCode code;
    std::string in_message, in_hint;
  };
  for (const Case& c : std::vector<Case>{
           {"unreachable", ErrorCode::kUnavailable, "did not answer", "this host reaches it"},
           {"not-found", ErrorCode::kNotFound, "not found", "tag"},
           {"arch", ErrorCode::kInvalidArgument, "not for amd64", "linux/amd64"},
           {"auth", ErrorCode::kPermissionDenied, "refused the pull", "--from oci-archive:FILE"},
           {"step", ErrorCode::kFailedPrecondition, "step", "--verbose"},
           {"disk", ErrorCode::kNoSpace, "disk", "--disk-size"},
           {"unpack", ErrorCode::kFailedPrecondition, "(unpack)", "--verbose"}}) {
    BuildFacts f = Read("cloister-build: error " + c.kind + " x \x1b]0;title\x07y\n");
    Error e = BuildError(f, 1);
    EXPECT_EQ(e.code(), c.code) << c.kind;
    EXPECT_NE(e.message().find(c.in_message), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find(c.in_hint), std::string::npos) << e.hint();
    EXPECT_EQ(e.message().find('\x1b'), std::string::npos) << c.kind;
  }
  Error none = BuildError(BuildFacts{}, 3);
  EXPECT_EQ(none.code(), ErrorCode::kInternal);
  EXPECT_NE(none.message().find("exit 3"), std::string::npos) << none.message();
}

// pullfail, run by the host's sh on skopeo's own last lines: each failure gets the kind the CLI
// turns into its fix (an unreachable registry is not a missing tag, though its resolver says "no
// such host").
TEST(BuilderScriptTest, PullFailuresGetTheirKind) {
  const std::string w = ::testing::TempDir() + "/pullfail";
  std::filesystem::create_directories(w);
  const std::vector<std::pair<std::string, std::string>> cases{
      {"level=fatal msg=\"Error reading manifest 1 in r.test/bb: pinging container registry "
       "r.test: Get \\\"https://r.test/v2/\\\": dial tcp: lookup r.test: no such host\"",
       "unreachable"},
      {"pinging container registry r.test: received unexpected HTTP status: 502 Bad Gateway",
       "unreachable"},
      {"reading manifest 2 in r.test/bb: manifest unknown: manifest unknown", "not-found"},
      {"reading manifest 1 in r.test/nobody: name unknown: repository name not known", "not-found"},
      {"choosing an image from manifest list docker://r.test/bb:1: no image found in manifest "
       "list for architecture amd64, variant \"\", OS linux",
       "arch"},
      {"reading manifest 1 in r.test/private: unauthorized: authentication required", "auth"},
      {"writing blob: something else went wrong", "pull"}};
  for (const auto& [line, kind] : cases) {
    std::ofstream(w + "/err") << "Getting image source signatures\n" << line << "\n\n";
    auto r = RunProcess({"sh", "-c", "W=" + w + "\n" + ScriptFunctions() + "\npullfail docker://r.test/bb:1"});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r->exit_code, 1) << line;
    EXPECT_EQ(r->out.rfind("cloister-build: error " + kind + " docker://r.test/bb:1: ", 0), 0u)
        << line << "\n" << r->out;
    BuildFacts f = Read(r->out);
    EXPECT_EQ(f.error_kind, kind) << r->out;
    EXPECT_EQ(f.error_text.rfind("docker://r.test/bb:1: ", 0), 0u) << f.error_text;
  }
}

}  // namespace
}  // namespace cloister::image::oci

#include "devcontainer/dockerignore.h"

#include <gtest/gtest.h>

namespace cloister::devcontainer {
namespace {

DockerIgnore Parse(const std::string& text) {
  auto d = DockerIgnore::Parse(text);
  EXPECT_TRUE(d.ok());
  return d.ok() ? *d : DockerIgnore{};
}

TEST(DockerIgnoreTest, DockersRules) {
  DockerIgnore d = Parse("# comment\n\nnode_modules\n/.git/\n*.log\n**/tmp\nbuild/**/*.o\n"
                         "docs/*\n!docs/keep.md\n./dist\n");
  EXPECT_TRUE(d.Excluded("node_modules"));
  EXPECT_TRUE(d.Excluded("node_modules/x/y.js"));  // under an excluded folder
  EXPECT_FALSE(d.Excluded("src/node_modules"));      // patterns are rooted at the context
  EXPECT_TRUE(d.Excluded(".git/config"));
  EXPECT_TRUE(d.Excluded("a.log"));
  EXPECT_FALSE(d.Excluded("src/a.log"));
  EXPECT_TRUE(d.Excluded("tmp"));
  EXPECT_TRUE(d.Excluded("a/b/tmp/c"));
  EXPECT_TRUE(d.Excluded("build/x/y/z.o"));
  EXPECT_TRUE(d.Excluded("build/z.o"));
  EXPECT_FALSE(d.Excluded("build/z.c"));
  EXPECT_TRUE(d.Excluded("docs/a.md"));
  EXPECT_FALSE(d.Excluded("docs/keep.md"));          // the last match decides
  EXPECT_TRUE(d.Excluded("dist/app"));
  EXPECT_FALSE(d.Excluded("src/main.c"));
  EXPECT_TRUE(d.HasExceptions());
  EXPECT_FALSE(Parse("a\n").HasExceptions());
}

TEST(DockerIgnoreTest, Bounded) {
  EXPECT_FALSE(DockerIgnore::Parse(std::string(kMaxDockerignoreBytes + 1, 'a')).ok());
  std::string many;
  for (size_t i = 0; i <= kMaxPatterns; ++i) many += "p" + std::to_string(i) + "\n";
  EXPECT_FALSE(DockerIgnore::Parse(many).ok());
  std::string deep;
  for (int i = 0; i < 65; ++i) deep += "**/";
  EXPECT_FALSE(DockerIgnore::Parse(deep + "x\n").ok());
  // Many ** against a deep path: memoised, answers at once.
  std::string stars;
  for (int i = 0; i < 30; ++i) stars += "**/a/";
  DockerIgnore d = Parse(stars + "b\n");
  std::string path;
  for (int i = 0; i < 60; ++i) path += "a/";
  EXPECT_FALSE(d.Excluded(path + "c"));
}

}  // namespace
}  // namespace cloister::devcontainer

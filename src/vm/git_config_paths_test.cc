#include "vm/git_config_paths.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cloister::vm {
namespace {

using namespace std::string_literals;

GitConfigEntry Entry(const std::string& key, const std::string& value,
                     const std::string& origin = "file:/repo/.git/config") {
  return {origin, key, value, true};
}

GitPathBase Base() {
  GitPathBase b;
  b.base = "/repo";
  b.homes = {"/home/u"};
  b.user_home = [](const std::string& user) -> std::optional<std::string> {
    if (user == "bob") return "/home/bob";
    return std::nullopt;
  };
  return b;
}

std::vector<std::string> Paths(const GitConfigEntry& e, const GitPathBase& b = Base()) {
  std::vector<std::string> out;
  for (const NamedPath& p : PathsNamedBy(e, b)) out.push_back(p.path + (p.include ? " include" : "") + (p.bare ? " bare" : ""));
  return out;
}

using V = std::vector<std::string>;

TEST(GitConfigPathsTest, ParsesTheListingGitPrints) {
  std::string listing = "file:/etc/gitconfig\0core.pager\nless -R\0file:/r/.git/config\0foo.bare\0"
                        "command line:\0a.b\n\0file:/r/.git/config\0x.y\nline1\nline2\0"s;
  auto r = ParseGitConfigList(listing);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].origin, "file:/etc/gitconfig");
  EXPECT_EQ((*r)[0].key, "core.pager");
  EXPECT_EQ((*r)[0].value, "less -R");
  EXPECT_FALSE((*r)[1].has_value);
  EXPECT_EQ((*r)[1].key, "foo.bare");
  EXPECT_TRUE((*r)[2].has_value);
  EXPECT_EQ((*r)[2].value, "");
  EXPECT_EQ((*r)[3].value, "line1\nline2");
  EXPECT_TRUE(ParseGitConfigList("").ok());
}

TEST(GitConfigPathsTest, MalformedListingsAreErrors) {
  for (std::string bad : {"file:/x"s, "file:/x\0core.pager\nless"s, "file:/x\0nodot\0"s, "file:/x\0\0"s,
                          "file:/x\0a.b\n"s + std::string(kMaxGitConfigValue + 1, 'v') + "\0"s}) {
    EXPECT_FALSE(ParseGitConfigList(bad).ok()) << bad.substr(0, 40);
  }
  std::string many;
  for (size_t i = 0; i <= kMaxGitConfigEntries; ++i) many += "o\0a.b\0"s;
  EXPECT_FALSE(ParseGitConfigList(many).ok());
  EXPECT_FALSE(ParseGitConfigList(std::string(kMaxGitConfigListing + 1, 'x')).ok());
}

TEST(GitConfigPathsTest, HooksPathResolvesAgainstTheWorkingTreeAndHome) {
  EXPECT_EQ(Paths(Entry("core.hookspath", ".husky/_")), V{"/repo/.husky/_"});
  EXPECT_EQ(Paths(Entry("core.hookspath", "frontend/../.husky")), V{"/repo/.husky"});
  EXPECT_EQ(Paths(Entry("core.hookspath", "/abs/hooks/")), V{"/abs/hooks"});
  EXPECT_EQ(Paths(Entry("core.hookspath", "~/hooks")), V{"/home/u/hooks"});
  EXPECT_EQ(Paths(Entry("core.hookspath", "~bob/hooks")), V{"/home/bob/hooks"});
  EXPECT_EQ(Paths(Entry("core.hookspath", "~nobody/hooks")), V{});
  EXPECT_EQ(Paths(Entry("core.hookspath", "%(prefix)/share/hooks")), V{});
  EXPECT_EQ(Paths(Entry("init.templatedir", "tpl")), V{"/repo/tpl"});
  GitPathBase global = Base();
  global.base.clear();  // no repository: relative paths name nothing
  EXPECT_EQ(Paths(Entry("core.hookspath", ".husky/_"), global), V{});
  EXPECT_EQ(Paths(Entry("core.hookspath", "/abs/h"), global), V{"/abs/h"});
}

TEST(GitConfigPathsTest, IncludesResolveAgainstTheIncludingFileWhateverTheCondition) {
  EXPECT_EQ(Paths(Entry("include.path", "../shared.gitconfig")), V{"/repo/shared.gitconfig include"});
  EXPECT_EQ(Paths(Entry("includeif.onbranch:feature/*.path", "../b.cfg")), V{"/repo/b.cfg include"});
  EXPECT_EQ(Paths(Entry("includeif.gitdir:~/work/.path", "work.cfg", "file:/home/u/.gitconfig")),
            V{"/home/u/work.cfg include"});
  EXPECT_EQ(Paths(Entry("include.path", "~/x.cfg", "command line:")), V{"/home/u/x.cfg include"});
  EXPECT_EQ(Paths(Entry("include.path", "rel.cfg", "command line:")), V{});
  EXPECT_EQ(Paths(Entry("include.path", "/etc/x.cfg")), V{"/etc/x.cfg include"});
}

TEST(GitConfigPathsTest, CommandsNameTheirProgramsAndScripts) {
  EXPECT_EQ(Paths(Entry("core.fsmonitor", ".git/hooks/fsmonitor-watchman")), V{"/repo/.git/hooks/fsmonitor-watchman"});
  EXPECT_EQ(Paths(Entry("core.fsmonitor", "./fsm.sh")), V{"/repo/fsm.sh"});
  EXPECT_EQ(Paths(Entry("core.fsmonitor", "sh fsm.sh")), V{"/repo/fsm.sh bare"});
  EXPECT_EQ(Paths(Entry("core.fsmonitor", "true")), V{});
  EXPECT_EQ(Paths(Entry("core.fsmonitor", "1")), V{});
  EXPECT_EQ(Paths(Entry("pager.log", "false")), V{});
  EXPECT_EQ(Paths(Entry("pager.log", "tools/pager --x")), V{"/repo/tools/pager"});
  EXPECT_EQ(Paths(Entry("core.pager", "less -R")), V{});
  EXPECT_EQ(Paths(Entry("diff.pdf.textconv", "node 'scripts/pdf to text.js' --flag=./cfg.json")),
            V({"/repo/scripts/pdf to text.js", "/repo/cfg.json"}));
  EXPECT_EQ(Paths(Entry("filter.lfs.process", "git-lfs filter-process")), V{"/repo/filter-process bare"});
  EXPECT_EQ(Paths(Entry("filter.x.clean", "\"$HOME/bin/clean\" %f")), V{"/home/u/bin/clean"});
  EXPECT_EQ(Paths(Entry("filter.x.smudge", "${HOME}/bin/s; $OTHER/x")), V{"/home/u/bin/s"});
  EXPECT_EQ(Paths(Entry("merge.ours.driver", "FOO=1 ./merge.sh %O %A %B")), V{"/repo/merge.sh"});
  EXPECT_EQ(Paths(Entry("core.sshcommand", "ssh -F ~/cfg")), V{"/home/u/cfg"});
  EXPECT_EQ(Paths(Entry("credential.helper", "store --file=.creds")), V{});
  EXPECT_EQ(Paths(Entry("credential.https://x.example.helper", "!tools/cred.sh get")), V({"/repo/tools/cred.sh", "/repo/get bare"}));
  EXPECT_EQ(Paths(Entry("gpg.ssh.program", "/repo/sign")), V{"/repo/sign"});
  EXPECT_EQ(Paths(Entry("remote.origin.uploadpack", "bin/up")), V{"/repo/bin/up"});
  EXPECT_EQ(Paths(Entry("hook.lint.command", "a/b && c/d | e/f")), V({"/repo/a/b", "/repo/c/d", "/repo/e/f"}));
  EXPECT_EQ(Paths(Entry("core.editor", "env x/vi")), V{"/repo/x/vi"});
  EXPECT_EQ(Paths(Entry("core.editor", "cat < in.txt > out.txt")), V({"/repo/in.txt bare", "/repo/out.txt bare"}));
  EXPECT_EQ(Paths(Entry("core.editor", "x $(y/z) `w/v`")), V({"/repo/y/z", "/repo/w/v"}));
}

TEST(GitConfigPathsTest, BangAndExtFormsOnly) {
  EXPECT_EQ(Paths(Entry("alias.st", "status -sb")), V{});
  EXPECT_EQ(Paths(Entry("alias.x", "!./run.sh")), V{"/repo/run.sh"});
  EXPECT_EQ(Paths(Entry("submodule.s.update", "!sub/up")), V{"/repo/sub/up"});
  EXPECT_EQ(Paths(Entry("submodule.s.update", "rebase")), V{});
  EXPECT_EQ(Paths(Entry("remote.origin.url", "/repo/remote.git")), V{});
  EXPECT_EQ(Paths(Entry("remote.origin.url", "ext::sh -c tools/x")), V{"/repo/tools/x"});
  EXPECT_EQ(Paths(Entry("url.ext::./t .insteadof", "https://")), V{});
}

TEST(GitConfigPathsTest, OtherKeysNameNothing) {
  for (const char* key : {"user.name", "core.excludesfile", "core.worktree", "diff.tool", "remote.origin.fetch",
                          "core.hookspath.x", "filter.clean", "gpg.format"}) {
    EXPECT_EQ(Paths(Entry(key, "./a/b")), V{}) << key;
  }
  GitConfigEntry no_value{"file:/x", "core.hookspath", "", false};
  EXPECT_EQ(Paths(no_value), V{});
}

TEST(GitConfigPathsTest, ShellWordsRemoveQuotesAndMarkPrograms) {
  auto words = ShellWords("A=1 'x y' \"a\\\"b\" c\\ d; e # comment\nf|g");
  std::vector<std::pair<std::string, bool>> got;
  for (const ShellWord& w : words) got.push_back({w.text, w.first});
  std::vector<std::pair<std::string, bool>> want = {{"A=1", false}, {"x y", true}, {"a\"b", false},
                                                    {"c d", false}, {"e", true},   {"f", true},
                                                    {"g", true}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(ShellWords("").empty());
  EXPECT_EQ(ShellWords("'unterminated").size(), 1u);
}

TEST(GitConfigPathsTest, NormalizeAndOrigins) {
  EXPECT_EQ(NormalizeAbsolute("/a/./b//c/../d/"), "/a/b/d");
  EXPECT_EQ(NormalizeAbsolute("/../.."), "/");
  EXPECT_EQ(OriginDirectory("file:/r/.git/../inc.cfg"), "/r");
  EXPECT_EQ(OriginDirectory("file:/x"), "/");
  EXPECT_EQ(OriginDirectory("command line:"), std::nullopt);
  EXPECT_EQ(OriginDirectory("file:rel/x"), std::nullopt);
}

}  // namespace
}  // namespace cloister::vm

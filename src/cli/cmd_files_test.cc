// The host-only parts of cp, logs and completion through the real CLI, in-process against a
// temporary store: cp's argument errors, logs' labelling, --since and terminal-safe printing of
// guest bytes, the start error's hint at `cloister logs`, and the bash completion script run
// by bash itself (compgen, complete -p) against the same command tree as --help.
// (cp itself, through a guest, is src/supervisor/cp_vm_test.cc.)
#include <fcntl.h>
#include <pty.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "base/strings.h"
#include "base/subprocess.h"
#include "cli/testing.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

using testing::Outcome;
using testing::TempStore;

class FilesCliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(store_.CreateWorkspace("ws"), ""); }
  std::string WsFile(const std::string& f) const { return store_.root() + "/workspaces/ws/" + f; }
  TempStore store_{"files"};
};

TEST_F(FilesCliTest, CpNeedsExactlyOneWorkspaceSide) {
  Outcome both = store_.Run({"cp", "ws:/a", "ws:/b"});
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("both sides name a workspace"), std::string::npos) << both.err;
  Outcome neither = store_.Run({"cp", "/tmp/a", "./b:c"});
  EXPECT_EQ(neither.code, 2);
  EXPECT_NE(neither.err.find("neither side names a workspace"), std::string::npos);
  EXPECT_NE(neither.err.find("Hint: cloister cp NAME:PATH"), std::string::npos);
  Outcome dash = store_.Run({"cp", "ws:-", "/tmp/x"});
  EXPECT_EQ(dash.code, 2);
  Outcome dot = store_.Run({"cp", "ws:/home/dev/.", "/tmp"});
  EXPECT_EQ(dot.code, 2);
  EXPECT_NE(dot.err.find("by that name"), std::string::npos) << dot.err;
}

// SECURITY: the guest's file bytes never go raw onto a terminal (`cp NAME:PATH -` on a tty).
TEST_F(FilesCliTest, CpRefusesATarStreamOnATerminal) {
  int master = -1, slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  int saved = dup(STDOUT_FILENO);
  dup2(slave, STDOUT_FILENO);
  Outcome o = store_.Run({"cp", "ws:/etc/hostname", "-"});
  dup2(saved, STDOUT_FILENO);
  close(saved);
  close(slave);
  close(master);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("refusing to write a tar stream to a terminal"), std::string::npos) << o.err;
  // Not on a terminal it goes on (and here meets the stopped workspace).
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  saved = dup(STDOUT_FILENO);
  dup2(null, STDOUT_FILENO);
  Outcome p = store_.Run({"cp", "ws:/etc/hostname", "-"});
  dup2(saved, STDOUT_FILENO);
  close(saved);
  close(null);
  EXPECT_EQ(p.err.find("terminal"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("cloister start ws"), std::string::npos) << p.err;
}

TEST_F(FilesCliTest, CpToAStoppedWorkspaceSaysSo) {
  Outcome o = store_.Run({"cp", "ws:/etc/hostname", store_.root() + "/out"});
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("cloister start ws"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(store_.root() + "/out"));
}

// SECURITY: the guest's console bytes never reach the terminal as escape sequences.
TEST_F(FilesCliTest, LogsAreLabelledAndTerminalSafe) {
  std::ofstream(WsFile("console.log"), std::ios::binary)
      << "Linux version 6.1\r\n\x1b]0;owned title\x07login: \xc2\x9b" "2J\r\nlast";
  std::ofstream(WsFile("supervisor.log"))
      << "2026-12-01T10:00:00Z stage: qemu\nqemu-system-x86_64: warning: x\n"
      << "2026-12-01T11:00:00Z error: boot failed\n";
  Outcome o = store_.Run({"logs", "ws"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(o.out.find('\x07'), std::string::npos);
  EXPECT_EQ(o.out.find("\xc2\x9b"), std::string::npos);
  EXPECT_EQ(o.out.find('\r'), std::string::npos);
  EXPECT_NE(o.out.find("[console] \\x1b]0;owned title\\x07login: \\xc2\\x9b2J\n"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("[console] Linux version 6.1\n"), std::string::npos);
  EXPECT_NE(o.out.find("[console] last\n"), std::string::npos);
  EXPECT_NE(o.out.find("[supervisor] 2026-12-01T11:00:00Z error: boot failed\n"), std::string::npos);

  Outcome raw = store_.Run({"logs", "ws", "--console", "--raw"});
  EXPECT_NE(raw.out.find("\x1b]0;owned title\x07"), std::string::npos);
  EXPECT_EQ(raw.out.find("[console]"), std::string::npos);  // one file: no labels

  Outcome sup = store_.Run({"logs", "ws", "--supervisor"});
  EXPECT_EQ(sup.out.find("Linux version"), std::string::npos);
  EXPECT_NE(sup.out.find("stage: qemu"), std::string::npos);
  EXPECT_EQ(store_.Run({"logs", "ws", "--supervisor", "--console"}).code, 2);
}

TEST_F(FilesCliTest, LogsSince) {
  std::ofstream(WsFile("supervisor.log"))
      << "2026-12-01T10:00:00Z stage: old\nunstamped old\n"
      << "2026-12-01T11:00:00Z stage: new\nunstamped new\n";
  Outcome o = store_.Run({"logs", "ws", "--supervisor", "--since", "2026-12-01T10:30:00Z"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "2026-12-01T11:00:00Z stage: new\nunstamped new\n");
  // A duration: everything in this file is long past.
  Outcome d = store_.Run({"logs", "ws", "--supervisor", "--since", "1h30m"});
  EXPECT_EQ(d.out, "");
  // The console has no times: it is shown whole when it was written since.
  std::ofstream(WsFile("console.log")) << "boot\n";
  Outcome c = store_.Run({"logs", "ws", "--console", "--since", "10m"});
  EXPECT_EQ(c.out, "boot\n");
  EXPECT_EQ(store_.Run({"logs", "ws", "--since", "soon"}).code, 2);
  EXPECT_EQ(store_.Run({"logs", "ws", "--since", "10"}).code, 2);
}

TEST_F(FilesCliTest, LogsOfUnknownOrNeverStartedWorkspace) {
  EXPECT_EQ(store_.Run({"logs", "nope"}).code, 1);
  Outcome o = store_.Run({"logs", "ws", "-f"});  // no supervisor: prints what there is and ends
  EXPECT_EQ(o.code, 0);
  Outcome n = store_.Run({"logs", "ws"});
  EXPECT_NE(n.err.find("has no logs yet"), std::string::npos);
}

// A start error names `cloister logs NAME` (here the supervisor binary exits at once).
TEST_F(FilesCliTest, StartErrorPointsAtLogs) {
  setenv("CLOISTER_EXE", "/bin/false", 1);
  Outcome o = store_.Run({"start", "ws", "--accel", "tcg"});
  unsetenv("CLOISTER_EXE");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("Hint: "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("`cloister logs ws`"), std::string::npos) << o.err;
}

TEST_F(FilesCliTest, CompleteNamesListsTheStore) {
  ASSERT_EQ(store_.CreateWorkspace("second"), "");
  Outcome o = store_.Run({"_complete-names"});
  EXPECT_EQ(o.out, "second\nws\n");
  Outcome help = store_.Run({"--help"});
  EXPECT_EQ(help.out.find("_complete-names"), std::string::npos);  // hidden
}

class CompletionTest : public FilesCliTest {
 protected:
  void SetUp() override {
    FilesCliTest::SetUp();
    Outcome o = store_.Run({"completion", "bash"});
    ASSERT_EQ(o.code, 0) << o.err;
    script_ = store_.root() + "/cloister.bash";
    std::ofstream(script_) << o.out;
    // A stand-in `cloister` on PATH for the script's name lookup: it prints its arguments' store
    // (so the test sees --store passed on) and two names.
    bin_ = store_.root() + "/bin";
    fs::create_directories(bin_);
    std::ofstream(bin_ + "/cloister")
        << "#!/bin/sh\n[ \"$1\" = --store ] && { echo \"store:$2\"; shift 2; }\n"
        << "[ \"$1\" = _complete-names ] && printf 'alpha\\nbeta\\n'\n";
    chmod((bin_ + "/cloister").c_str(), 0755);
  }

  // COMPREPLY for the command line `words` (the last word is the one being completed).
  std::set<std::string> Complete(const std::vector<std::string>& words) {
    std::string arr;
    for (const std::string& w : words) arr += "'" + w + "' ";
    std::string cmd = "PATH=" + bin_ + ":$PATH; source " + script_ + "; COMP_WORDS=(" + arr +
                      "); COMP_CWORD=" + std::to_string(words.size() - 1) +
                      "; _cloister; printf '%s\\n' \"${COMPREPLY[@]}\"";
    auto r = RunProcess({"bash", "--norc", "--noprofile", "-c", cmd});
    EXPECT_TRUE(r.ok() && r->exit_code == 0);
    std::set<std::string> out;
    if (!r.ok()) return out;
    for (const std::string& l : Split(r->out, '\n')) {
      if (!l.empty()) out.insert(l);
    }
    return out;
  }

  std::string script_, bin_;
};

// The root's verbs are exactly the visible subcommands `--help` lists: the script cannot drift.
TEST_F(CompletionTest, VerbsAreTheHelpTree) {
  Outcome help = store_.Run({"--help"});
  std::set<std::string> listed;
  bool in = false;
  for (const std::string& line : Split(help.out, '\n')) {
    if (line == "Subcommands:") {
      in = true;
      continue;
    }
    if (in && StartsWith(line, "  ") && line.size() > 2 && line[2] != ' ') {
      listed.insert(line.substr(2, line.find(' ', 2) - 2));
    }
  }
  ASSERT_GT(listed.size(), 20u);
  EXPECT_TRUE(listed.count("cp") && listed.count("logs") && listed.count("completion"));
  EXPECT_EQ(Complete({"cloister", ""}), listed);
  EXPECT_EQ(Complete({"cloister", "lo"}), (std::set<std::string>{"logs"}));
}

TEST_F(CompletionTest, SubVerbsFlagsAndNames) {
  std::set<std::string> image = Complete({"cloister", "image", ""});
  EXPECT_TRUE(image.count("build") && image.count("ls")) << Join({image.begin(), image.end()}, " ");
  EXPECT_EQ(Complete({"cloister", "exec", "--w"}), (std::set<std::string>{"--workdir", "--wait"}));
  EXPECT_EQ(Complete({"cloister", "logs", "-"}).count("--since"), 1u);
  // Workspace names where the verb takes NAME (after a global --store, which is passed on).
  EXPECT_EQ(Complete({"cloister", "logs", ""}), (std::set<std::string>{"alpha", "beta"}));
  EXPECT_EQ(Complete({"cloister", "--store", "/s", "exec", ""}),
            (std::set<std::string>{"alpha", "beta", "store:/s"}));
  // A flag's value is not a verb or a name (bash falls back to files: -o default).
  EXPECT_TRUE(Complete({"cloister", "exec", "-u", ""}).empty());
  EXPECT_TRUE(Complete({"cloister", "logs", "--since", ""}).empty());
  // ... and the word after it is parsed as usual.
  EXPECT_EQ(Complete({"cloister", "--store", "/s", "lo"}), (std::set<std::string>{"logs"}));
  auto p = RunProcess({"bash", "--norc", "-c", "source " + script_ + "; complete -p cloister"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Trim(p->out), "complete -o default -F _cloister cloister");
}

TEST_F(CompletionTest, ZshAndFish) {
  Outcome z = store_.Run({"completion", "zsh"});
  EXPECT_NE(z.out.find("bashcompinit"), std::string::npos);
  EXPECT_NE(z.out.find("complete -o default -F _cloister cloister"), std::string::npos);
  Outcome f = store_.Run({"completion", "fish"});
  EXPECT_NE(f.out.find("complete -c cloister -n '__fish_use_subcommand' -a logs"), std::string::npos);
  EXPECT_NE(f.out.find("__fish_seen_subcommand_from image; and not __fish_seen_subcommand_from"),
            std::string::npos);
  EXPECT_EQ(store_.Run({"completion", "tcsh"}).code, 2);
}

}  // namespace
}  // namespace cloister::cli

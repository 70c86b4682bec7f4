// `cloister cp` in a real VM (issue 17's proof), under TCG with the test image (busybox tar) and
// the real `cloister` binary, in one boot:
//   - a host tree into the guest (into an existing directory, and a file onto a new name): modes,
//     mtimes and symlinks kept, as dev sees them;
//   - guest trees out (to a new name, and the tree that went in, back): modes and mtimes of files
//     and directories kept;
//   - `-` both ways: a tar on stdout that the host's tar reads, a host tar on stdin;
//   - a hostile guest (root replaced `tar` with one that sends a crafted archive: `loot/link ->`
//     a host directory, then `loot/link/x`): the copy is refused, nothing lands in that directory,
//     and `-` does not pass the entry on either;
//   - `cloister logs NAME -f` follows the supervisor's log until the stop ends it.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/strings.h"
#include "base/subprocess.h"
#include "supervisor/testing.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using testing::Slurp;

void SetMtime(const std::string& path, time_t t) {
  struct timespec ts[2] = {{t, 0}, {t, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// "MODE MTIME" of a host path (lstat), e.g. "751 1400000000".
std::string ModeTime(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return "missing";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%o %lld", st.st_mode & 07777, static_cast<long long>(st.st_mtime));
  return buf;
}

// The guest's hostile archive: loot/, loot/link -> `outside`, loot/link/x.
std::string EvilTar(const std::string& outside) {
  struct archive* a = archive_write_new();
  archive_write_set_format_ustar(a);
  std::vector<char> buf(1 << 16);
  size_t used = 0;
  archive_write_open_memory(a, buf.data(), buf.size(), &used);
  auto add = [&](const char* name, mode_t type, const std::string& link, const std::string& data) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, 0755);
    if (!link.empty()) archive_entry_set_symlink(e, link.c_str());
    archive_entry_set_size(e, data.size());
    archive_write_header(a, e);
    if (!data.empty()) archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  };
  add("loot/", AE_IFDIR, "", "");
  add("loot/link", AE_IFLNK, outside, "");
  add("loot/link/x", AE_IFREG, "", "pwned by the guest\n");
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buf.data(), used);
}

class CpVmTest : public testing::CliVmTest {};

TEST_F(CpVmTest, BothWaysModesTimesStreamsAndSymlinkEscapeRefused) {
  Create("ws");
  Start("ws");
  std::string h = root_ + "/host";
  std::string proj = h + "/proj";
  fs::create_directories(proj + "/sub");
  std::ofstream(proj + "/run.sh") << "#!/bin/sh\necho hi\n";
  std::ofstream(proj + "/sub/data") << "payload";
  fs::create_symlink("data", proj + "/sub/link");
  chmod((proj + "/run.sh").c_str(), 0751);
  chmod((proj + "/sub/data").c_str(), 0640);
  SetMtime(proj + "/run.sh", 1400000000);
  SetMtime(proj + "/sub/data", 1300000000);

  // Into the guest: an existing directory keeps the source's name.
  auto in = Cloister({"cp", proj, "ws:/home/dev"});
  ASSERT_EQ(in.exit_code, 0) << in.err;
  EXPECT_NE(in.err.find("copied 5 entries"), std::string::npos) << in.err;
  int code = -1;
  std::string seen = Exec("ws",
                          "cd /home/dev/proj && stat -c '%n %a %Y %U' run.sh sub/data && "
                          "readlink sub/link && cat sub/data && ./run.sh",
                          &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(seen, "run.sh 751 1400000000 dev\nsub/data 640 1300000000 dev\ndata\npayloadhi\n");
  // A file onto a new name (relative: from /home/dev).
  auto file = Cloister({"cp", proj + "/sub/data", "ws:renamed"});
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(Exec("ws", "cat /home/dev/renamed"), "payload");
  // A directory onto a file is refused.
  auto onto = Cloister({"cp", proj, "ws:/home/dev/renamed"});
  EXPECT_NE(onto.exit_code, 0);
  EXPECT_NE(onto.err.find("onto the file"), std::string::npos) << onto.err;

  // Out of the guest, to a new name: files' and directories' modes and mtimes kept.
  ASSERT_EQ(Exec("ws",
                 "mkdir -p /home/dev/made/d && printf guest > /home/dev/made/d/f && "
                 "chmod 0604 /home/dev/made/d/f && chmod 0711 /home/dev/made/d && "
                 "touch -d '2001-09-09 01:46:40' /home/dev/made/d/f /home/dev/made/d && "
                 "stat -c %Y /home/dev/made/d",
                 &code),
            "1000000000\n");
  auto out = Cloister({"cp", "ws:/home/dev/made", h + "/back"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(Slurp(h + "/back/d/f"), "guest");
  EXPECT_EQ(ModeTime(h + "/back/d/f"), "604 1000000000");
  EXPECT_EQ(ModeTime(h + "/back/d"), "711 1000000000");
  // The tree that went in, back out: the same modes, mtimes and symlink.
  auto rt = Cloister({"cp", "ws:/home/dev/proj", h + "/rt"});
  ASSERT_EQ(rt.exit_code, 0) << rt.err;
  EXPECT_EQ(ModeTime(h + "/rt/run.sh"), "751 1400000000");
  EXPECT_EQ(ModeTime(h + "/rt/sub/data"), "640 1300000000");
  EXPECT_EQ(fs::read_symlink(h + "/rt/sub/link"), "data");
  // Into an existing host directory: it keeps the guest's name.
  fs::create_directories(h + "/into");
  ASSERT_EQ(Cloister({"cp", "ws:renamed", h + "/into"}).exit_code, 0);
  EXPECT_EQ(Slurp(h + "/into/renamed"), "payload");

  // `-` out: a tar stream the host's own tar reads.
  auto tar_out = Cloister({"cp", "ws:/home/dev/made", "-"});
  ASSERT_EQ(tar_out.exit_code, 0) << tar_out.err;
  std::ofstream(h + "/made.tar", std::ios::binary) << tar_out.out;
  fs::create_directories(h + "/x");
  auto untar = RunProcess({"tar", "-xf", h + "/made.tar", "-C", h + "/x"});
  ASSERT_TRUE(untar.ok() && untar->exit_code == 0) << (untar.ok() ? untar->err : "");
  EXPECT_EQ(Slurp(h + "/x/made/d/f"), "guest");
  EXPECT_EQ(ModeTime(h + "/x/made/d/f"), "604 1000000000");
  // `-` in: a host tar on stdin, into an existing guest directory.
  auto mk = RunProcess({"tar", "-cf", h + "/in.tar", "-C", h, "proj"});
  ASSERT_TRUE(mk.ok() && mk->exit_code == 0);
  Exec("ws", "mkdir -p /home/dev/instream");
  auto tar_in = Cloister({"cp", "-", "ws:/home/dev/instream"}, Slurp(h + "/in.tar"));
  ASSERT_EQ(tar_in.exit_code, 0) << tar_in.err;
  EXPECT_EQ(Exec("ws", "cat /home/dev/instream/proj/sub/data; stat -c %a "
                       "/home/dev/instream/proj/run.sh"),
            "payload751\n");

  // A hostile guest: root replaces tar with one that sends a crafted archive.
  std::string outside = h + "/outside";
  fs::create_directories(outside);
  fs::create_directories(h + "/dest");
  std::ofstream(h + "/evil.tar", std::ios::binary) << EvilTar(outside);
  ASSERT_EQ(Cloister({"cp", h + "/evil.tar", "ws:/home/dev/evil.tar"}).exit_code, 0);
  Exec("ws",
       "mkdir -p /usr/local/bin && printf '#!/bin/sh\\nexec cat /home/dev/evil.tar\\n' > "
       "/usr/local/bin/tar && chmod 755 /usr/local/bin/tar",
       &code, "root");
  ASSERT_EQ(code, 0);
  auto evil = Cloister({"cp", "ws:/home/dev/loot", h + "/dest"});
  EXPECT_NE(evil.exit_code, 0);
  EXPECT_NE(evil.err.find("goes through the archive's symlink"), std::string::npos) << evil.err;
  EXPECT_FALSE(fs::exists(outside + "/x"));
  EXPECT_TRUE(fs::is_symlink(h + "/dest/loot/link"));  // written before the refused entry
  auto evil_stream = Cloister({"cp", "ws:/home/dev/loot", "-"});
  EXPECT_NE(evil_stream.exit_code, 0);
  EXPECT_EQ(evil_stream.out.find("pwned"), std::string::npos);
  EXPECT_EQ(evil_stream.out.find("loot/link/x"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(outside));
  Exec("ws", "rm -f /usr/local/bin/tar", &code, "root");

  // The session is usable after the refusals.
  EXPECT_EQ(Exec("ws", "echo still"), "still\n");

  // `logs -f` follows the supervisor's log while it lives and ends when it exits, having printed
  // what the stop appended.
  std::string sup_log = root_ + "/workspaces/ws/supervisor.log";
  std::atomic<bool> done{false};
  RunOutput follow;
  std::thread follower([&] {
    follow = Cloister({"logs", "ws", "-f", "--supervisor"});
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));  // let it start following
  EXPECT_FALSE(done.load()) << "logs -f returned while the supervisor was running";
  size_t before = Slurp(sup_log).size();
  Stop("ws");
  follower.join();
  std::string log = Slurp(sup_log);
  ASSERT_GT(log.size(), before);
  std::vector<std::string> lines = Split(Trim(log), '\n');
  EXPECT_EQ(follow.exit_code, 0) << follow.err;
  EXPECT_NE(follow.out.find(lines.back()), std::string::npos) << follow.out;
}

}  // namespace
}  // namespace cloister::vm

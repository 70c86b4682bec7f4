// The cp extractor against hand-made hostile archives (built here with libarchive's writer, which
// writes any name it is given), and a host round trip keeping modes and mtimes.
#include "transfer/tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cloister::transfer {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::string name;
  mode_t type = AE_IFREG;
  mode_t perm = 0644;
  std::string data;
  std::string symlink;   // AE_IFLNK target
  std::string hardlink;  // a hard link to this name
  time_t mtime = 1600000000;
};

std::string MakeTar(const std::vector<Entry>& entries) {
  struct archive* a = archive_write_new();
  archive_write_set_format_gnutar(a);
  std::vector<char> buf(4 << 20);
  size_t used = 0;
  EXPECT_EQ(archive_write_open_memory(a, buf.data(), buf.size(), &used), ARCHIVE_OK);
  for (const Entry& e : entries) {
    struct archive_entry* ae = archive_entry_new();
    archive_entry_set_pathname(ae, e.name.c_str());
    archive_entry_set_filetype(ae, e.type);
    archive_entry_set_perm(ae, e.perm);
    archive_entry_set_mtime(ae, e.mtime, 0);
    if (!e.symlink.empty()) archive_entry_set_symlink(ae, e.symlink.c_str());
    if (!e.hardlink.empty()) archive_entry_set_hardlink(ae, e.hardlink.c_str());
    archive_entry_set_size(ae, e.type == AE_IFREG && e.hardlink.empty() ? e.data.size() : 0);
    EXPECT_EQ(archive_write_header(a, ae), ARCHIVE_OK) << e.name;
    if (e.type == AE_IFREG && !e.data.empty()) {
      archive_write_data(a, e.data.data(), e.data.size());
    }
    archive_entry_free(ae);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buf.data(), used);
}

// A readable fd holding `bytes` at offset 0 (the caller closes it).
int MemFd(const std::string& bytes) {
  int fd = memfd_create("tar", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  lseek(fd, 0, SEEK_SET);
  return fd;
}

std::string ReadAll(int fd) {
  lseek(fd, 0, SEEK_SET);
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

class TarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-tar-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dest_ = root_ + "/dest";
    outside_ = root_ + "/outside";
    fs::create_directories(dest_);
    fs::create_directories(outside_);
  }
  void TearDown() override { fs::remove_all(root_); }

  Result<TarStats> Extract(const std::vector<Entry>& entries, EntryPolicy policy = {}) {
    if (policy.top.empty()) policy.top = "top";
    policy.warn = [this](const std::string& w) { warnings_.push_back(w); };
    int fd = MemFd(MakeTar(entries));
    auto r = ExtractTar(fd, dest_, policy);
    close(fd);
    return r;
  }
  Result<TarStats> Filter(const std::vector<Entry>& entries, std::string* out = nullptr) {
    EntryPolicy policy;
    policy.top = "top";
    int in = MemFd(MakeTar(entries));
    int outfd = memfd_create("out", MFD_CLOEXEC);
    auto r = FilterTar(in, outfd, policy);
    if (out) *out = ReadAll(outfd);
    close(in);
    close(outfd);
    return r;
  }

  std::string root_, dest_, outside_;
  std::vector<std::string> warnings_;
};

TEST_F(TarTest, ExtractsTreeWithModesAndTimes) {
  auto r = Extract({{"top/", AE_IFDIR, 0750, "", "", "", 1500000000},
                    {"top/run.sh", AE_IFREG, 0751, "#!/bin/sh\n", "", "", 1400000000},
                    {"top/sub/", AE_IFDIR, 0705, "", "", "", 1300000000},
                    {"top/sub/data", AE_IFREG, 0604, "payload", "", "", 1200000000},
                    {"top/sub/rel", AE_IFLNK, 0777, "", "data"}});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->entries, 5u);
  struct stat st;
  ASSERT_EQ(stat((dest_ + "/top/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0751u);
  EXPECT_EQ(st.st_mtime, 1400000000);
  ASSERT_EQ(stat((dest_ + "/top/sub/data").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0604u);
  EXPECT_EQ(st.st_mtime, 1200000000);
  ASSERT_EQ(stat((dest_ + "/top/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0705u);
  EXPECT_EQ(st.st_mtime, 1300000000);  // set after its files were written
  ASSERT_EQ(stat((dest_ + "/top").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtime, 1500000000);
  EXPECT_EQ(fs::read_symlink(dest_ + "/top/sub/rel"), "data");
  std::ifstream f(dest_ + "/top/sub/data");
  std::string body((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(body, "payload");
}

TEST_F(TarTest, RenamesTheTop) {
  EntryPolicy p;
  p.top = "src";
  p.rename_top = "copy";
  auto r = Extract({{"src/", AE_IFDIR, 0755}, {"src/a", AE_IFREG, 0644, "x"}}, p);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(fs::exists(dest_ + "/copy/a"));
  EXPECT_FALSE(fs::exists(dest_ + "/src"));
}

// SECURITY: the guest's `link -> /outside` then `link/x` (the escape) is refused and
// nothing is written outside the destination.
TEST_F(TarTest, RefusesWritingThroughArchiveSymlink) {
  auto r = Extract({{"top/", AE_IFDIR, 0755},
                    {"top/link", AE_IFLNK, 0777, "", outside_},
                    {"top/link/x", AE_IFREG, 0644, "pwned"}});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(outside_ + "/x"));
  // The same through a relative link.
  fs::remove_all(dest_ + "/top");
  r = Extract({{"top/", AE_IFDIR, 0755},
               {"top/up", AE_IFLNK, 0777, "", "../../outside"},
               {"top/up/y", AE_IFREG, 0644, "pwned"}});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(outside_ + "/y"));
}

// SECURITY: a symlink already on the host inside the destination is not followed either
// (libarchive's SECURE_SYMLINKS: the archive's own entries cannot see it).
TEST_F(TarTest, RefusesWritingThroughHostSymlink) {
  fs::create_directories(dest_ + "/top");
  fs::create_directory_symlink(outside_, dest_ + "/top/link");
  auto r = Extract({{"top/", AE_IFDIR, 0755}, {"top/link/x", AE_IFREG, 0644, "pwned"}});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(outside_ + "/x"));
}

// SECURITY: FilterTar (cp NAME:PATH -) has no disk to check: its own check refuses the escape.
TEST_F(TarTest, FilterRefusesEntryBelowSymlink) {
  auto r = Filter({{"top/", AE_IFDIR, 0755},
                   {"top/link", AE_IFLNK, 0777, "", "/etc"},
                   {"top/link/x", AE_IFREG, 0644, "pwned"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt);
}

TEST_F(TarTest, FilterPassesCleanEntries) {
  std::string out;
  auto r = Filter({{"top/", AE_IFDIR, 0755},
                   {"top/a", AE_IFREG, 04755, "abc"},
                   {"top/fifo", AE_IFIFO, 0644}},
                  &out);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->entries, 2u);
  EXPECT_EQ(r->skipped, 1u);
  // Read it back: the setuid bit is gone, the fifo is not there.
  struct archive* a = archive_read_new();
  archive_read_support_format_all(a);
  ASSERT_EQ(archive_read_open_memory(a, out.data(), out.size()), ARCHIVE_OK);
  struct archive_entry* e;
  std::vector<std::string> names;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    names.push_back(archive_entry_pathname(e));
    if (names.back() == "top/a") {
      EXPECT_EQ(archive_entry_perm(e), 0755u);
    }
  }
  archive_read_free(a);
  EXPECT_EQ(names, (std::vector<std::string>{"top/", "top/a"}));
}

// SECURITY: names with `..`, absolute names and names outside the expected top are refused.
TEST_F(TarTest, RefusesDotDotAbsoluteAndForeignNames) {
  auto r = Extract({{"top/", AE_IFDIR, 0755}, {"top/../escape", AE_IFREG, 0644, "x"}});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(root_ + "/escape"));
  r = Extract({{"top/", AE_IFDIR, 0755}, {outside_ + "/abs", AE_IFREG, 0644, "x"}});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(outside_ + "/abs"));
  r = Extract({{"top/", AE_IFDIR, 0755}, {"other/x", AE_IFREG, 0644, "x"}});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(dest_ + "/other"));
  r = Extract({{"top/", AE_IFDIR, 0755}, {"top//x", AE_IFREG, 0644, "x"}});
  ASSERT_FALSE(r.ok());
}

// SECURITY: devices and fifos are never created; setuid/setgid/sticky bits are cleared.
TEST_F(TarTest, SkipsDevicesAndClearsSetuid) {
  auto r = Extract({{"top/", AE_IFDIR, 01777},
                    {"top/fifo", AE_IFIFO, 0644},
                    {"top/dev", AE_IFCHR, 0666},
                    {"top/suid", AE_IFREG, 06755, "x"}});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->skipped, 2u);
  EXPECT_EQ(warnings_.size(), 2u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(dest_ + "/top/fifo")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dest_ + "/top/dev")));
  struct stat st;
  ASSERT_EQ(stat((dest_ + "/top/suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat((dest_ + "/top").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
}

// SECURITY: a hard link may only name a file this archive wrote (never a host file).
TEST_F(TarTest, HardLinksOnlyToFilesOfTheArchive) {
  std::string secret = outside_ + "/secret";
  std::ofstream(secret) << "host secret";
  auto r = Extract({{"top/", AE_IFDIR, 0755}, {"top/h", AE_IFREG, 0644, "", "", secret}});
  ASSERT_FALSE(r.ok());
  r = Extract({{"top/", AE_IFDIR, 0755}, {"top/h", AE_IFREG, 0644, "", "", "top/../outside/secret"}});
  ASSERT_FALSE(r.ok());
  r = Extract({{"top/", AE_IFDIR, 0755},
               {"top/l", AE_IFLNK, 0777, "", outside_},
               {"top/h", AE_IFREG, 0644, "", "", "top/l/secret"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(fs::hard_link_count(secret), 1u);
  fs::remove_all(dest_ + "/top");
  r = Extract({{"top/", AE_IFDIR, 0755},
               {"top/a", AE_IFREG, 0644, "same"},
               {"top/b", AE_IFREG, 0644, "", "", "top/a"}});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(fs::hard_link_count(dest_ + "/top/a"), 2u);
}

// SECURITY: nor a file that was already in the destination (the guest cannot hard-link to, and
// then write through, a host file it did not send).
TEST_F(TarTest, HardLinkToHostFileInDestinationRefused) {
  fs::create_directories(dest_ + "/top");
  std::ofstream(dest_ + "/top/mine") << "the user's";
  auto r = Extract({{"top/", AE_IFDIR, 0755}, {"top/h", AE_IFREG, 0644, "", "", "top/mine"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(fs::hard_link_count(dest_ + "/top/mine"), 1u);
  EXPECT_FALSE(fs::exists(dest_ + "/top/h"));
}

TEST_F(TarTest, FileDestinationNeedsOneRegularFile) {
  EntryPolicy p;
  p.top = "top";
  p.top_must_be_file = true;
  auto r = Extract({{"top/", AE_IFDIR, 0755}}, p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition);
  r = Extract({{"top", AE_IFREG, 0600, "one"}}, p);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  r = Extract({{"top", AE_IFREG, 0600, "one"}, {"top", AE_IFREG, 0600, "two"}}, p);
  ASSERT_FALSE(r.ok());
}

TEST_F(TarTest, EmptyOrGarbageIsAnError) {
  auto r = Extract({});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  std::string tar = MakeTar({{"top/", AE_IFDIR, 0755}, {"top/a", AE_IFREG, 0644, std::string(5000, 'a')}});
  for (size_t cut : {size_t{100}, size_t{700}, size_t{3000}}) {
    int fd = MemFd(tar.substr(0, cut));
    EntryPolicy p;
    p.top = "top";
    auto t = ExtractTar(fd, dest_, p);
    close(fd);
    EXPECT_FALSE(t.ok()) << cut;
  }
  int fd = MemFd(std::string(2048, '\x5a'));
  EntryPolicy p;
  p.top = "top";
  EXPECT_FALSE(ExtractTar(fd, dest_, p).ok());
  close(fd);
}

TEST_F(TarTest, WorkingDirectoryUntouched) {
  fs::path before = fs::current_path();
  (void)Extract({{"top/", AE_IFDIR, 0755}, {"top/../x", AE_IFREG, 0644}});
  EXPECT_EQ(fs::current_path(), before);
  (void)Extract({{"top/", AE_IFDIR, 0755}});
  EXPECT_EQ(fs::current_path(), before);
}

// SECURITY (issue 37 item 6): `cp NAME:PATH DST` with DST inside a read-write share, whose
// directories a root guest changes over 9p while the copy runs. A thread does the guest's part:
// each directory the copy makes is moved aside and replaced by a symlink to a directory outside
// DST, as fast as it can. Over many copies not one file may appear outside DST (a check of each
// path followed by an open by path loses this race; extraction through directory fds cannot).
TEST_F(TarTest, RacingSymlinkSwapsNeverWriteOutside) {
  constexpr int kCopies = 40, kDirs = 8, kFiles = 24;
  std::vector<Entry> entries = {{"top/", AE_IFDIR, 0755}};
  for (int d = 0; d < kDirs; ++d) {
    std::string dir = "top/d" + std::to_string(d);
    entries.push_back({dir + "/", AE_IFDIR, 0755});
    for (int f = 0; f < kFiles; ++f) {
      entries.push_back({dir + "/f" + std::to_string(f), AE_IFREG, 0644, std::string(512, 'x')});
    }
  }
  const std::string tar = MakeTar(entries);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> swaps{0};
  std::thread guest([&] {
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (int d = -1; d < kDirs; ++d) {
        std::string p = dest_ + "/top" + (d < 0 ? "" : "/d" + std::to_string(d));
        struct stat st;
        if (lstat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        std::string aside = dest_ + "/aside" + std::to_string(n++);
        if (rename(p.c_str(), aside.c_str()) != 0) continue;
        if (symlink(outside_.c_str(), p.c_str()) == 0) ++swaps;
      }
    }
  });
  int escaped_copies = 0;
  size_t escaped_files = 0;
  for (int i = 0; i < kCopies; ++i) {
    int fd = MemFd(tar);
    EntryPolicy p;
    p.top = "top";
    (void)ExtractTar(fd, dest_, p);  // refused or not: what counts is where the bytes went
    close(fd);
    size_t outside = 0;
    for (auto it = fs::recursive_directory_iterator(outside_); it != fs::end(it); ++it) ++outside;
    if (outside) ++escaped_copies;
    escaped_files += outside;
    fs::remove_all(outside_);
    fs::create_directories(outside_);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dest_, ec)) fs::remove_all(e.path(), ec);
  }
  stop = true;
  guest.join();
  EXPECT_GT(swaps.load(), 0u) << "the racing thread never swapped a directory: the test proves nothing";
  EXPECT_EQ(escaped_copies, 0) << escaped_files << " files written outside the destination in "
                               << escaped_copies << " of " << kCopies << " copies";
}

// WriteTar then ExtractTar: a host tree survives with modes, mtimes and symlinks (stored, not
// followed: the symlink to a directory outside does not pull that directory in).
TEST_F(TarTest, HostRoundTrip) {
  std::string src = root_ + "/src";
  fs::create_directories(src + "/sub");
  std::ofstream(src + "/sub/f") << "hello";
  std::ofstream(outside_ + "/not-copied") << "x";
  fs::create_directory_symlink(outside_, src + "/out");
  chmod((src + "/sub/f").c_str(), 0640);
  chmod((src + "/sub").c_str(), 0710);
  struct timespec ts[2] = {{1111111111, 0}, {1111111111, 0}};
  utimensat(AT_FDCWD, (src + "/sub/f").c_str(), ts, 0);
  struct timespec td[2] = {{1222222222, 0}, {1222222222, 0}};
  utimensat(AT_FDCWD, (src + "/sub").c_str(), td, 0);

  int fd = memfd_create("w", MFD_CLOEXEC);
  auto w = WriteTar(fd, src, "copy");
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ(w->entries, 4u);  // copy, copy/sub, copy/sub/f, copy/out
  lseek(fd, 0, SEEK_SET);
  EntryPolicy p;
  p.top = "copy";
  auto r = ExtractTar(fd, dest_, p);
  close(fd);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  struct stat st;
  ASSERT_EQ(stat((dest_ + "/copy/sub/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtime, 1111111111);
  ASSERT_EQ(stat((dest_ + "/copy/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0710u);
  EXPECT_EQ(st.st_mtime, 1222222222);
  EXPECT_TRUE(fs::is_symlink(dest_ + "/copy/out"));
  EXPECT_EQ(fs::read_symlink(dest_ + "/copy/out"), outside_);
}

}  // namespace
}  // namespace cloister::transfer

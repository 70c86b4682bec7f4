// `cloister image build --from` end to end (issue 41's proof for OCI sources), with the real
// `cloister` binary under TCG: three builder VM boots and two boots of one workspace.
//   - an OCI image the test writes itself (a rootfs of one static busybox and /bin/sh: no init,
//     no libc, no tmux, no sshd), as an oci-archive: built with a --run step, signed into the
//     catalog with its provenance (source, manifest digest, kernel, busybox, agent, what it has);
//   - the same image pushed to Debian's docker-registry on loopback and pulled (`docker://`) through
//     the builder's proxy and its resolve override, with the same step, gives the same disk SHA-256;
//   - a step that reads a host path or connects to the host fails the build (nothing reached the
//     host's listener), with a clear error, and leaves nothing half-built in the store (that build
//     reads the image from its layout directory, `oci:DIR:REF`);
//   - Ctrl-C while the builder boots stops the build and keeps nothing;
//   - no file outside the store is written by a build (HOME, TMPDIR and XDG dirs watched);
//   - a workspace from the image reaches READY, runs exec (PID 1 is cloister's init, the step's
//     file is there) and cp both ways, refuses attach and ssh naming what to add, and `reset`
//     brings it back to the image (a second workspace boot).
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "catalog/names.h"
#include "catalog/sha256.h"
#include "catalog/store.h"
#include "image/builder.h"
#include "image/testing.h"
#include "proxy/ca.h"
#include "supervisor/testing.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using vm::testing::Slurp;

// Writes `bytes` as a blob of the layout; returns "sha256:HEX".
std::string Blob(const std::string& layout, const std::string& bytes) {
  std::string hex = catalog::Sha256Hex(bytes);
  fs::create_directories(layout + "/blobs/sha256");
  std::ofstream(layout + "/blobs/sha256/" + hex, std::ios::binary) << bytes;
  return "sha256:" + hex;
}

// A tar (ustar, sorted, owner root, fixed mtime) of `entries`: name -> (symlink target or "",
// file contents), directories as names ending in '/'.
std::string Tar(const std::vector<std::tuple<std::string, std::string, std::string>>& entries) {
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  std::vector<char> buf(16 << 20);
  size_t used = 0;
  archive_write_open_memory(a, buf.data(), buf.size(), &used);
  for (const auto& [name, link, data] : entries) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    bool dir = name.back() == '/';
    archive_entry_set_filetype(e, dir ? AE_IFDIR : !link.empty() ? AE_IFLNK : AE_IFREG);
    archive_entry_set_perm(e, dir ? 0755 : 0755);
    archive_entry_set_mtime(e, 1700000000, 0);
    if (!link.empty()) archive_entry_set_symlink(e, link.c_str());
    archive_entry_set_size(e, dir || !link.empty() ? 0 : data.size());
    archive_write_header(a, e);
    if (!dir && link.empty()) archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buf.data(), used);
}

// An OCI image layout of a rootfs with only Debian's static busybox as /bin/busybox and /bin/sh,
// tagged "1"; and the same layout as an oci-archive. Returns the manifest's digest.
std::string MakeBusyboxImage(const std::string& layout, const std::string& archive) {
  std::string busybox = Slurp("/bin/busybox");
  if (busybox.empty()) return "";
  std::string layer = Tar({{"bin/", "", ""}, {"bin/busybox", "", busybox}, {"bin/sh", "busybox", ""}});
  std::string layer_digest = Blob(layout, layer);
  json config = {{"architecture", "amd64"},
                 {"os", "linux"},
                 {"config", {{"Cmd", {"/bin/sh"}}}},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", {layer_digest}}}}};
  std::string config_bytes = config.dump();
  json manifest = {
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                  {"digest", Blob(layout, config_bytes)},
                  {"size", config_bytes.size()}}},
      {"layers", {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                   {"digest", layer_digest},
                   {"size", layer.size()}}}}};
  std::string manifest_bytes = manifest.dump();
  std::string digest = Blob(layout, manifest_bytes);
  json index = {{"schemaVersion", 2},
                {"manifests", {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                {"digest", digest},
                                {"size", manifest_bytes.size()},
                                {"annotations", {{"org.opencontainers.image.ref.name", "1"}}}}}}};
  std::ofstream(layout + "/index.json") << index.dump();
  std::ofstream(layout + "/oci-layout") << R"({"imageLayoutVersion":"1.0.0"})";
  std::vector<std::tuple<std::string, std::string, std::string>> files{
      {"blobs/", "", ""}, {"blobs/sha256/", "", ""}};
  for (const auto& e : fs::directory_iterator(layout + "/blobs/sha256")) {
    files.push_back({"blobs/sha256/" + e.path().filename().string(), "", Slurp(e.path())});
  }
  files.push_back({"index.json", "", Slurp(layout + "/index.json")});
  files.push_back({"oci-layout", "", Slurp(layout + "/oci-layout")});
  std::ofstream(archive, std::ios::binary) << Tar(files);
  return digest;
}

// The disk's SHA-256 from `image build`'s output ("disk sha256:HEX").
std::string DiskSha(const std::string& out) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex("disk sha256:([0-9a-f]{64})"))) return m[1];
  return "";
}

// Every regular file under `dir` ("" when none).
std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    out.push_back(it->path().string());
  }
  return out;
}

// A free port on 127.0.0.1 (bound and released: the registry binds it right after).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool Accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Debian's docker-registry on 127.0.0.1, TLS with a leaf of `ca` for kRegistryHost: the fake
// upstream the builder's proxy reaches through its resolve override. Killed by the destructor.
constexpr char kRegistryHost[] = "registry.cloister.test";
struct Registry {
  pid_t pid = -1;
  int port = 0;
  ~Registry() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
  bool Start(const std::string& dir, proxy::CertAuthority& ca) {
    fs::create_directories(dir + "/data");
    auto leaf = ca.LeafPem(kRegistryHost);
    if (!leaf.ok()) return false;
    std::ofstream(dir + "/leaf.pem") << *leaf;
    std::ofstream(dir + "/leaf.key") << ca.LeafKeyPem();
    port = FreePort();
    std::ofstream(dir + "/config.yml")
        << "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: " << dir
        << "/data\nhttp:\n  addr: 127.0.0.1:" << port << "\n  tls:\n    certificate: " << dir
        << "/leaf.pem\n    key: " << dir << "/leaf.key\n";
    pid = fork();
    if (pid == 0) {
      int null_fd = open("/dev/null", O_RDWR);
      dup2(null_fd, 0);
      dup2(null_fd, 1);
      execlp("docker-registry", "docker-registry", "serve", (dir + "/config.yml").c_str(), nullptr);
      _exit(127);
    }
    return vm::testing::WaitFor([&] { return Accepts(port); }, std::chrono::seconds(30));
  }
};

class ImageOciVmTest : public vm::testing::CliVmTest {
 protected:
  void SetUp() override {
    CliVmTest::SetUp();
    // The tests' package cache and the shared builder image, instead of downloading and building
    // them again in the temporary store (the first-use build is `image build --builder`'s).
    fs::create_directories(root_ + "/cache");
    fs::create_directory_symlink(image::testing::TestCacheDir(),
                                 root_ + "/" + catalog::names::kDebCacheDir);
    auto builder = image::testing::SharedBuilderTestImage();
    ASSERT_TRUE(builder.ok()) << builder.error().ToString();
    std::string copy = root_ + "/builder-copy";
    fs::create_directories(copy);
    for (const char* f : {catalog::names::kDiskFile, catalog::names::kKernelFile,
                          catalog::names::kInitrdFile}) {
      auto cp = RunProcess({"cp", "--sparse=always", builder->dir + "/" + f, copy + "/" + f});
      ASSERT_TRUE(cp.ok() && cp->exit_code == 0) << f;
    }
    catalog::CatalogStore catalogs(root_);
    Status published = catalogs.PublishLocal(builder->entry, copy);
    ASSERT_TRUE(published.ok()) << published.error().ToString();
    // Where a build might write outside the store: watched, must stay empty.
    outside_ = root_ + "-outside";
    fs::create_directories(outside_);
    for (const char* v : {"HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"}) {
      env_[v] = outside_;
    }
  }
  void TearDown() override {
    CliVmTest::TearDown();
    std::error_code ec;
    fs::remove_all(outside_, ec);
  }
  std::string outside_;
};

TEST_F(ImageOciVmTest, BusyboxImageBuildsReproduciblyStepsAreContainedAndItBoots) {
  const std::string layout = root_ + "/src/layout", archive = root_ + "/src/bb.tar";
  fs::create_directories(layout);
  const std::string digest = MakeBusyboxImage(layout, archive);
  ASSERT_FALSE(digest.empty()) << "no /bin/busybox on this host (busybox-static)";

  // An unknown transport is refused before any VM starts.
  auto bad_ref = Cloister({"image", "build", "--from", "podman://x", "--name", "x"});
  EXPECT_NE(bad_ref.exit_code, 0);
  EXPECT_NE(bad_ref.err.find("unknown transport \"podman\""), std::string::npos) << bad_ref.err;

  // Ctrl-C while the builder VM boots: the build stops, says so, and keeps nothing (no build,
  // work or builder directory).
  {
    int master = -1;
    pid_t cut = SpawnCloisterOnPty({"image", "build", "--from", "oci-archive:" + archive, "--name",
                                    "cut", "--disk-size", "64M"},
                                   &master);
    ASSERT_GT(cut, 0);
    std::string seen;
    bool signalled = false;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (std::chrono::steady_clock::now() < until) {
      pollfd mp{master, POLLIN, 0};
      if (poll(&mp, 1, 500) <= 0) continue;
      char buf[4096];
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, static_cast<size_t>(n));
      if (!signalled && seen.find("builder: booting its VM") != std::string::npos) {
        signalled = kill(cut, SIGINT) == 0;
      }
    }
    close(master);
    int status = 0;
    EXPECT_EQ(waitpid(cut, &status, 0), cut);
    EXPECT_TRUE(signalled) << seen;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << seen;
    EXPECT_NE(seen.find("the image build was interrupted"), std::string::npos) << seen;
    EXPECT_FALSE(fs::exists(root_ + "/images/.build-cut"));
    EXPECT_FALSE(fs::exists(root_ + "/images/.work-cut"));
    for (const auto& f : FilesUnder(root_ + "/tmp")) ADD_FAILURE() << "left behind: " << f;
  }

  const std::vector<std::string> build = {"image", "build", "--from", "oci-archive:" + archive,
                                          "--name", "bb", "--disk-size", "64M", "--run",
                                          "echo built-in-the-vm > /etc/step-mark"};
  auto first = Cloister(build);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (const char* stage : {"image: pull ...", "image: pull: Copying blob ", "image: unpack ...", "image: step 0 run 1",
                            "image: finish ...", "image: disk ...", "image: [3/3] disk sha256"}) {
    EXPECT_NE(first.err.find(stage), std::string::npos) << stage << "\n" << first.err;
  }
  const std::string sha = DiskSha(first.out);
  ASSERT_EQ(sha.size(), 64u) << first.out;

  auto describe = Cloister({"image", "describe", "bb", "--json"});
  ASSERT_EQ(describe.exit_code, 0) << describe.err;
  json d = json::parse(describe.out, nullptr, false);
  ASSERT_TRUE(d.is_object()) << describe.out;
  EXPECT_EQ(d["provenance"]["source"], "oci-archive:" + archive);
  EXPECT_EQ(d["provenance"]["manifest"], digest);
  EXPECT_EQ(d["provenance"]["has"], "tmux=0 sshd=0");
  for (const char* k : {"kernel", "busybox", "agent", "builder", "plan", "step.0"}) {
    EXPECT_TRUE(d["provenance"].contains(k)) << k;
  }
  auto ls = Cloister({"image", "ls"});
  EXPECT_NE(ls.out.find("oci-archive:" + archive), std::string::npos) << ls.out;

  // The same image (the same manifest digest) and step again, pulled from a registry on loopback
  // (Debian's docker-registry) through the builder's proxy and its resolve override: the same disk.
  auto ca = proxy::CertAuthority::CreateInMemory("test registry CA");
  ASSERT_TRUE(ca.ok());
  const std::string ca_file = root_ + "/registry-ca.pem";
  std::ofstream(ca_file) << (*ca)->cert_pem();
  Registry registry;
  ASSERT_TRUE(registry.Start(root_ + "/registry", **ca)) << "docker-registry did not start";
  // (skopeo compresses the layer on its way to a registry: the registry's manifest is another one
  // than the layout's, of the same files)
  auto push = RunProcess({"skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--digestfile",
                          root_ + "/pushed-digest", "oci:" + layout + ":1",
                          "docker://127.0.0.1:" + std::to_string(registry.port) + "/bb:1"});
  ASSERT_TRUE(push.ok() && push->exit_code == 0) << (push.ok() ? push->err : push.error().ToString());
  const std::string pushed = Slurp(root_ + "/pushed-digest");
  std::vector<std::string> pull = build;
  pull[3] = std::string("docker://") + kRegistryHost + "/bb:1";
  env_["CLOISTER_PROXY_RESOLVE"] = std::string(kRegistryHost) + ":443=127.0.0.1:" +
                                   std::to_string(registry.port);
  env_["CLOISTER_PROXY_UPSTREAM_CA"] = ca_file;
  auto second = Cloister(pull);
  env_.erase("CLOISTER_PROXY_RESOLVE");
  env_.erase("CLOISTER_PROXY_UPSTREAM_CA");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.err.find("image: pulled"), std::string::npos) << second.err;
  EXPECT_EQ(DiskSha(second.out), sha) << "two builds of the same inputs differ";
  auto d2 = json::parse(Cloister({"image", "describe", "bb", "--json"}).out, nullptr, false);
  EXPECT_EQ(d2["provenance"]["source"], std::string("docker://") + kRegistryHost + "/bb:1");
  EXPECT_EQ(d2["provenance"]["manifest"], pushed);

  // A step that reads a host path or reaches the host fails the build; the host's listener on
  // loopback (QEMU's 10.0.2.2 is the host's loopback for user networking) sees nobody.
  const std::string secret = root_ + "/host-secret";
  std::ofstream(secret) << "host-only";
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  // (from the layout directory, oci:DIR:REF: that transport's push and pull, no boot of its own)
  auto escape = Cloister({"image", "build", "--from", "oci:" + layout + ":1", "--name", "bad",
                          "--disk-size", "64M", "--run",
                          // (nc's own status is not the judge: the host's listener is; `|| true`
                          // keeps `sh -e` going to the exit that says the step ran to its end)
                          "busybox cat " + secret + " && exit 0; echo probe | busybox nc -w 5 "
                          "10.0.2.2 " + port + " || true; exit 7"});
  EXPECT_NE(escape.exit_code, 0);
  EXPECT_NE(escape.err.find("step 0 run 1 failed (exit 7)"), std::string::npos) << escape.err;
  EXPECT_NE(escape.err.find("image: manifest " + digest), std::string::npos) << escape.err;
  pollfd p{lfd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "the step's connection reached the host";
  close(lfd);
  // Nothing half-built: no catalog entry, no build, work or builder directory.
  auto ls2 = Cloister({"image", "describe", "bad"});
  EXPECT_NE(ls2.exit_code, 0);
  EXPECT_FALSE(fs::exists(root_ + "/images/bad"));
  EXPECT_FALSE(fs::exists(root_ + "/images/.build-bad"));
  EXPECT_FALSE(fs::exists(root_ + "/images/.work-bad"));
  for (const auto& f : FilesUnder(root_ + "/tmp")) ADD_FAILURE() << "left behind: " << f;
  // No build wrote outside the store.
  for (const auto& f : FilesUnder(outside_)) ADD_FAILURE() << "written outside the store: " << f;

  // A workspace from the image: READY, exec, cp; attach and ssh refused with what to add.
  auto created = Cloister({"create", "ws", "--image", "bb", "--home-size", "64M"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  // Its provenance is shown for the workspace, and in `image ls --json`.
  auto dws = Cloister({"describe", "ws", "--json"});
  ASSERT_EQ(dws.exit_code, 0) << dws.err;
  json dj = json::parse(dws.out, nullptr, false);
  ASSERT_TRUE(dj.is_object()) << dws.out;
  EXPECT_EQ(dj["image_provenance"]["manifest"], pushed) << dws.out;
  json lj = json::parse(Cloister({"image", "ls", "--json"}).out, nullptr, false);
  bool listed = false;
  for (const auto& i : lj) listed = listed || (i["name"] == "bb" && i["provenance"]["manifest"] == pushed);
  EXPECT_TRUE(listed) << lj.dump();
  Start("ws");
  int code = -1;
  EXPECT_EQ(Exec("ws", "cat /etc/step-mark; tr '\\0' ' ' < /proc/1/cmdline", &code),
            "built-in-the-vm\n/usr/lib/cloister/busybox sh /usr/lib/cloister/init ");
  EXPECT_EQ(code, 0);
  const std::string h = root_ + "/host";
  fs::create_directories(h);
  std::ofstream(h + "/in.txt") << "into the busybox image";
  auto in = Cloister({"cp", h + "/in.txt", "ws:/home/dev/in.txt"});
  EXPECT_EQ(in.exit_code, 0) << in.err;
  auto out = Cloister({"cp", "ws:/home/dev/in.txt", h + "/back.txt"});
  EXPECT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(Slurp(h + "/back.txt"), "into the busybox image");

  int master = -1;
  pid_t attach = SpawnCloisterOnPty({"attach", "ws"}, &master);
  ASSERT_GT(attach, 0);
  std::string seen;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd mp{master, POLLIN, 0};
    if (poll(&mp, 1, 500) <= 0) continue;
    char buf[4096];
    ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<size_t>(n));
  }
  close(master);
  int status = 0;
  EXPECT_EQ(waitpid(attach, &status, 0), attach);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << seen;
  EXPECT_NE(seen.find("has no tmux"), std::string::npos) << seen;
  EXPECT_NE(seen.find("add tmux to the image"), std::string::npos) << seen;

  auto ssh = Cloister({"ssh", "ws", "--", "true"});
  EXPECT_NE(ssh.exit_code, 0);
  EXPECT_NE(ssh.err.find("has no sshd"), std::string::npos) << ssh.err;
  EXPECT_NE(ssh.err.find("add openssh-server"), std::string::npos) << ssh.err;

  // `reset` goes back to this image (its step's file), not to Debian, dropping what was added.
  ASSERT_EQ(Exec("ws", "echo added > /etc/added; sync; echo ok", &code, "root"), "ok\n");
  Stop("ws");
  auto reset = Cloister({"reset", "ws", "-f"});
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  Start("ws");
  EXPECT_EQ(Exec("ws", "cat /etc/step-mark; [ -e /etc/added ] || echo gone", &code),
            "built-in-the-vm\ngone\n");
  Stop("ws");
}

}  // namespace
}  // namespace cloister::cli

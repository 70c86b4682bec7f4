// A repository's devcontainer, end to end, with the real `cloister` binary under TCG (issue 41's
// proof): one builder boot, one workspace boot.
//
// The test makes its inputs: a busybox-only rootfs as a local OCI archive (image/oci/testing.h),
// and a repository whose .devcontainer/devcontainer.json builds a Dockerfile `FROM` that archive
// (`--base`), installs one local Feature with an option, and has containerEnv, remoteUser (a user
// the Dockerfile adds), forwardPorts, postCreateCommand, postStartCommand and an
// initializeCommand. `cloister create ws --devcontainer -v REPO:/work` builds the image in the
// builder VM and creates the workspace; one boot then shows: the Feature's tool runs (with the
// option's value baked in), the Dockerfile's RUN left its mark, the environment is there, the
// create command ran once and the start command at the boot, both as remoteUser in the workspace
// folder, the forwarded port is published on 127.0.0.1 and reaches the guest's server. A second
// `image build --devcontainer` reuses the image without a builder boot; `reset` keeps the
// workspace on the devcontainer's image, whose disk holds the toolchain (read on the host, no
// third boot).
//
// SECURITY (no boot of its own): the repository is hostile as well. Its Dockerfile's RUN, its
// Feature's install.sh and its initializeCommand each write under a host path; none of it may
// appear on the host (the first two ran in the builder VM: their marks are in the image's disk;
// initializeCommand, which other tools run on the host, never runs). A second repository whose
// containerEnv holds a credential-shaped value is refused before anything is built, with the
// `cloister cred add` hint, the value in no output and no workspace left.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "base/strings.h"
#include "base/subprocess.h"
#include "catalog/names.h"
#include "catalog/store.h"
#include "image/oci/testing.h"
#include "image/testing.h"
#include "supervisor/testing.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A free TCP port on 127.0.0.1 (bound, then released), from a random start in [20000, 32000):
// below the ephemeral range, and not the same sequence as another run of this test beside it
// (both would publish it).
uint16_t FreePort() {
  std::mt19937 rng{std::random_device{}()};
  const uint16_t start = static_cast<uint16_t>(20000 + rng() % 12000);
  for (uint16_t p = start; p < 32000; ++p) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(p);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(s);
    if (ok) return p;
  }
  return 0;
}

// GET / from 127.0.0.1:port, the whole answer ("" if nothing connects).
std::string HttpGet(uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n";
    (void)!write(s, req.data(), req.size());
    timeval tv{10, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    ssize_t n;
    while ((n = read(s, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(s);
  return out;
}

class DevcontainerVmTest : public testing::CliVmTest {
 protected:
  void SetUp() override {
    CliVmTest::SetUp();
    // The tests' package cache and the shared builder image, instead of downloading and building
    // them again in the temporary store (as cli_image_oci_vm_test does).
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
  }

  void TearDown() override {
    CliVmTest::TearDown();
    for (const char* sibling : {"-repo", "-repo-rootfs", "-leaky", "-hostmarks"}) {
      std::error_code ec;
      fs::remove_all(root_ + sibling, ec);
    }
  }

  void Write(const fs::path& p, const std::string& text, fs::perms perms = fs::perms::none) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    if (perms != fs::perms::none) fs::permissions(p, perms, fs::perm_options::add);
  }

  // Where the hostile parts of the repository write if they ever run on the host: a path that
  // exists nowhere yet, under /tmp (the builder keeps an image's /tmp, so their marks in the
  // image's disk show that they ran there).
  std::string HostMarks() const { return root_ + "-hostmarks"; }

  // The repository: a Dockerfile FROM the archive, one local Feature, the workspace's settings.
  fs::path MakeRepo(uint16_t port) {
    fs::path repo = root_ + "-repo";
    fs::remove_all(repo);
    fs::remove_all(HostMarks());
    fs::create_directories(repo / ".git");
    std::string cache = image::testing::TestCacheDir();
    fs::path rootfs = repo.string() + "-rootfs";
    fs::remove_all(rootfs);
    EXPECT_TRUE(image::oci::testing::MakeBusyboxRootfs(cache, rootfs.string()).ok());
    auto digest = image::oci::testing::WriteOciArchive(rootfs.string(), (repo / "base.tar").string(),
                                                       {{"PATH", "/usr/local/bin:/bin"}}, "1");
    EXPECT_TRUE(digest.ok()) << (digest.ok() ? "" : digest.error().message());
    const std::string mark = "mkdir -p " + HostMarks() + " && touch " + HostMarks();
    Write(repo / ".devcontainer" / "Dockerfile",
          "FROM localbase:1\nRUN mkdir -p /opt/from-dockerfile && echo from-the-dockerfile > "
          "/opt/from-dockerfile/mark\n"
          "RUN echo 'vscode:x:1001:1001::/home/vscode:/bin/sh' >> /etc/passwd && "
          "echo 'vscode:x:1001:' >> /etc/group && mkdir -p /home/vscode && "
          "busybox chown 1001:1001 /home/vscode\n"
          "RUN " + mark + "/dockerfile-ran\n");
    Write(repo / ".devcontainer" / "hello" / "devcontainer-feature.json", R"({
      "id": "hello", "version": "1.0.0", "name": "A greeting tool",
      "options": {"greeting": {"type": "string", "default": "hi"}},
      "containerEnv": {"HELLO_HOME": "/opt/hello"}
    })");
    Write(repo / ".devcontainer" / "hello" / "install.sh",
          "#!/bin/sh\nset -e\nmkdir -p /usr/local/bin /opt/hello\n"
          "printf '#!/bin/sh\\necho \"%s from $HELLO_HOME\"\\n' \"$GREETING\" > /usr/local/bin/hello\n"
          "chmod 755 /usr/local/bin/hello\necho \"$_REMOTE_USER\" > /opt/hello/remote-user\n" +
              mark + "/feature-ran\n",
          fs::perms::owner_exec);
    Write(repo / ".devcontainer" / "devcontainer.json", R"({
      // The proof's devcontainer.
      "build": {"dockerfile": "Dockerfile", "context": "."},
      "features": {"./hello": {"greeting": "hello-from-the-option"}},
      "containerEnv": {"PROJECT_MODE": "devcontainer"},
      "remoteUser": "vscode",
      "forwardPorts": [)" + std::to_string(port) + R"(],
      "initializeCommand": ")" + mark + R"(/initialize-ran",
      "postCreateCommand": "echo created $(id -un) $(pwd) >> $HOME/created-count",
      "postStartCommand": ["sh", "-c", "echo started $(id -un) $(pwd) >> $HOME/started-count"],
      "customizations": {"vscode": {"extensions": ["x.y"]}},
    })");
    return repo;
  }

  // A repository whose containerEnv carries a credential-shaped value (and nothing to build).
  fs::path MakeLeakyRepo(const std::string& secret) {
    fs::path repo = root_ + "-leaky";
    fs::remove_all(repo);
    fs::create_directories(repo / ".git");
    Write(repo / ".devcontainer" / "devcontainer.json", R"({
      "build": {"dockerfile": "Dockerfile"},
      "containerEnv": {"PROJECT_SETTING": ")" + secret + R"("},
      "initializeCommand": "mkdir -p )" + HostMarks() + R"("
    })");
    return repo;
  }

  // Build and staging folders left in the store's images/ (the copies of the repository go when
  // the build ends).
  std::vector<std::string> LeftInImages() {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(root_ + "/" + catalog::names::kImagesDir)) {
      if (e.path().filename().string().rfind('.', 0) == 0) left.push_back(e.path().string());
    }
    return left;
  }

  // Waits (bounded) for the lifecycle status file to settle; returns it.
  std::string LifecycleStatus() {
    std::string status;
    auto deadline = Clock::now() + std::chrono::minutes(5);
    while (Clock::now() < deadline) {
      status = Trim(Exec("ws", "cat /run/cloister/devcontainer.status 2>/dev/null"));
      if (status == "ok" || StartsWith(status, "failed")) break;
      std::this_thread::sleep_for(std::chrono::seconds(2));  // polling the guest, bounded
    }
    return status;
  }
};

TEST_F(DevcontainerVmTest, BuildThenCreateBootRunsTheToolchainAndTheLifecycle) {
  // A credential in containerEnv: refused before anything is read further or built.
  const std::string secret = "ghp_" + std::string(36, 'Q');
  fs::path leaky = MakeLeakyRepo(secret);
  auto refused = Cloister({"create", "leak", "--devcontainer", leaky.string()});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("looks like a credential"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("cloister cred add"), std::string::npos) << refused.err;
  EXPECT_EQ((refused.out + refused.err).find(secret), std::string::npos) << refused.err;
  EXPECT_FALSE(store_->LoadConfig("leak").ok());

  uint16_t port = FreePort();
  ASSERT_NE(port, 0);
  fs::path repo = MakeRepo(port);
  std::string base = "localbase:1=oci-archive:" + (repo / "base.tar").string();

  auto created = Cloister(
      {"create", "ws", "--devcontainer", repo.string(), "--base", base, "-v", repo.string() + ":/work"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_NE(created.err.find("\"customizations\": not applied"), std::string::npos) << created.err;
  EXPECT_NE(created.err.find("\"initializeCommand\": not run"), std::string::npos) << created.err;
  EXPECT_NE(created.out.find("devcontainer:"), std::string::npos) << created.out;
  // Nothing of the repository ran on the host: not the Dockerfile's RUN, not the Feature's
  // install.sh (both ran in the builder VM: their marks are in the image, below), not
  // initializeCommand (never run), not the leaky repository's.
  ASSERT_FALSE(fs::exists(HostMarks())) << "the repository's code ran on the host";
  EXPECT_EQ(LeftInImages(), std::vector<std::string>{});
  auto described = Cloister({"describe", "ws", "--json"});
  EXPECT_NE(described.out.find("dc-"), std::string::npos) << described.out;

  Start("ws");
  if (HasFatalFailure()) return;  // the workspace did not boot: nothing below can pass
  EXPECT_EQ(Trim(Exec("ws", "hello")), "hello-from-the-option from /opt/hello");
  EXPECT_EQ(Trim(Exec("ws", "cat /opt/from-dockerfile/mark")), "from-the-dockerfile");
  EXPECT_EQ(Trim(Exec("ws", "cat /opt/hello/remote-user")), "vscode");
  EXPECT_EQ(Trim(Exec("ws", "echo $PROJECT_MODE:$HELLO_HOME")), "devcontainer:/opt/hello");
  EXPECT_EQ(LifecycleStatus(), "ok");
  // Once, as remoteUser, in the workspace folder (the first shared folder).
  EXPECT_EQ(Exec("ws", "cat /home/vscode/created-count", nullptr, "root"), "created vscode /work\n");
  EXPECT_EQ(Exec("ws", "cat /home/vscode/started-count", nullptr, "root"), "started vscode /work\n");
  EXPECT_EQ(Trim(Exec("ws", "stat -c %U /home/vscode/created-count", nullptr, "root")), "vscode");

  // The forwarded port: published on 127.0.0.1 at the same number, reaching the guest's server.
  Exec("ws", "mkdir -p /tmp/www && echo served-by-the-guest > /tmp/www/index.html && "
             "(busybox httpd -p 127.0.0.1:" + std::to_string(port) + " -h /tmp/www &)");
  std::string answer;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (answer.find("served-by-the-guest") == std::string::npos && Clock::now() < deadline) {
    answer = HttpGet(port);
    if (answer.empty()) std::this_thread::sleep_for(std::chrono::seconds(1));  // server starting
  }
  EXPECT_NE(answer.find("served-by-the-guest"), std::string::npos) << answer;
  Stop("ws");
  EXPECT_FALSE(fs::exists(HostMarks())) << "the repository's code ran on the host";

  // The same inputs: the image is reused, no builder boot.
  auto again = Cloister({"image", "build", "--devcontainer", repo.string(), "--base", base});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("reused"), std::string::npos) << again.err;
  EXPECT_EQ(LeftInImages(), std::vector<std::string>{});

  // reset: the next start clones the devcontainer's image again; its disk holds the toolchain
  // and the marks of the RUN and install.sh that ran in the builder.
  ASSERT_EQ(Cloister({"reset", "ws", "--yes"}).exit_code, 0);
  auto config = store_->LoadConfig("ws");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->image.name.rfind("dc-", 0), 0u) << config->image.name;
  auto tool = RunProcess({"debugfs", "-R", "cat /usr/local/bin/hello", config->image.path});
  ASSERT_TRUE(tool.ok());
  EXPECT_NE(tool->out.find("hello-from-the-option"), std::string::npos) << tool->out << tool->err;
  for (const char* ran : {"dockerfile-ran", "feature-ran"}) {
    auto st = RunProcess({"debugfs", "-R", "stat " + HostMarks() + "/" + ran, config->image.path});
    ASSERT_TRUE(st.ok());
    EXPECT_NE(st->out.find("Type: regular"), std::string::npos) << ran << ": " << st->out << st->err;
  }
  EXPECT_FALSE(fs::exists(HostMarks()));
}

}  // namespace
}  // namespace cloister::vm

// Real package managers and clients in a real VM (issue 40's proof), in ONE boot under TCG with
// the test image (recipe 9: apt, dpkg, python3-pip) and the real `cloister` binary, configured by
// nothing but what the agent set up (the proxy environment, the proxy CA, apt's proxy file), each
// through the supervisor's proxy to local fakes reached by CLOISTER_PROXY_RESOLVE:
//   - npm 9.2.0 (Debian 12's npm, whose proxy agent waits its whole fetch timeout on a connection
//     closed before the CONNECT answer) installs a 75-package tree from the fake registry with the
//     real registry's habits (jitter, a slow first byte, Connection: close on some answers,
//     chunked tarballs, gzipped packuments); its log has no retry;
//   - git clone and push over HTTPS against `git http-backend`;
//   - apt-get update and apt-get install from a Debian-style repository;
//   - pip download from a simple index (Debian's pip wheel);
//   - curl --parallel fetching 32 tarballs at once;
// and every request each of them made has exactly one trace record, none aborted.
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/npm_tarball.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/npm_fake.h"
#include "proxy/npm_tree.h"
#include "proxy/trace.h"
#include "supervisor/testing.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using testing::Slurp;

constexpr char kRegistry[] = "registry.npm.test";
constexpr char kGit[] = "git.example.test";
constexpr char kDebian[] = "deb.example.test";
constexpr char kPypi[] = "pypi.example.test";
// Debian's pip wheel (python3-pip-whl, scripts/install-deps.sh test): what the index serves.
constexpr char kPipWheel[] = "/usr/share/python-wheels/pip-23.0.1-py3-none-any.whl";

std::string Sha256Hex(const std::string& data) {
  unsigned char d[32];
  unsigned n = 0;
  EVP_Digest(data.data(), data.size(), d, &n, EVP_sha256(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<char*>(d), n));
}

// Serves the files under `dir` by path (GET and HEAD), 404 otherwise.
proxy::testing::Handler StaticFiles(const std::string& dir) {
  return [dir](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
    std::string path = r.target.substr(0, r.target.find('?'));
    std::string file = dir + path;
    if (path.find("..") != std::string::npos || !fs::is_regular_file(file)) {
      w.Send(404, {{"Content-Type", "text/plain"}}, "not found\n");
      return;
    }
    const char* type = EndsWith(file, ".html") ? "text/html" : "application/octet-stream";
    w.Send(200, {{"Content-Type", type}}, Slurp(file));
  };
}

// A Debian-style repository with one package (no dependencies: the test image's dpkg database
// holds none of what it has) under ROOT/debian, `deb [trusted=yes] https://HOST/debian stable
// main`.
void MakeAptRepository(const std::string& root) {
  std::string pkg = root + "/build/cloister-probe";
  fs::create_directories(pkg + "/DEBIAN");
  fs::create_directories(pkg + "/usr/share/cloister-probe");
  std::ofstream(pkg + "/DEBIAN/control")
      << "Package: cloister-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\n"
         "Description: a file apt installs in the clients VM test\n";
  std::ofstream(pkg + "/usr/share/cloister-probe/hello") << "installed by apt through the proxy\n";
  std::string pool = root + "/debian/pool/main/c/cloister-probe";
  fs::create_directories(pool);
  std::string deb = pool + "/cloister-probe_1.0_all.deb";
  auto built = RunProcess({"dpkg-deb", "--root-owner-group", "--build", pkg, deb});
  ASSERT_TRUE(built.ok() && built->success()) << (built.ok() ? built->err : "");
  std::string bytes = Slurp(deb);
  std::string packages =
      "Package: cloister-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\n"
      "Filename: pool/main/c/cloister-probe/cloister-probe_1.0_all.deb\nSize: " +
      std::to_string(bytes.size()) + "\nSHA256: " + Sha256Hex(bytes) +
      "\nDescription: a file apt installs in the clients VM test\n\n";
  std::string dists = root + "/debian/dists/stable";
  fs::create_directories(dists + "/main/binary-amd64");
  std::ofstream(dists + "/main/binary-amd64/Packages") << packages;
  std::ofstream(dists + "/Release")
      << "Origin: cloister-test\nSuite: stable\nCodename: stable\nArchitectures: amd64 all\n"
         "Components: main\nDate: Thu, 01 Jan 2026 00:00:00 UTC\nSHA256:\n " + Sha256Hex(packages) +
             " " + std::to_string(packages.size()) + " main/binary-amd64/Packages\n";
}

// A simple index (PEP 503) with Debian's pip wheel under ROOT: /simple/pip/ and the file.
void MakePipIndex(const std::string& root) {
  std::string wheel = Slurp(kPipWheel);
  ASSERT_FALSE(wheel.empty()) << kPipWheel << " (scripts/install-deps.sh test installs it)";
  std::string name = fs::path(kPipWheel).filename().string();
  fs::create_directories(root + "/simple/pip");
  fs::create_directories(root + "/files");
  std::ofstream(root + "/files/" + name, std::ios::binary) << wheel;
  std::ofstream(root + "/simple/pip/index.html")
      << "<!DOCTYPE html><html><body><a href=\"/files/" << name << "#sha256=" << Sha256Hex(wheel)
      << "\">" << name << "</a></body></html>\n";
}

class ClientsVmTest : public testing::CliVmTest {
 protected:
  // Runs `script` in the guest and prints how long it took under `what` (the test's figures).
  std::string Exec(const std::string& what, const std::string& script, int* code,
                   const std::string& user = "dev") {
    auto start = std::chrono::steady_clock::now();
    std::string out = CliVmTest::Exec("ws", script, code, user);
    std::cerr << "[ figures ] " << what << ": "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s\n";
    return out;
  }
};

TEST_F(ClientsVmTest, PackageManagersAndGitThroughTheProxyWithNoRetryAndEveryRequestTraced) {
  const std::string cache = image::NpmCacheDir();
  auto npm9 = image::VerifiedNpmTarball(image::kDebianNpm, cache);
  ASSERT_TRUE(npm9.ok()) << npm9.error().ToString();
  auto tree = proxy::testing::WriteNpmTree(cache + "/install-tree-75");
  ASSERT_TRUE(tree.ok()) << tree.error().ToString();
  auto registry = proxy::testing::NpmRegistryFake::Load(tree->dir);
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  proxy::testing::RegistryBehaviour habits;
  habits.jitter_ms = 20;
  habits.first_byte_ms = 30;
  habits.close_every = 7;
  habits.gzip_packuments = true;
  proxy::testing::Handler npm = (*registry)->handler(habits);

  // A bare repository the guest clones and pushes to.
  std::string srv = root_ + "/git", seed = root_ + "/seed";
  fs::create_directories(srv + "/o");
  RunOptions plain;
  plain.env_set = {{"HOME", root_}, {"GIT_CONFIG_NOSYSTEM", "1"}};
  auto git = [&](const std::string& cwd, std::vector<std::string> a) {
    std::vector<std::string> argv = {"git", "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                                     "init.defaultBranch=main"};
    argv.insert(argv.end(), a.begin(), a.end());
    RunOptions o = plain;
    o.cwd = cwd;
    auto r = RunProcess(argv, o);
    return r.ok() && r->success();
  };
  ASSERT_TRUE(git(root_, {"init", "-q", seed}));
  std::ofstream(seed + "/README") << "hello from the host\n";
  ASSERT_TRUE(git(seed, {"add", "README"}));
  ASSERT_TRUE(git(seed, {"commit", "-qm", "first"}));
  ASSERT_TRUE(git(root_, {"clone", "-q", "--bare", seed, srv + "/o/r.git"}));
  ASSERT_TRUE(git(srv + "/o/r.git", {"config", "http.receivepack", "true"}));
  proxy::testing::Handler git_server = proxy::testing::GitHttpBackend(srv, "");
  MakeAptRepository(root_ + "/apt");
  MakePipIndex(root_ + "/pypi");
  proxy::testing::Handler apt_files = StaticFiles(root_ + "/apt");
  proxy::testing::Handler pypi_files = StaticFiles(root_ + "/pypi");

  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [&](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
        if (r.sni == kRegistry) return npm(r, w);
        if (r.sni == kGit) return git_server(r, w);
        if (r.sni == kDebian) return apt_files(r, w);
        if (r.sni == kPypi) {
          if (EndsWith(r.target, "/")) {
            proxy::testing::SeenRequest index = r;
            index.target += "index.html";
            return pypi_files(index, w);
          }
          return pypi_files(r, w);
        }
        w.Send(404, {}, "unknown host\n");
      });
  ASSERT_TRUE(fake.ok());
  const std::string addr = (*fake)->Address();
  std::string resolve;
  for (const char* h : {kRegistry, kGit, kDebian, kPypi}) {
    resolve += std::string(resolve.empty() ? "" : ",") + h + ":443=" + addr;
  }
  env_ = {{"CLOISTER_PROXY_RESOLVE", resolve},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_GUEST_NPM_REGISTRY", std::string("https://") + kRegistry + "/"},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"}};

  testing::WorkspaceSpec spec;
  spec.memory_mib = 1024;
  spec.cpus = 2;
  Create("ws", spec);
  auto started = Cloister({"start", "ws", "--accel", "tcg", "-d"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  int code = -1;

  // npm 9.2.0 (the tarball npm publishes, as Debian 12 ships it) with the guest's node.
  auto copied = Cloister({"cp", *npm9, "ws:/home/dev/npm9.tgz"});
  ASSERT_EQ(copied.exit_code, 0) << copied.err;
  std::string npm_out = Exec(
      "npm 9 install", "set -e; cd ~ && tar xzf npm9.tgz && mkdir -p proj && cd proj && "
      "node ~/package/bin/npm-cli.js --version && "
      "node ~/package/bin/npm-cli.js install --no-audit --no-fund --no-update-notifier "
      "--loglevel=http " + tree->root + " 2>&1 && ls node_modules/@cloister-tree | wc -l",
      &code);
  ASSERT_EQ(code, 0) << npm_out;
  EXPECT_TRUE(StartsWith(npm_out, "9.2.0\n")) << npm_out;
  EXPECT_NE(npm_out.find("\n76\n"), std::string::npos) << npm_out;  // the root and its 75
  EXPECT_NE(npm_out.find("http fetch GET 200 https://registry.npm.test/"), std::string::npos)
      << npm_out;
  // npm's own log: no fetch needed a second attempt, none failed.
  EXPECT_EQ(npm_out.find("attempt #"), std::string::npos) << npm_out;
  EXPECT_EQ(npm_out.find(" failed with "), std::string::npos) << npm_out;

  // git clone and push over HTTPS.
  std::string git_out = Exec(
      "git clone and push", std::string("set -e; cd ~ && git clone -q https://") + kGit + "/o/r.git work && cat "
      "work/README && cd work && echo pushed > CHANGE && git add CHANGE && "
      "git -c user.name=dev -c user.email=dev@guest commit -qm from-guest && "
      "git push -q origin HEAD:main && echo PUSHED",
      &code);
  EXPECT_EQ(code, 0) << git_out;
  EXPECT_NE(git_out.find("hello from the host"), std::string::npos) << git_out;
  EXPECT_NE(git_out.find("PUSHED"), std::string::npos) << git_out;

  // apt-get update and install, as root, with nothing but apt's proxy file from the agent.
  std::string apt_out = Exec(
      "apt-get update and install", std::string("set -e; echo 'deb [trusted=yes] https://") + kDebian +
          "/debian stable main' > /etc/apt/sources.list.d/test.list && "
          "apt-get update 2>&1 && apt-get install -y --no-install-recommends cloister-probe 2>&1 "
          "&& cat /usr/share/cloister-probe/hello",
      &code, "root");
  EXPECT_EQ(code, 0) << apt_out;
  EXPECT_NE(apt_out.find("installed by apt through the proxy"), std::string::npos) << apt_out;
  EXPECT_EQ(apt_out.find("Err:"), std::string::npos) << apt_out;
  EXPECT_EQ(apt_out.find("Retrying"), std::string::npos) << apt_out;

  // pip download from the simple index (Debian's pip: the system's CA bundle, HTTPS_PROXY).
  std::string pip_out = Exec(
      "pip download", std::string("set -e; cd ~ && python3 -m pip download --no-deps --no-cache-dir -d wheels "
                  "--index-url https://") + kPypi + "/simple/ pip==23.0.1 2>&1 && "
                  "wc -c < wheels/pip-23.0.1-py3-none-any.whl",
      &code);
  EXPECT_EQ(code, 0) << pip_out;
  EXPECT_NE(pip_out.find(std::to_string(fs::file_size(kPipWheel))), std::string::npos) << pip_out;
  EXPECT_EQ(pip_out.find("Retrying"), std::string::npos) << pip_out;

  // curl --parallel: 32 tarballs at once.
  std::string urls;
  for (int i = 0; i < 32; ++i) {
    urls += std::string(" https://") + kRegistry + "/@cloister-tree/dep-" + std::to_string(i) +
            "/-/dep-" + std::to_string(i) + "-1.0.0.tgz";
  }
  std::string curl_out = Exec(
      "curl --parallel", "set -e; mkdir -p ~/par && cd ~/par && curl -sS --fail --parallel --parallel-max 16 "
      "--remote-name-all" + urls + " 2>/tmp/curl.err || cat /tmp/curl.err; ls | wc -l",
      &code);
  EXPECT_EQ(code, 0) << curl_out;
  EXPECT_EQ(Trim(curl_out), "32") << curl_out;

  // Every request the fakes saw has its one trace record, and no record says aborted.
  auto trace = Cloister({"trace", "ls", "ws", "--json", "-n", "100000"});
  ASSERT_EQ(trace.exit_code, 0) << trace.err;
  auto records = nlohmann::json::parse(trace.out, nullptr, false);
  ASSERT_TRUE(records.is_array()) << trace.out;
  std::map<std::string, int> traced, seen;
  for (const auto& r : records) {
    EXPECT_FALSE(r.contains("abort")) << r.dump();
    if (r.value("status", 0) == 0) continue;
    traced[r.value("host", "") + " " + r.value("method", "") + " " + r.value("path", "")]++;
  }
  for (const auto& r : (*fake)->requests()) {
    seen[r.sni + " " + r.method + " " + proxy::TracePath(r.target)]++;
  }
  for (const auto& [key, n] : seen) EXPECT_EQ(traced[key], n) << key;
  for (const char* host : {kRegistry, kGit, kDebian, kPypi}) {
    bool any = false;
    for (const auto& [key, n] : seen) any |= StartsWith(key, std::string(host) + " ");
    EXPECT_TRUE(any) << host;
  }
}

}  // namespace
}  // namespace cloister::vm

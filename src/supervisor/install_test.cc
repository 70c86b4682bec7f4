// Real package managers through the path a guest's client takes to the egress proxy (the agent's
// forward, the channel, the proxy), without a VM (supervisor/testing_install.h), against the fake
// registry with the real registry's habits (jitter, a slow first byte, Connection: close on some
// answers, chunked tarballs, gzipped packuments).
#include <gtest/gtest.h>

#include <filesystem>

#include "base/strings.h"
#include "base/subprocess.h"
#include "proxy/trace.h"
#include "supervisor/testing_install.h"

namespace cloister::vm::testing {
namespace {

namespace fs = std::filesystem;

// npm 9.2.0 (Debian 12's npm) opens one CONNECT per request, all at once (70+ for this tree),
// and its proxy agent waits for the whole fetch timeout (5 minutes) on a connection closed before
// the CONNECT answer. The tree installs with no retry in npm's own log and every request it made
// through the proxy has its trace record.
TEST(InstallTest, Npm9InstallsA75PackageTreeThroughTheChannelWithNoRetry) {
  ASSERT_TRUE(ProgramExists("node")) << "scripts/install-deps.sh test installs node";
  fs::path work = fs::temp_directory_path() / ("cloister-install-test-" + std::to_string(getpid()));
  auto cli = UnpackDebianNpm((work / "npm").string());
  ASSERT_TRUE(cli.ok()) << cli.error().ToString();
  InstallRigOptions o;
  o.behaviour.jitter_ms = 20;
  o.behaviour.first_byte_ms = 30;
  o.behaviour.close_every = 7;
  o.behaviour.gzip_packuments = true;
  auto rig = InstallRig::Start(o);
  ASSERT_TRUE(rig.ok()) << rig.error().ToString();
  NpmRun run = (*rig)->Npm(*cli, /*through_proxy=*/true, (work / "install").string());
  ASSERT_TRUE(run.ok) << run.log;
  EXPECT_TRUE(run.retries.empty()) << Join(run.retries, "\n");
  EXPECT_TRUE((*rig)->ForwardLog().empty()) << Join((*rig)->ForwardLog(), "\n");
  EXPECT_TRUE(fs::exists(work / "install" / "prefix" / "node_modules" / "@cloister-tree" / "dep-74"));
  // Each tarball fetched through the proxy: exactly one trace record, a whole 200.
  auto records = proxy::ReadTrace((*rig)->trace_file());
  ASSERT_TRUE(records.ok());
  std::map<std::string, int> tarballs;
  for (const proxy::TraceRecord& r : *records) {
    if (EndsWith(r.path, ".tgz")) {
      ++tarballs[r.path];
      EXPECT_EQ(r.status, 200) << r.path;
    }
  }
  EXPECT_EQ(tarballs.size(), (*rig)->tarballs());
  for (const auto& [path, n] : tarballs) EXPECT_EQ(n, 1) << path;
  fs::remove_all(work);
}

}  // namespace
}  // namespace cloister::vm::testing

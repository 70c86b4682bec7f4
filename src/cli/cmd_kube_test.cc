// `cloister kube render` on a real workspace of a temporary store: the manifests it prints pass
// the vendored engine schemas (kube/validate_manifests.py) and name the workspace's settings.
#include <string>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "cli/testing.h"

namespace cloister::cli {
namespace {

const std::string kAgent = "registry.example/cloister/agent@sha256:" + std::string(64, 'a');
const std::string kKernel = "registry.example/cloister/kernel@sha256:" + std::string(64, 'b');

TEST(CmdKubeTest, RendersAWorkspaceThatPassesTheSchemas) {
  testing::TempStore store("kube");
  ASSERT_EQ(store.CreateWorkspace("web"), "");
  auto r = store.Run({"kube", "render", "web", "--agent-image", kAgent, "--kernel-image", kKernel,
                      "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json list = r.json();
  ASSERT_EQ(list["kind"], "List");
  ASSERT_EQ(list["items"].size(), 3u);  // home DataVolume, VirtualMachine, NetworkPolicy
  EXPECT_EQ(list["items"][1]["metadata"]["name"], "web");
  RunOptions ro;
  ro.stdin_data = list["items"].dump();
  auto v = RunProcess({"python3", std::string(getenv("CLOISTER_SOURCE_DIR")) + "/src/kube/validate_manifests.py",
                       std::string(getenv("CLOISTER_SOURCE_DIR")) + "/third_party/kubevirt"}, ro);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->exit_code, 0) << v->out << v->err;

  // YAML documents by default; an image not pinned by digest is refused with the fix.
  auto yaml = store.Run({"kube", "render", "web", "--agent-image", kAgent, "--kernel-image", kKernel});
  ASSERT_EQ(yaml.code, 0) << yaml.err;
  EXPECT_EQ(yaml.out.rfind("---\n", 0), 0u);
  auto bad = store.Run({"kube", "render", "web", "--agent-image", "agent:latest", "--kernel-image", kKernel});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("pinned by digest"), std::string::npos) << bad.err;
  auto missing = store.Run({"kube", "render", "nope", "--agent-image", kAgent, "--kernel-image", kKernel});
  EXPECT_NE(missing.code, 0);
}

}  // namespace
}  // namespace cloister::cli

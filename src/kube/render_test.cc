#include "kube/render.h"

#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "base/subprocess.h"

namespace cloister::kube {
namespace {

using nlohmann::json;

const std::string kDigest = "4f2a9c0e1b7d3a5f6e8c9b0a1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e6";
const std::string kAgent = "registry.example/cloister/agent@sha256:" + std::string(64, 'a');
const std::string kKernel = "registry.example/cloister/kernel@sha256:" + std::string(64, 'b');

WorkspaceConfig Config() {
  WorkspaceConfig c;
  c.name = "dev1";
  c.image.name = "default";
  c.image.version = "3";
  c.image.sha256 = kDigest;
  c.image.size = 8ull << 30;
  c.image.kernel_cmdline = "root=/dev/vda rw console=ttyS0";
  c.memory_mib = 4096;
  c.cpus = 4;
  c.home_size = 64ull << 30;
  return c;
}

RenderOptions Options() {
  RenderOptions o;
  o.agent_image = kAgent;
  o.kernel_image = kKernel;
  o.storage_class = "fast-zeroed";
  o.snapshot = "dev1-before-upgrade";
  return o;
}

json Render() {
  auto r = RenderWorkspace(Config(), Options());
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : json::array();
}

// Runs the schema validator on `objects`: its exit code and output.
RunOutput Validate(const json& objects) {
  RunOptions ro;
  ro.stdin_data = objects.dump();
  auto r = RunProcess({"python3", CLOISTER_KUBE_VALIDATOR, CLOISTER_KUBE_SCHEMAS}, ro);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : RunOutput{};
}

json* Find(json& objects, const std::string& kind) {
  for (json& o : objects) {
    if (o["kind"] == kind) return &o;
  }
  return nullptr;
}

TEST(KubeRenderTest, RenderedManifestsPassTheEngineSchemas) {
  json objects = Render();
  ASSERT_EQ(objects.size(), 4u);
  RunOutput v = Validate(objects);
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_NE(v.err.find("NetworkPolicy/dev1-isolate"), std::string::npos) << v.err;  // said, not hidden
}

TEST(KubeRenderTest, TheValidatorRejectsWhatTheSchemasDoNotAllow) {
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    const char* expect;  // in the validator's output
  };
  const Case cases[] = {
      {"a misspelled field", [](json& o) {
         (*Find(o, "VirtualMachine"))["spec"]["template"]["spec"]["domain"]["devices"]["autoatachVSOCK"] = true;
       }, "autoatachVSOCK"},
      {"a wrong type", [](json& o) {
         (*Find(o, "VirtualMachine"))["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = "four";
       }, "cores"},
      {"a missing required field", [](json& o) {
         (*Find(o, "VirtualMachine"))["spec"].erase("template");
       }, "template"},
      {"a DataVolume source field of another kind", [](json& o) {
         (*Find(o, "VirtualMachine"))["spec"]["dataVolumeTemplates"][0]["spec"]["source"]["pvc"]["size"] = 1;
       }, "size"},
      {"a snapshot without source", [](json& o) {
         (*Find(o, "VirtualMachineSnapshot"))["spec"].erase("source");
       }, "source"},
      {"an unknown kind", [](json& o) { o.push_back({{"apiVersion", "v1"}, {"kind", "Pod"}}); }, "unknown"},
  };
  for (const Case& c : cases) {
    json objects = Render();
    c.mutate(objects);
    RunOutput v = Validate(objects);
    EXPECT_EQ(v.exit_code, 1) << c.what;
    EXPECT_NE(v.out.find(c.expect), std::string::npos) << c.what << ": " << v.out;
  }
}

TEST(KubeRenderTest, InvariantsHoldAndEachOneCanFail) {
  EXPECT_TRUE(CheckInvariants(Render()).ok());
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
  };
  auto vmi = [](json& o) -> json& { return (*Find(o, "VirtualMachine"))["spec"]["template"]["spec"]; };
  const Case cases[] = {
      {"a host disk", [&](json& o) {
         vmi(o)["volumes"].push_back({{"name", "x"}, {"hostDisk", {{"path", "/etc"}, {"type", "Disk"}}}});
       }},
      {"a hostPath anywhere", [](json& o) { (*Find(o, "DataVolume"))["spec"]["hostPath"] = "/"; }},
      {"the pod interface", [&](json& o) { vmi(o)["domain"]["devices"]["autoattachPodInterface"] = true; }},
      {"an interface", [&](json& o) {
         vmi(o)["domain"]["devices"]["interfaces"].push_back({{"name", "default"}, {"masquerade", json::object()}});
         vmi(o)["networks"].push_back({{"name", "default"}, {"pod", json::object()}});
       }},
      {"no vsock", [&](json& o) { vmi(o)["domain"]["devices"]["autoattachVSOCK"] = false; }},
      {"a shared filesystem", [&](json& o) {
         vmi(o)["domain"]["devices"]["filesystems"] = json::array({{{"name", "share"}, {"virtiofs", json::object()}}});
       }},
      {"an unpinned container disk", [&](json& o) {
         vmi(o)["volumes"][3]["containerDisk"]["image"] = "registry.example/cloister/agent:latest";
       }},
      {"an unpinned kernel", [&](json& o) {
         vmi(o)["domain"]["firmware"]["kernelBoot"]["container"]["image"] = "kernel:latest";
       }},
      {"a clone of another PVC", [](json& o) {
         (*Find(o, "VirtualMachine"))["spec"]["dataVolumeTemplates"][0]["spec"]["source"]["pvc"]["name"] = "other";
       }},
      {"an HTTP import instead of the golden PVC", [](json& o) {
         (*Find(o, "DataVolume"))["spec"]["source"] = {{"http", {{"url", "http://x/disk.img"}}}};
       }},
      {"the isolating policy gone", [](json& o) {
         for (size_t i = 0; i < o.size(); ++i) {
           if (o[i]["kind"] == "NetworkPolicy") o.erase(i);
         }
       }},
      {"a policy that allows egress", [](json& o) {
         (*Find(o, "NetworkPolicy"))["spec"]["egress"] = json::array({json::object()});
       }},
      {"a Secret", [](json& o) {
         o.push_back({{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "s"}}}});
       }},
  };
  for (const Case& c : cases) {
    json objects = Render();
    c.mutate(objects);
    EXPECT_FALSE(CheckInvariants(objects).ok()) << c.what;
  }
}

TEST(KubeRenderTest, MapsTheWorkspaceSettings) {
  json objects = Render();
  json& vm = *Find(objects, "VirtualMachine");
  json& d = vm["spec"]["template"]["spec"]["domain"];
  EXPECT_EQ(d["cpu"]["cores"], 4);
  EXPECT_EQ(d["memory"]["guest"], "4096Mi");
  // The contract's disk order: vda system, vdb home, vdc metadata.
  EXPECT_EQ(d["devices"]["disks"][0]["name"], "system");
  EXPECT_EQ(d["devices"]["disks"][1]["name"], "home");
  EXPECT_EQ(d["devices"]["disks"][2]["name"], "meta");
  json& dvt = vm["spec"]["dataVolumeTemplates"][0];
  EXPECT_EQ(dvt["spec"]["source"]["pvc"]["name"], "cloister-image-" + kDigest.substr(0, 16));
  EXPECT_EQ(dvt["metadata"]["annotations"]["cloister.dev/image-sha256"], kDigest);
  EXPECT_EQ(Find(objects, "DataVolume")->at("spec")["storage"]["resources"]["requests"]["storage"], "64Gi");
  EXPECT_EQ(Find(objects, "DataVolume")->at("spec")["storage"]["storageClassName"], "fast-zeroed");
}

TEST(KubeRenderTest, RefusesWhatItCannotRender) {
  WorkspaceConfig c = Config();
  c.image.sha256 = "";
  EXPECT_FALSE(RenderWorkspace(c, Options()).ok());
  RenderOptions o = Options();
  o.agent_image = "registry.example/cloister/agent:latest";
  auto r = RenderWorkspace(Config(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("--agent-image"), std::string::npos);
  o = Options();
  o.kernel_image = "";
  EXPECT_FALSE(RenderWorkspace(Config(), o).ok());
}

}  // namespace
}  // namespace cloister::kube

#include "kube/render.h"

#include <functional>
#include <set>

#include "protocol/contract.h"

namespace cloister::kube {

using nlohmann::json;

namespace {

constexpr char kWorkspaceLabel[] = "cloister.dev/workspace";
constexpr char kDigestAnnotation[] = "cloister.dev/image-sha256";

std::string Mib(uint64_t mib) { return std::to_string(mib) + "Mi"; }

std::string Bytes(uint64_t bytes) {
  // Whole GiB when exact (the home default), else Mi rounded up.
  if (bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "Gi";
  return Mib((bytes + (1ull << 20) - 1) >> 20);
}

bool IsHex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool DigestPinned(const std::string& ref) {
  auto at = ref.find("@sha256:");
  return at != std::string::npos && at > 0 && IsHex64(ref.substr(at + 8));
}

json Metadata(const std::string& name, const std::string& ns, const std::string& workspace) {
  return {{"name", name},
          {"namespace", ns},
          {"labels", {{"app.kubernetes.io/managed-by", "cloister"}, {kWorkspaceLabel, workspace}}}};
}

json StorageSpec(const std::string& size, const std::string& storage_class) {
  json s = {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", size}}}}}};
  if (!storage_class.empty()) s["storageClassName"] = storage_class;
  return s;
}

}  // namespace

std::string GoldenPvcName(const ImageIdentity& image) {
  return "cloister-image-" + image.sha256.substr(0, 16);
}

Result<json> RenderWorkspace(const WorkspaceConfig& c, const RenderOptions& o) {
  if (!IsHex64(c.image.sha256)) {
    return Error(ErrorCode::kFailedPrecondition,
                 c.name + " has no image digest to clone from",
                 "recreate it from a catalog image (cloister image ls)");
  }
  const std::string& ws = c.name;
  const std::string system_dv = ws + "-system";
  const std::string home_dv = ws + "-home";
  const std::string meta_cm = ws + "-meta";
  for (const auto& [flag, ref] : {std::pair<const char*, const std::string&>{"--agent-image", o.agent_image},
                                   {"--kernel-image", o.kernel_image}}) {
    if (!DigestPinned(ref)) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string(flag) + " '" + ref + "' is not an image pinned by digest",
                   "give REPOSITORY@sha256:<64 hex digits> (docs/scale-out.md: what the image holds)");
    }
  }
  const std::string& kernel_image = o.kernel_image;
  json objects = json::array();

  // The home: a blank volume of the workspace's size (the boot hook formats a blank home).
  json home = {{"apiVersion", "cdi.kubevirt.io/v1beta1"},
               {"kind", "DataVolume"},
               {"metadata", Metadata(home_dv, o.namespace_name, ws)},
               {"spec", {{"source", {{"blank", json::object()}}},
                         {"storage", StorageSpec(Bytes(c.home_size), o.storage_class)}}}};
  objects.push_back(home);

  // The system disk: a clone of the golden PVC of the signed image, which is named and annotated
  // by the image's digest (docs/scale-out.md: the golden PVC is verified once, at import).
  json system_meta = Metadata(system_dv, o.namespace_name, ws);
  system_meta["annotations"] = {{kDigestAnnotation, c.image.sha256}};
  json system_spec = {
      {"source", {{"pvc", {{"namespace", o.image_namespace}, {"name", GoldenPvcName(c.image)}}}}},
      {"storage", StorageSpec(Bytes(std::max<uint64_t>(c.image.size, 1ull << 30)), o.storage_class)}};

  json labels = {{"app.kubernetes.io/managed-by", "cloister"}, {kWorkspaceLabel, ws}};
  json vm = {
      {"apiVersion", "kubevirt.io/v1"},
      {"kind", "VirtualMachine"},
      {"metadata", Metadata(ws, o.namespace_name, ws)},
      {"spec",
       {{"runStrategy", "Halted"},
        {"dataVolumeTemplates", {{{"metadata", system_meta}, {"spec", system_spec}}}},
        {"template",
         {{"metadata", {{"labels", labels}}},
          {"spec",
           {{"domain",
             {{"cpu", {{"cores", c.cpus}}},
              {"memory", {{"guest", Mib(c.memory_mib)}}},
              {"firmware",
               {{"kernelBoot",
                 {{"kernelArgs", c.image.kernel_cmdline.empty() ? std::string(protocol::kKernelCmdline)
                                                                : c.image.kernel_cmdline},
                  {"container",
                   {{"image", kernel_image},
                    {"kernelPath", "/boot/vmlinuz"},
                    {"initrdPath", "/boot/initrd.img"}}}}}}},
              {"devices",
               {{"autoattachPodInterface", false},
                {"autoattachVSOCK", true},
                {"autoattachGraphicsDevice", false},
                {"autoattachSerialConsole", true},
                {"autoattachMemBalloon", true},
                {"interfaces", json::array()},
                // The contract's order: vda system, vdb home, vdc metadata (protocol/contract.h).
                {"disks",
                 {{{"name", "system"}, {"disk", {{"bus", "virtio"}}}},
                  {{"name", "home"}, {"disk", {{"bus", "virtio"}}}},
                  {{"name", "meta"}, {"disk", {{"bus", "virtio"}, {"readonly", true}}}},
                  {{"name", "agent"}, {"disk", {{"bus", "virtio"}, {"readonly", true}}}}}}}}}},
            {"networks", json::array()},
            {"terminationGracePeriodSeconds", 60},
            {"volumes",
             {{{"name", "system"}, {"dataVolume", {{"name", system_dv}}}},
              {{"name", "home"}, {"dataVolume", {{"name", home_dv}}}},
              {{"name", "meta"}, {"configMap", {{"name", meta_cm}}}},
              {{"name", "agent"}, {"containerDisk", {{"image", o.agent_image}}}}}}}}}}}}};
  objects.push_back(vm);

  // The pod that runs the VM talks to nobody: no ingress, no egress. The guest's only link is the
  // channel over vsock, which the node's cloister daemon opens (docs/scale-out.md).
  json policy = {{"apiVersion", "networking.k8s.io/v1"},
                 {"kind", "NetworkPolicy"},
                 {"metadata", Metadata(ws + "-isolate", o.namespace_name, ws)},
                 {"spec",
                  {{"podSelector", {{"matchLabels", {{kWorkspaceLabel, ws}}}}},
                   {"policyTypes", {"Ingress", "Egress"}}}}};
  objects.push_back(policy);

  if (!o.snapshot.empty()) {
    objects.push_back({{"apiVersion", "snapshot.kubevirt.io/v1beta1"},
                       {"kind", "VirtualMachineSnapshot"},
                       {"metadata", Metadata(o.snapshot, o.namespace_name, ws)},
                       {"spec",
                        {{"source", {{"apiGroup", "kubevirt.io"}, {"kind", "VirtualMachine"},
                                     {"name", ws}}}}}});
  }
  if (Status st = CheckInvariants(objects); !st.ok()) {
    return Error(ErrorCode::kInternal, "refusing to print manifests that break an invariant: " +
                                           st.error().message());
  }
  return objects;
}

Status CheckInvariants(const json& objects) {
  std::vector<std::string> bad;
  if (!objects.is_array()) return Error(ErrorCode::kFailedPrecondition, "not a list of objects");
  std::set<std::string> isolated;  // workspace label values a deny-all policy covers
  for (const json& o : objects) {
    if (!o.is_object()) continue;
    if (o.value("kind", "") != "NetworkPolicy") continue;
    const json& spec = o.value("spec", json::object());
    json types = spec.value("policyTypes", json::array());
    bool both = std::find(types.begin(), types.end(), "Ingress") != types.end() &&
                std::find(types.begin(), types.end(), "Egress") != types.end();
    bool no_rules = !spec.contains("ingress") && !spec.contains("egress");
    json sel = spec.value("podSelector", json::object()).value("matchLabels", json::object());
    if (both && no_rules && sel.contains(kWorkspaceLabel) && sel[kWorkspaceLabel].is_string()) {
      isolated.insert(sel[kWorkspaceLabel].get<std::string>());
    }
  }
  for (const json& o : objects) {
    if (!o.is_object()) {
      bad.push_back("an entry is not an object");
      continue;
    }
    std::string kind = o.value("kind", "");
    std::string id = kind + "/" + o.value("metadata", json::object()).value("name", "");
    // Nothing anywhere may name a host path or carry a secret value.
    std::function<void(const json&)> walk = [&](const json& x) {
      if (x.is_object()) {
        for (auto it = x.begin(); it != x.end(); ++it) {
          if (it.key() == "hostPath" || it.key() == "hostDisk" || it.key() == "containerPath") {
            bad.push_back(id + ": names a host path (" + it.key() + ")");
          }
          walk(it.value());
        }
      } else if (x.is_array()) {
        for (const json& v : x) walk(v);
      }
    };
    walk(o);
    if (kind == "Secret") bad.push_back(id + ": secrets stay in the node daemon's vault");
    if (kind == "DataVolume") {
      const json src = o.value("spec", json::object()).value("source", json::object());
      bool blank = src.size() == 1 && src.contains("blank");
      bool pvc = src.size() == 1 && src.contains("pvc");
      if (!blank && !pvc) bad.push_back(id + ": a data volume is blank or a golden-PVC clone");
    }
    if (kind == "VirtualMachine") {
      const json spec = o.value("spec", json::object());
      for (const json& dvt : spec.value("dataVolumeTemplates", json::array())) {
        const json src = dvt.value("spec", json::object()).value("source", json::object());
        std::string digest = dvt.value("metadata", json::object())
                                 .value("annotations", json::object())
                                 .value(kDigestAnnotation, "");
        if (!(src.size() == 1 && src.contains("pvc")) || !IsHex64(digest) ||
            src["pvc"].value("name", "") != "cloister-image-" + digest.substr(0, 16)) {
          bad.push_back(id + ": a system disk is a clone of the golden PVC of its digest");
        }
      }
      const json tmpl = spec.value("template", json::object());
      const json vmi = tmpl.value("spec", json::object());
      const json dev = vmi.value("domain", json::object()).value("devices", json::object());
      if (dev.value("autoattachPodInterface", true) != false) {
        bad.push_back(id + ": the pod network interface must be off");
      }
      if (!dev.value("interfaces", json::array()).empty() ||
          !vmi.value("networks", json::array()).empty()) {
        bad.push_back(id + ": no network interface: the channel is the only path out");
      }
      if (dev.value("autoattachVSOCK", false) != true) bad.push_back(id + ": vsock carries the channel");
      if (dev.contains("filesystems") || dev.contains("hostDevices") || dev.contains("gpus")) {
        bad.push_back(id + ": no host filesystem or device passthrough");
      }
      static const std::set<std::string> kVolumeKinds = {"dataVolume", "configMap", "containerDisk",
                                                          "persistentVolumeClaim"};
      for (const json& v : vmi.value("volumes", json::array())) {
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (it.key() == "name") continue;
          if (!kVolumeKinds.count(it.key())) bad.push_back(id + ": volume kind " + it.key() + " not allowed");
          if (it.key() == "containerDisk" && !DigestPinned(it.value().value("image", ""))) {
            bad.push_back(id + ": a container disk is pinned by digest");
          }
        }
      }
      const json kb = vmi.value("domain", json::object()).value("firmware", json::object())
                          .value("kernelBoot", json::object());
      if (kb.contains("container") && !DigestPinned(kb["container"].value("image", ""))) {
        bad.push_back(id + ": the kernel image is pinned by digest");
      }
      std::string label = tmpl.value("metadata", json::object())
                              .value("labels", json::object())
                              .value(kWorkspaceLabel, "");
      if (label.empty() || !isolated.count(label)) {
        bad.push_back(id + ": its pod is not covered by a deny-all NetworkPolicy");
      }
    }
  }
  if (bad.empty()) return OkStatus();
  std::string msg;
  for (const std::string& b : bad) msg += (msg.empty() ? "" : "; ") + b;
  return Error(ErrorCode::kFailedPrecondition, msg);
}

}  // namespace cloister::kube

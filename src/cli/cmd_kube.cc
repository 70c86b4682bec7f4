// `cloister kube render NAME`: the workspace as KubeVirt/CDI manifests (docs/scale-out.md).
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/store_verbs.h"
#include "kube/render.h"

namespace cloister::cli {

void AddKubeCommand(CLI::App& app, Cli& cli) {
  auto* kube = app.add_subcommand("kube", "Team scale on KubeVirt (a design: docs/scale-out.md)");
  kube->require_subcommand(1);
  auto* render = kube->add_subcommand(
      "render", "Print an existing workspace as KubeVirt and CDI manifests (for kubectl apply -f -); "
                "nothing is sent anywhere");
  auto name = std::make_shared<std::string>();
  auto opts = std::make_shared<kube::RenderOptions>();
  auto json = std::make_shared<bool>(false);
  render->add_option("NAME", *name, "Workspace name")->required();
  render->add_option("--namespace", opts->namespace_name, "Namespace of the workspace's objects")
      ->capture_default_str();
  render->add_option("--image-namespace", opts->image_namespace,
                     "Namespace of the golden image PVCs")->capture_default_str();
  render->add_option("--storage-class", opts->storage_class,
                     "Storage class of the disks (one that hands out zeroed blocks: "
                     "docs/scale-out.md); default: the cluster's");
  render->add_option("--agent-image", opts->agent_image,
                     "The guest agent's container disk, REPOSITORY@sha256:DIGEST")->required();
  render->add_option("--kernel-image", opts->kernel_image,
                     "The image's kernel and initramfs for kernelBoot, REPOSITORY@sha256:DIGEST")
      ->required();
  render->add_option("--snapshot", opts->snapshot,
                     "Also a VirtualMachineSnapshot of this name (what checkpoint create maps to)");
  render->add_flag("--json", *json, "Print one JSON v1 List instead of YAML documents");
  render->callback([&cli, name, opts, json] {
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
    auto info = (*store)->Describe(*name);
    if (!info.ok()) {
      cli.Fail(info.error());
      return;
    }
    auto objects = kube::RenderWorkspace(info->config, *opts);
    if (!objects.ok()) {
      cli.Fail(objects.error());
      return;
    }
    if (*json) {
      cli.PrintJson({{"apiVersion", "v1"}, {"kind", "List"}, {"items", *objects}});
      return;
    }
    // JSON is YAML: one document per object, as kubectl reads them.
    for (const auto& o : *objects) cli.out() << "---\n" << o.dump(2) << "\n";
  });
}

}  // namespace cloister::cli

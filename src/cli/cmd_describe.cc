#include "base/terminal_text.h"
#include "catalog/store.h"
#include "cli/commands.h"
#include "cli/port_watch.h"
#include "cli/store_verbs.h"
#include "lifecycle/lifecycle.h"
#include "supervisor/control.h"
#include "supervisor/launcher.h"
#include "supervisor/workspace.h"

namespace cloister::cli {

namespace {

// Where the workspace's image came from (an image built from an OCI source): its catalog
// entry's provenance, when that entry's disk is the one the workspace records.
std::vector<std::pair<std::string, std::string>> ImageProvenance(Cli& cli, const WorkspaceConfig& c) {
  catalog::CatalogStore catalogs(cli.StoreRoot());
  auto list = catalogs.ListImages();
  if (!list.ok() || c.image.channel.empty()) return {};
  for (const auto& l : *list) {
    const catalog::Artifact* disk = l.entry.FindArtifact(catalog::kRoleDisk);
    if (l.entry.name == c.image.name && l.channel == c.image.channel && disk &&
        disk->sha256 == c.image.sha256) {
      return l.entry.provenance;
    }
  }
  return {};
}

}  // namespace

void AddDescribeCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("describe", "Show a workspace: config, disks and their sizes "
                                             "(apparent and allocated), checkpoints, MAC, state");
  auto name = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("NAME", *name, "Workspace name")->required();
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([&cli, name, json] {
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
    Result<WorkspaceInfo> info = (*store)->Describe(*name);
    if (!info.ok()) {
      cli.Fail(info.error());
      return;
    }
    const WorkspaceConfig& c = info->config;
    // Live state from the supervisor's pid-file lock and socket answer (vm/state.h).
    vm::VmStatus vs = vm::WorkspaceStatus(**store, *name);
    // The live forwards (a running VM's; an automatic one's host port is the host's pick).
    nlohmann::json forwards = lifecycle::IsLive(vs.state)
                                  ? LiveForwards(vm::RunPathsFor(**store, *name).supervisor_socket)
                                  : nlohmann::json::array();
    const auto provenance = ImageProvenance(cli, c);
    if (*json) {
      nlohmann::json j;
      j["config"] = ConfigToJson(c);
      nlohmann::json prov = nlohmann::json::object();
      for (const auto& [k, v] : provenance) prov[k] = v;
      j["image_provenance"] = prov;
      j["state"] = vm::VmStateName(vs.state);
      if (!vs.detail.empty()) j["state_detail"] = vs.detail;
      if (!vs.hint.empty()) j["hint"] = vs.hint;
      j["directory"] = info->paths.dir;
      j["compromised"] = c.compromised;
      j["mac"] = c.mac;
      j["forwards"] = forwards;
      j["browser"] = vs.info.contains("browser") && vs.info["browser"].is_object()
                         ? vs.info["browser"]
                         : nlohmann::json{{"state", "stopped"}};
      nlohmann::json layers = nlohmann::json::array();
      for (const LayerUsage& u : info->layers) {
        layers.push_back({{"file", u.layer.file},
                          {"disk", DiskKindName(u.layer.disk)},
                          {"format", layout::DiskFormatName(u.layer.format)},
                          {"role", u.role},
                          {"backing", u.layer.on_base ? c.image.path : u.layer.backing},
                          {"apparent_bytes", u.apparent},
                          {"allocated_bytes", u.allocated}});
      }
      j["layers"] = layers;
      nlohmann::json cps = nlohmann::json::array();
      for (const CheckpointInfo& ci : info->checkpoints) cps.push_back(CheckpointJson(ci));
      j["checkpoints"] = cps;
      j["total_apparent_bytes"] = info->total_apparent;
      j["total_allocated_bytes"] = info->total_allocated;
      cli.PrintJson(j);
      return;
    }
    std::ostream& out = cli.out();
    out << "Name:        " << c.name << "\n"
        << "State:       " << vm::VmStateName(vs.state)
        << (vs.detail.empty() ? "" : " (" + TerminalSafe(vs.detail) + ")")
        << (vs.hint.empty() ? "" : "; " + TerminalSafe(vs.hint)) << "\n";
    if (c.compromised) {
      out << "Compromised: YES since " << FormatUtcIso8601(c.compromised_at) << ": "
          << TerminalSafe(c.compromised_reason) << "\n             (it will not start; fix: cloister wipe "
          << c.name << ")\n";
    } else {
      out << "Compromised: no\n";
    }
    out << "Directory:   " << info->paths.dir << "\n"
        << "Created:     " << FormatUtcIso8601(c.created) << "\n"
        << "Image:       " << c.image.name << (c.image.version.empty() ? "" : " " + c.image.version)
        << (c.image.channel.empty() ? " (raw image file)" : " (channel " + c.image.channel + ")")
        << "\n"
        << "  sha256:    " << c.image.sha256 << "\n"
        << "  disk:      " << c.image.path << "\n";
    for (const auto& [k, v] : provenance) {
      if (k == "source" || k == "manifest" || k == "devcontainer" || k == "has") {
        out << "  " << k << ":" << std::string(k.size() < 10 ? 10 - k.size() : 1, ' ')
            << TerminalSafe(v) << "\n";
      }
    }
    out << "Memory:      " << c.memory_mib << " MiB\n"
        << "CPUs:        " << c.cpus << "\n"
        << "MAC:         " << c.mac << "\n";
    if (auto b = vs.info.find("browser"); b != vs.info.end() && b->is_object() &&
                                          vm::JsonString(*b, "state") == "running") {
      out << "Browser:     running (QEMU pid " << b->value("qemu_pid", 0) << ", "
          << b->value("memory_mib", 0) << " MiB, " << b->value("cpus", 0) << " CPU, "
          << (b->value("keep_profile", false) ? "kept profile" : "profile on tmpfs")
          << "; CDP at http://127.0.0.1:9222 in the workspace)\n";
    } else {
      out << "Browser:     " << (b != vs.info.end() && b->is_object() && !vm::JsonString(*b, "state").empty()
                                    ? vm::JsonString(*b, "state") : std::string("stopped"))
          << "\n";
    }
    for (const nlohmann::json& f : forwards) out << "Port:        " << ForwardLine(f) << "\n";
    for (const Volume& v : c.volumes) {
      out << "Volume:      " << v.host << " -> " << v.guest << (v.read_only ? " (ro)" : "") << "\n";
    }
    out << "Disks (apparent / allocated):\n";
    if (c.system_top.empty()) out << "  system  absent: cloned from the base image at next start\n";
    for (const LayerUsage& u : info->layers) {
      out << "  " << (u.layer.disk == DiskKind::kSystem ? "system" : "home  ") << "  "
          << u.layer.file << " [" << layout::DiskFormatName(u.layer.format) << ", " << u.role
          << "] " << FormatSize(u.apparent) << " / " << FormatSize(u.allocated) << "\n";
    }
    out << "Checkpoints: " << info->checkpoints.size() << "\n";
    for (const CheckpointInfo& ci : info->checkpoints) {
      out << "  " << ci.record.id << "  " << FormatUtcIso8601(ci.record.created) << "  "
          << (ci.record.automatic ? "automatic" : "manual   ") << "  "
          << FormatSize(ci.allocated) << "\n";
    }
    out << "Total:       " << FormatSize(info->total_apparent) << " apparent, "
        << FormatSize(info->total_allocated) << " allocated\n";
  });
}

}  // namespace cloister::cli

#include "cli/devcontainer_image.h"

#include <unistd.h>

#include <filesystem>

#include "base/strings.h"
#include "base/terminal_text.h"
#include "catalog/names.h"
#include "catalog/store.h"
#include "cli/cli.h"
#include "cli/image_from_plan.h"
#include "cli/store_verbs.h"
#include "devcontainer/workspace.h"
#include "protocol/contract.h"
#include "store/config_section.h"
#include "vm/accel.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

std::string CurrentDirectory() {
  std::error_code ec;
  fs::path p = fs::current_path(ec);
  return ec ? std::string("/") : p.string();
}

// The catalog's image of this name built from the same plan, if any.
bool SameInputs(const catalog::ImageEntry& e, const std::string& plan_digest) {
  for (const auto& [k, v] : e.provenance) {
    if (k == "plan") return v == plan_digest;
  }
  return false;
}

}  // namespace

void AddDevcontainerFlags(CLI::App* cmd, DevcontainerFlags& flags, bool naming) {
  std::string help =
      "Build from a repository's devcontainer.json (default: the current repository's "
      ".devcontainer/devcontainer.json or .devcontainer.json; or PATH, a file or a folder): its "
      "image or Dockerfile and its Features, in a throwaway builder VM (nothing of the repository "
      "runs on the host; initializeCommand never runs); an image already built from the same "
      "inputs is reused";
  if (naming) {
    help += ". The workspace then gets its containerEnv (a credential-shaped value is refused: "
            "`cloister cred add`), forwardPorts as -p 127.0.0.1:N:N (a free host port below "
            "1024), and its lifecycle commands as remoteUser in the first -v folder (else the "
            "home): the create ones at the first boot, postStartCommand at every boot";
  }
  flags.option = cmd->add_option("--devcontainer", flags.path, help)->expected(0, 1);
  cmd->add_option("--base", flags.bases,
                  "With --devcontainer: NAME=REF loads the image REF (oci-archive:PATH, "
                  "docker-archive:PATH, oci:DIR) under NAME for the Dockerfile's `FROM NAME` "
                  "instead of pulling it (repeatable)");
  if (!naming) return;
  cmd->add_option("--image-name", flags.name,
                  "With --devcontainer: the catalog name of the image (default dc-REPO)");
  cmd->add_flag("--show-steps", flags.verbose,
                "With --devcontainer: print each Dockerfile step's and Feature's output");
}

std::vector<std::string> ForwardPortSpecs(const std::vector<uint16_t>& ports) {
  std::vector<std::string> out;
  for (uint16_t p : ports) {
    std::string n = std::to_string(p);
    out.push_back(p < 1024 ? "127.0.0.1::" + n : "127.0.0.1:" + n + ":" + n);
  }
  return out;
}

Result<DevcontainerImage> BuildDevcontainerImage(Cli& cli, const DevcontainerFlags& flags) {
  const std::string store_root = cli.StoreRoot();
  const std::string cwd = CurrentDirectory();
  // Read it once for its name and notices; the staging folder depends on the name.
  ASSIGN_OR_RETURN(auto read, devcontainer::ReadDevcontainer(flags.path, cwd));
  std::string name = flags.name.empty() ? devcontainer::DefaultImageName(read.location) : flags.name;
  cli.err() << "devcontainer: " << TerminalSafe(read.location.root + "/" + read.location.file)
            << " (sha256 " << read.sha256.substr(0, 12) << ")\n";
  for (const devcontainer::Notice& n : read.notices) cli.err() << TerminalSafe(n.ToString()) << "\n";

  devcontainer::BuildRequest req;
  req.spec = flags.path;
  req.cwd = cwd;
  req.image_name = name;
  req.staging = store_root + "/" + catalog::names::kImagesDir + "/.devcontainer-" + name;
  for (const std::string& b : flags.bases) {
    ASSIGN_OR_RETURN(auto base, devcontainer::ParseBaseFlag(b, cwd));
    req.base_images.push_back(std::move(base));
  }
  std::error_code ec;
  fs::remove_all(req.staging, ec);  // a crashed build's leftovers
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{req.staging};
  auto prepared = devcontainer::PrepareBuild(req);
  if (!prepared.ok()) return prepared.error();
  // The Features' notices (the file's were printed above).
  for (size_t i = read.notices.size(); i < prepared->notices.size(); ++i) {
    cli.err() << TerminalSafe(prepared->notices[i].ToString()) << "\n";
  }
  DevcontainerImage out;
  catalog::CatalogStore store(store_root);
  bool other_inputs = false;  // the local catalog has an image of this name from other inputs
  if (auto listed = store.ListImages(); listed.ok()) {
    for (const auto& l : *listed) {
      if (l.channel != catalog::kLocalChannel || l.entry.name != name) continue;
      if (SameInputs(l.entry, prepared->inputs_digest) &&
          store.Resolve(name, catalog::Rehash::kIfChanged).ok()) {
        cli.err() << "devcontainer: image " << name << " " << l.entry.version
                  << " was built from the same inputs: reused\n";
        out.entry = l.entry;
        out.reused = true;
      } else {
        other_inputs = true;
      }
    }
  }
  if (!out.reused && other_inputs) {
    // The image a workspace stands on is never replaced under it (image_from_plan.h refuses to
    // publish then): say so now rather than after a whole build.
    ASSIGN_OR_RETURN(auto ws, OpenStore(cli));
    ASSIGN_OR_RETURN(auto users, ws->IfImageUnused(store.ImageDir(name), [] { return OkStatus(); }));
    if (!users.empty()) {
      return Error(ErrorCode::kFailedPrecondition,
                   "image \"" + name + "\" was built from other inputs and is used by " +
                       Join(users, ", ") + "; replacing it would change their base image under them",
                   "build this one under another name (`create --image-name`, `image build "
                   "--name`), or remove those workspaces first with `cloister rm NAME`");
    }
  }
  if (!out.reused) {
    if (!flags.disk_size.empty()) {
      ASSIGN_OR_RETURN(prepared->plan.disk_size_bytes, ParseSize(flags.disk_size));
    }
    PlanBuildOptions o;
    ASSIGN_OR_RETURN(o.accel, vm::ParseAccelMode(flags.accel));
    o.store_root = store_root;
    o.progress = [&cli](const std::string& line) { cli.err() << TerminalSafe(line) << std::endl; };
    o.verbose = flags.verbose;
    prepared->plan.show_step_output = flags.verbose;
    ASSIGN_OR_RETURN(out.entry, BuildImageFromPlan(cli, prepared->plan, o));
  }
  out.prepared = std::move(*prepared);
  return out;
}

Result<DevcontainerImage> DevcontainerForCreate(Cli& cli, const DevcontainerFlags& flags,
                                                const std::string& workspace,
                                                const std::string& image_flag,
                                                std::vector<std::string>& publish) {
  if (!image_flag.empty()) {
    return Error(ErrorCode::kInvalidArgument, "--image and --devcontainer name two bases",
                 "give one: the devcontainer's image is built from its devcontainer.json");
  }
  RETURN_IF_ERROR(ValidateWorkspaceName(workspace));
  if (auto store = OpenStore(cli); store.ok() && (*store)->LoadConfig(workspace).ok()) {
    return Error(ErrorCode::kAlreadyExists, "workspace '" + workspace + "' already exists",
                 "pick another name, or `cloister rm " + workspace + "` first");
  }
  ASSIGN_OR_RETURN(DevcontainerImage dc, BuildDevcontainerImage(cli, flags));
  for (const std::string& spec : ForwardPortSpecs(dc.prepared.config.forward_ports)) {
    publish.push_back(spec);
  }
  return dc;
}

Status RecordDevcontainer(Store& store, const std::string& workspace, const DevcontainerImage& dc) {
  Status st = store.UpdateConfig(workspace, [&](WorkspaceConfig& wc) {
    return PutConfigSection(devcontainer::WorkspaceDevcontainerSection(), wc, dc.prepared.workspace);
  });
  if (!st.ok()) (void)store.Remove(workspace);
  return st;
}

std::string DevcontainerSummary(const DevcontainerImage& dc) {
  const devcontainer::WorkspaceDevcontainer& w = dc.prepared.workspace;
  return "  devcontainer: " + TerminalSafe(w.source) + " (" + std::to_string(w.steps.size()) +
         " lifecycle step(s), as " +
         (w.remote_user.empty() ? std::string(protocol::kGuestUser) : TerminalSafe(w.remote_user)) +
         "; " + std::to_string(w.env.size()) + " environment variable(s); " +
         std::to_string(dc.prepared.config.forward_ports.size()) + " forwarded port(s))\n";
}

void RunImageBuildDevcontainer(Cli& cli, const DevcontainerFlags& flags) {
  auto built = BuildDevcontainerImage(cli, flags);
  if (!built.ok()) {
    cli.Fail(built.error());
    return;
  }
  const catalog::Artifact* disk = built->entry.FindArtifact(catalog::kRoleDisk);
  cli.out() << (built->reused ? "reused " : "built ") << built->entry.name << " "
            << built->entry.version << "\n";
  if (disk) cli.out() << "  disk sha256:" << disk->sha256 << "\n";
  cli.out() << "  from " << TerminalSafe(built->prepared.workspace.source) << " (sha256 "
            << built->prepared.sha256 << ")\n"
            << "  use it with `cloister create NAME --devcontainer` in the repository (which also "
               "applies its environment, ports and lifecycle commands)\n";
}

}  // namespace cloister::cli

#include "base/agent_tools.h"
#include "base/strings.h"
#include "cli/commands.h"
#include "cli/store_verbs.h"

namespace cloister::cli {

void AddCreateCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("create", "Create a workspace: a system disk cloned from a base "
                                           "image, an empty home, a MAC and a keypair");
  struct Opts {
    std::string name, image, home_size = "64G", tool = kDefaultToolName;
    uint32_t memory = kDefaultMemoryMib, cpus = kDefaultCpus;
    std::vector<std::string> volumes;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name (a-z, 0-9, '.', '_', '-'; up to 63)")->required();
  cmd->add_option("--image", o->image,
                  std::string("Base image: a name from `cloister image ls` (default ") +
                      catalog::kDefaultImageName +
                      "; `test` is the tiny test image), checked against its signed catalog; or "
                      "the path of a raw disk image file (must contain a '/', e.g. ./base.raw)");
  cmd->add_option("--memory", o->memory, "Guest memory in MiB")->capture_default_str();
  cmd->add_option("--cpus", o->cpus, "Guest vCPUs")->capture_default_str();
  cmd->add_option("--home-size", o->home_size,
                  "Apparent size of the sparse home image (e.g. 64G); only what is written uses "
                  "host space")
      ->capture_default_str();
  cmd->add_option("-v,--volume", o->volumes,
                  "Share a host folder: HOSTDIR[:GUESTDIR][:ro] (repeatable; never modified by "
                  "cloister's disposal verbs). In a shared git repository the guest cannot change "
                  ".git/config, hooks, info, modules or worktrees (host git must not run its code)");
  cmd->add_option("--tool", o->tool,
                  "The coding agent it runs: " + AgentToolNames() +
                      ". claude and codex are installed in the guest at its first boot (npm, "
                      "through the proxy) and run in the first tmux window; change it later with "
                      "`cloister config NAME --tool`")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the new workspace's config as JSON");
  cmd->callback([&cli, o] {
    CreateRequest req;
    req.name = o->name;
    req.image = o->image;
    req.memory_mib = o->memory;
    req.cpus = o->cpus;
    req.tool = o->tool;
    Result<uint64_t> home = ParseSize(o->home_size);
    if (!home.ok()) {
      cli.Fail(home.error());
      return;
    }
    req.home_size = *home;
    for (const std::string& v : o->volumes) {
      Result<Volume> vol = ParseVolumeSpec(AbsoluteVolumeHost(v));
      if (!vol.ok()) {
        cli.Fail(vol.error());
        return;
      }
      req.volumes.push_back(*vol);
    }
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
    Result<WorkspaceConfig> c = (*store)->Create(req);
    if (!c.ok()) {
      cli.Fail(c.error());
      return;
    }
    if (o->json) {
      cli.PrintJson(ConfigToJson(*c));
      return;
    }
    LiveDisks d = (*store)->LiveDiskPaths(c->name, *c);
    cli.out() << "Created workspace '" << c->name << "'\n"
              << "  system disk: " << BaseName(d.system.path) << " ("
              << (d.system.format == layout::DiskFormat::kRaw ? "reflink clone" : "qcow2 overlay")
              << " of " << c->image.path << ")\n"
              << "  image:       " << c->image.name
              << (c->image.version.empty() ? "" : " " + c->image.version)
              << (c->image.channel.empty() ? " (raw image file, not from a catalog)"
                                           : " (channel " + c->image.channel + ")")
              << ", sha256 " << c->image.sha256 << "\n"
              << "  home:        " << BaseName(d.home.path) << " (" << FormatSize(c->home_size)
              << " sparse ext4)\n"
              << "  MAC:         " << c->mac << "\n"
              << "  tool:        " << c->tool << "\n";
  });
}

}  // namespace cloister::cli

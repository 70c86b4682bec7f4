#include <optional>

#include "base/agent_tools.h"
#include "base/strings.h"
#include "cli/commands.h"
#include "cli/devcontainer_image.h"
#include "cli/git_verbs.h"
#include "supervisor/launcher.h"
#include "cli/store_verbs.h"
#include "cli/port_flags.h"

namespace cloister::cli {

void AddCreateCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("create", "Create a workspace: a system disk cloned from a base "
                                           "image, an empty home, a MAC and a keypair");
  struct Opts {
    std::string name, image, home_size = "64G", tool = kDefaultToolName;
    uint32_t memory = kDefaultMemoryMib, cpus = kDefaultCpus;
    std::vector<std::string> volumes;
    std::vector<std::string> publish;
    bool auto_ports = false;
    bool json = false;
    DevcontainerFlags devcontainer;
    std::string from_repo;
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
                  "cloister's disposal verbs). The guest's user acts there as the folder's owner "
                  "(you, or the folder's owner when cloister runs as root) and what it creates is "
                  "that owner's. So that host git never runs the guest's code, the guest cannot "
                  "change .git/config, hooks, info, modules or worktrees of a repository in it, nor "
                  "create a .git, a HEAD or a set-user-ID file anywhere in it (git init and git "
                  "worktree add there fail: do them on the host)");
  cmd->add_option("--tool", o->tool,
                  "The coding agent it runs: " + AgentToolNames() +
                      ". claude and codex are installed in the guest at its first boot (npm, "
                      "through the proxy) and run in the first tmux window; change it later with "
                      "`cloister config NAME --tool`")
      ->capture_default_str();
  cmd->add_option("-p,--publish", o->publish,
                  "Publish a guest TCP port on the host: [HOST_IP:]HOST_PORT:GUEST_PORT "
                  "(repeatable; kept in the config, up at every start). The host listens on "
                  "127.0.0.1 unless HOST_IP is given; a non-loopback HOST_IP lets every host that "
                  "reaches it connect to the guest's port");
  cmd->add_flag("--auto-ports", o->auto_ports,
                "Forward every TCP port the guest listens on (loopback or any address) from "
                "127.0.0.1, on a host port the host picks, never the guest's number (`cloister port "
                "NAME ls`, `describe`, the dashboard and a line on the attach terminal show it)");
  cmd->add_option("--from-repo", o->from_repo,
                  "Seed it with a clone of this host repository's current branch at HEAD, without "
                  "a share: the workspace is started and the branch sent in as a git bundle to "
                  "/home/dev/<the repository's folder name> (`cloister git push`); it is left "
                  "running. Its work comes back with `cloister git pull NAME`");
  cmd->add_flag("--json", o->json, "Print the new workspace's config as JSON");
  AddDevcontainerFlags(cmd, o->devcontainer, true);
  cmd->callback([&cli, o] {
    // --devcontainer: the image built (or reused) first; its forwardPorts join -p, its
    // environment, user and lifecycle commands go into the config (devcontainer/workspace.h).
    std::optional<DevcontainerImage> dc;
    if (o->devcontainer.Given()) {
      auto built = DevcontainerForCreate(cli, o->devcontainer, o->name, o->image, o->publish);
      if (!built.ok()) {
        cli.Fail(built.error());
        return;
      }
      dc = std::move(*built);
      o->image = dc->entry.name;
    }
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
    Result<vm::PortsConfig> ports = ParsePublishFlags(o->publish, o->auto_ports, cli.err());
    if (!ports.ok()) {
      cli.Fail(ports.error());
      return;
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
    if (Status st = StorePublishFlags(**store, c->name, *ports); !st.ok()) {
      (void)(*store)->Remove(c->name);
      cli.Fail(st.error());
      return;
    }
    if (Status st = dc ? RecordDevcontainer(**store, c->name, *dc) : OkStatus(); !st.ok()) {
      cli.Fail(st.error());
      return;
    }
    if (!o->from_repo.empty()) {
      // SECURITY: no share; the repository goes in as a bundle the guest clones.
      Status seeded = vm::StartWorkspace(**store, c->name, {}, cli.err());
      if (seeded.ok()) {
        auto pushed = PushBranch(**store, c->name, o->from_repo, "", "");
        if (!pushed.ok()) seeded = pushed.error();
      }
      if (!seeded.ok()) {
        cli.Fail(seeded.error().WithContext("seeding '" + c->name + "' from " + o->from_repo +
                                            " (the workspace was created)"));
        return;
      }
    }
    if (auto reloaded = (*store)->LoadConfig(c->name); reloaded.ok()) c = std::move(reloaded);
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
    if (dc) cli.out() << DevcontainerSummary(*dc);
  });
}

}  // namespace cloister::cli

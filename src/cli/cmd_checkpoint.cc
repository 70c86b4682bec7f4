#include "cli/commands.h"
#include "cli/disposal_prompts.h"
#include "cli/store_verbs.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

void AddCheckpointCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "checkpoint",
      "Copy-on-write checkpoints of system disk and home together (one is taken automatically "
      "after each boot that reached a working terminal)");
  cmd->require_subcommand(1);

  auto open = [&cli]() -> std::unique_ptr<Store> {
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return nullptr;
    }
    return std::move(store).value();
  };

  {
    auto* ls = cmd->add_subcommand("ls", "List a workspace's checkpoints");
    auto name = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    ls->add_option("NAME", *name, "Workspace name")->required();
    ls->add_flag("--json", *json, "Print as JSON");
    ls->callback([&cli, open, name, json] {
      auto store = open();
      if (!store) return;
      auto list = store->ListCheckpoints(*name);
      if (!list.ok()) {
        cli.Fail(list.error());
        return;
      }
      if (*json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const CheckpointInfo& c : *list) arr.push_back(CheckpointJson(c));
        cli.PrintJson(arr);
        return;
      }
      cli.out() << "ID                   CREATED               KIND       SIZE\n";
      for (const CheckpointInfo& c : *list) {
        std::string id = c.record.id;
        id.resize(20, ' ');
        cli.out() << id << " " << FormatUtcIso8601(c.record.created) << "  "
                  << (c.record.automatic ? "automatic" : "manual   ") << "  "
                  << FormatSize(c.allocated) << "\n";
      }
    });
  }
  {
    auto* create = cmd->add_subcommand(
        "create", "Checkpoint a workspace now (kept until `checkpoint rm`). A running one is "
                  "checkpointed crash-consistently over QMP without stopping it: both disks at "
                  "one instant, as after a power cut");
    auto name = std::make_shared<std::string>();
    create->add_option("NAME", *name, "Workspace name")->required();
    create->callback([&cli, open, name] {
      auto store = open();
      if (!store) return;
      if (Status v = ValidateWorkspaceName(*name); !v.ok()) {
        cli.Fail(v.error());
        return;
      }
      if (lifecycle::IsLive(store->State(*name))) {
        Result<std::string> id = vm::CheckpointRunningWorkspace(*store, *name);
        if (!id.ok()) {
          cli.Fail(id.error());
          return;
        }
        cli.out() << *id << "\n";
        return;
      }
      auto rec = store->CreateCheckpoint(*name);
      if (!rec.ok()) {
        cli.Fail(rec.error());
        return;
      }
      cli.out() << rec->id << "\n";
    });
  }
  for (bool restore : {true, false}) {
    auto* sub = cmd->add_subcommand(
        restore ? "restore" : "rm",
        restore ? "Return system disk and home to a checkpoint (changes since are lost)"
                : "Delete a checkpoint (its data is merged into later layers when needed)");
    auto name = std::make_shared<std::string>();
    auto id = std::make_shared<std::string>();
    auto yes = std::make_shared<bool>(false);
    sub->add_option("NAME", *name, "Workspace name")->required();
    sub->add_option("ID", *id, "Checkpoint id (from `cloister checkpoint ls NAME`)")->required();
    sub->add_flag("-f,--yes", *yes, "Do not ask for confirmation");
    sub->callback([&cli, open, name, id, yes, restore] {
      auto store = open();
      if (!store) return;
      std::string q = restore ? RestorePrompt(*name, *id) : RemoveCheckpointPrompt(*name, *id);
      Status ok = cli.Confirm(q, *yes);
      if (!ok.ok()) {
        cli.Fail(ok.error());
        return;
      }
      Status s = restore ? store->RestoreCheckpoint(*name, *id) : store->RemoveCheckpoint(*name, *id);
      if (!s.ok()) {
        cli.Fail(s.error());
        return;
      }
      cli.out() << (restore ? "Restored '" + *name + "' to " : "Deleted checkpoint ") << *id
                << "\n";
    });
  }
}

}  // namespace cloister::cli

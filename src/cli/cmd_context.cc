// `cloister context add|ls|use|rm`: named remote hosts (cli/remote.h), like `docker context`.
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/remote.h"
#include "store/config.h"

namespace cloister::cli {

namespace {

Status ValidContextName(const std::string& name) {
  if (name == "default") {
    return Error(ErrorCode::kInvalidArgument, "'default' is this machine's context and cannot be changed");
  }
  // The same rule as workspace names: short, plain, safe in a file and a column.
  if (Status st = ValidateWorkspaceName(name); !st.ok()) {
    return Error(ErrorCode::kInvalidArgument, "bad context name '" + name + "'",
                 "1-63 characters of a-z, 0-9, '.', '_', '-'");
  }
  return OkStatus();
}

}  // namespace

void AddContextCommand(CLI::App& app, Cli& cli) {
  auto* ctx = app.add_subcommand("context", "Named remote hosts: every verb then runs against the "
                                            "cloister there, over your own ssh");
  ctx->require_subcommand(1);

  auto* add = ctx->add_subcommand("add", "Add a context NAME for ssh://[USER@]HOST[:PORT]");
  auto name = std::make_shared<std::string>();
  auto url = std::make_shared<std::string>();
  auto command = std::make_shared<std::string>();
  add->add_option("NAME", *name, "Context name")->required();
  add->add_option("URL", *url, "ssh://[USER@]HOST[:PORT]")->required();
  add->add_option("--cloister", *command, "The cloister command on the remote (default: cloister on its PATH)");
  add->callback([&cli, name, url, command] {
    if (Status st = ValidContextName(*name); !st.ok()) return (void)cli.Fail(st.error());
    auto t = ParseRemoteUrl(*url);
    if (!t.ok()) return (void)cli.Fail(t.error());
    auto doc = LoadContexts();
    if (!doc.ok()) return (void)cli.Fail(doc.error());
    if ((*doc)["contexts"].contains(*name)) {
      return (void)cli.Fail(Error(ErrorCode::kAlreadyExists, "context '" + *name + "' exists",
                                  "remove it first: cloister context rm " + *name));
    }
    nlohmann::json entry = {{"host", t->url()}};
    if (!command->empty()) entry["cloister"] = *command;
    (*doc)["contexts"][*name] = entry;
    if (Status st = SaveContexts(*doc); !st.ok()) return (void)cli.Fail(st.error());
    cli.out() << "added context " << *name << " (" << t->url() << "); use it with: cloister context use "
              << *name << "\n";
  });

  auto* ls = ctx->add_subcommand("ls", "List contexts (* marks the current one)");
  auto json = std::make_shared<bool>(false);
  ls->add_flag("--json", *json, "Print as JSON");
  ls->callback([&cli, json] {
    auto doc = LoadContexts();
    if (!doc.ok()) return (void)cli.Fail(doc.error());
    std::string current = (*doc)["current"];
    if (*json) {
      nlohmann::json arr = nlohmann::json::array();
      arr.push_back({{"name", "default"}, {"host", "this machine"}, {"current", current == "default"}});
      for (auto& [n, e] : (*doc)["contexts"].items()) {
        arr.push_back({{"name", n}, {"host", e.value("host", "")}, {"current", current == n}});
      }
      cli.PrintJson(arr);
      return;
    }
    cli.out() << (current == "default" ? "* " : "  ") << "default  (this machine)\n";
    for (auto& [n, e] : (*doc)["contexts"].items()) {
      cli.out() << (current == n ? "* " : "  ") << n << "  " << e.value("host", "") << "\n";
    }
  });

  auto* use = ctx->add_subcommand("use", "Make NAME the current context ('default' = this machine)");
  auto use_name = std::make_shared<std::string>();
  use->add_option("NAME", *use_name, "Context name")->required();
  use->callback([&cli, use_name] {
    auto doc = LoadContexts();
    if (!doc.ok()) return (void)cli.Fail(doc.error());
    if (*use_name != "default" && !(*doc)["contexts"].contains(*use_name)) {
      return (void)cli.Fail(Error(ErrorCode::kNotFound, "no context '" + *use_name + "'",
                                  "see cloister context ls"));
    }
    (*doc)["current"] = *use_name;
    if (Status st = SaveContexts(*doc); !st.ok()) return (void)cli.Fail(st.error());
    cli.out() << "current context: " << *use_name << "\n";
  });

  auto* rm = ctx->add_subcommand("rm", "Remove context NAME (nothing on the remote changes)");
  auto rm_name = std::make_shared<std::string>();
  rm->add_option("NAME", *rm_name, "Context name")->required();
  rm->callback([&cli, rm_name] {
    if (Status st = ValidContextName(*rm_name); !st.ok()) return (void)cli.Fail(st.error());
    auto doc = LoadContexts();
    if (!doc.ok()) return (void)cli.Fail(doc.error());
    if (!(*doc)["contexts"].contains(*rm_name)) {
      return (void)cli.Fail(Error(ErrorCode::kNotFound, "no context '" + *rm_name + "'"));
    }
    (*doc)["contexts"].erase(*rm_name);
    if ((*doc)["current"] == *rm_name) (*doc)["current"] = "default";
    if (Status st = SaveContexts(*doc); !st.ok()) return (void)cli.Fail(st.error());
    cli.out() << "removed context " << *rm_name << "\n";
  });
}

}  // namespace cloister::cli

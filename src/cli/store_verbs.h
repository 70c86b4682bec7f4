// Shared helpers of the workspace verbs (create, ls, describe, reset, wipe-home, wipe, rm,
// checkpoint): opening the store from --store / $CLOISTER_HOME and rendering workspaces.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "browser/profile_disk.h"
#include "cli/cli.h"
#include "cli/image_resolver.h"
#include "sshagent/ide_keys.h"
#include "sshagent/vault_key_store.h"
#include "store/store.h"
#include "vault/vault.h"

namespace cloister::cli {

// Every verb that may create a workspace or wipe its home must open the store here: it installs
// the catalog's image resolver (cli/image_resolver.h), so `--image NAME` goes through the verified
// catalog, and the workspace SSH key hook (sshagent/vault_key_store.h), so `create`, `wipe-home`
// and `wipe` make a fresh key in the workspace's encrypted secrets file; and the sshd host key hook
// (sshagent/ide_keys.h), so `create` and `wipe` give the guest's sshd a new identity; and the
// browser profile hook, so `wipe-home` and `wipe` destroy the kept browser profile and its key.
inline Result<std::unique_ptr<Store>> OpenStore(Cli& cli) {
  StoreOptions options;
  options.resolve_image = CatalogImageResolver(Env::Default(), cli.StoreRoot());
  options.make_ssh_key =
      sshagent::MakeWorkspaceKeyHook(cli.StoreRoot() + "/" + std::string(layout::kKeysDir));
  // The guest sshd's host key (IDE access): new at `create` and `wipe`.
  options.make_sshd_host_key = [](const std::string&, const std::string& dir) {
    return sshagent::MakeSshdHostKey(dir);
  };
  // The browser's kept profile (browser/profile_disk.h): wipe-home and wipe destroy disk and key.
  options.destroy_browser_profile =
      browser::DestroyProfileHook(cli.StoreRoot() + "/" + std::string(layout::kKeysDir));
  // `fork --with-credentials`: API keys re-encrypted for the fork; never a subscription login.
  options.copy_credentials = [keys = cli.StoreRoot() + "/" + std::string(layout::kKeysDir)](
                                 const std::string& source, const std::string& source_dir,
                                 const std::string& name, const std::string& dir) -> Status {
    auto copied = vault::CopyCredentialsForFork(
        {keys, source_dir + "/" + vault::kSecretsFile, source},
        {keys, dir + "/" + vault::kSecretsFile, name});
    if (!copied.ok()) return copied.error();
    return OkStatus();
  };
  return Store::Open(cli.StoreRoot(), std::move(options));
}

// `-v HOST[:GUEST][:ro]` with a relative HOST (`-v .`, `-v src`): HOST made absolute against the
// current directory (lexically normalised, no trailing slash) before ParseVolumeSpec checks it.
inline std::string AbsoluteVolumeHost(const std::string& spec) {
  if (spec.empty() || spec[0] == '/') return spec;
  size_t colon = spec.find(':');
  std::string host = spec.substr(0, colon);
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(host, ec);
  if (ec) return spec;
  std::string norm = abs.lexically_normal().string();
  while (norm.size() > 1 && norm.back() == '/') norm.pop_back();
  return norm + (colon == std::string::npos ? "" : spec.substr(colon));
}

inline nlohmann::json CheckpointJson(const CheckpointInfo& c) {
  return {{"id", c.record.id},
          {"created", FormatUtcIso8601(c.record.created)},
          {"automatic", c.record.automatic},
          {"system_layer", c.record.system},
          {"home_layer", c.record.home},
          {"allocated_bytes", c.allocated}};
}

inline std::string CountNoun(size_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace cloister::cli

namespace cloister::cli {

// The shape of every destructive verb: NAME, -f/--yes, a confirmation naming what goes (built
// from the workspace's current config), then the store call. With `force_help` (rm), -f is
// --force (what `force_help` says, and no question; `run` is told) and -y/--yes only skips the
// question.
inline void AddDisposalVerb(
    CLI::App& app, Cli& cli, const std::string& verb, const std::string& description,
    std::function<std::string(const WorkspaceConfig&)> prompt,
    std::function<Status(Store&, const std::string&, bool force)> run, std::string done,
    const std::string& force_help = "") {
  auto* cmd = app.add_subcommand(verb, description);
  auto name = std::make_shared<std::string>();
  auto yes = std::make_shared<bool>(false);
  auto force = std::make_shared<bool>(false);
  cmd->add_option("NAME", *name, "Workspace name")->required();
  if (force_help.empty()) {
    cmd->add_flag("-f,--yes", *yes, "Do not ask for confirmation");
  } else {
    cmd->add_flag("-y,--yes", *yes, "Do not ask for confirmation");
    cmd->add_flag("-f,--force", *force, force_help);
  }
  cmd->callback([&cli, name, yes, force, prompt, run, done] {
    if (*force) *yes = true;
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
    Result<WorkspaceConfig> c = (*store)->LoadConfig(*name);
    std::string question;
    if (c.ok()) {
      question = prompt(*c);
    } else if (c.error().code() == ErrorCode::kNotFound && !*yes) {
      cli.Fail(c.error());
      return;
    } else {
      question = prompt(WorkspaceConfig{});  // damaged config: still ask
    }
    Status ok = cli.Confirm(question, *yes);
    if (!ok.ok()) {
      cli.Fail(ok.error());
      return;
    }
    Status s = run(**store, *name, *force);
    if (!s.ok()) {
      cli.Fail(s.error());
      return;
    }
    std::string msg = done;
    size_t pos = msg.find("%s");
    if (pos != std::string::npos) msg.replace(pos, 2, *name);
    cli.out() << msg << "\n";
  });
}

}  // namespace cloister::cli

// cloister ssh-confirm NAME: the terminal that answers the workspace's SSH signature requests
// when its policy asks for confirmation (`cloister ssh-policy NAME --confirm on`).
//
// Connects to the running workspace's supervisor (control op "ssh-confirm", vm/ssh_confirm.h),
// then for each signature the guest asks for prints the question on stderr and reads y/N from
// stdin (the user's terminal). Runs until the VM stops (exit 0), stdin ends (the pending question
// is refused), or Ctrl-C. With no listener, every signature is refused (fail closed).
#include <chrono>

#include "base/strings.h"
#include "base/terminal_text.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "lifecycle/lifecycle.h"
#include "store/store.h"
#include "supervisor/control.h"
#include "supervisor/ssh_confirm.h"

namespace cloister::cli {
namespace {

using Clock = std::chrono::steady_clock;

// SECURITY: the text comes from the guest (via the supervisor): no control characters reach the
// terminal (base/terminal_text.h), at most 200 bytes of it.
std::string Printable(const std::string& s) { return TerminalSafe(std::string_view(s).substr(0, 200)); }

Status Listen(Cli& cli, const std::string& name) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
  ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(name));
  (void)config;
  // Listening needs a live supervisor, which decides by the lifecycle table; nobody on the
  // socket is the table's refusal for a stopped workspace.
  std::string socket = store->Paths(name).supervisor_socket;
  Result<int> fd = vm::ConnectUnix(socket);
  if (!fd.ok()) {
    return lifecycle::Refusal(lifecycle::State::kStopped, lifecycle::Action::kSshConfirm, name);
  }
  vm::LineConn conn(*fd);
  RETURN_IF_ERROR(conn.Send({{"op", vm::kSshConfirmOp}}));
  ASSIGN_OR_RETURN(nlohmann::json hello, conn.Read(Clock::now() + std::chrono::seconds(10)));
  if (auto ok = hello.find("ok"); ok == hello.end() || !ok->is_boolean() || !ok->get<bool>()) {
    return vm::ErrorFromReply(hello);
  }
  if (auto c = hello.find("confirm"); c == hello.end() || !c->is_boolean() || !c->get<bool>()) {
    return Error(ErrorCode::kFailedPrecondition,
                 "confirmation of SSH signatures is off for " + name,
                 "`cloister ssh-policy " + name + " --confirm on`, then `cloister reboot " + name + "`");
  }
  cli.err() << "cloister: answering SSH signature requests of " << name << " (key "
            << Printable(vm::JsonString(hello, "fingerprint")) << "); Ctrl-C to stop\n"
            << std::flush;
  while (true) {
    Result<nlohmann::json> q = conn.Read(Clock::now() + std::chrono::hours(24));
    if (!q.ok()) {
      if (q.error().message().find("no answer in time") != std::string::npos) continue;
      cli.err() << "cloister: " << name << " stopped; no more requests\n";
      return OkStatus();
    }
    if (vm::JsonString(*q, "op") != "confirm") continue;
    auto id = q->find("id");
    if (id == q->end() || !id->is_number_unsigned()) continue;
    cli.err() << "\a" << name << " asks to " << Printable(vm::JsonString(*q, "request"))
              << " with its key " << Printable(vm::JsonString(*q, "fingerprint")) << ". Allow? [y/N] "
              << std::flush;
    std::string answer;
    bool got = static_cast<bool>(std::getline(cli.in(), answer));
    answer = ToLower(Trim(answer));
    bool allow = got && (answer == "y" || answer == "yes");
    RETURN_IF_ERROR(conn.Send({{"id", *id}, {"allow", allow}}));
    cli.err() << (allow ? "allowed\n" : "refused\n") << std::flush;
    if (!got) {
      return Error(ErrorCode::kCancelled, "stdin ended: refused the request and stopped listening",
                   "run `cloister ssh-confirm " + name + "` in a terminal");
    }
  }
}

}  // namespace

void AddSshConfirmCommand(CLI::App& app, Cli& cli) {
  auto name = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "ssh-confirm",
      "Answer a running workspace's SSH signature requests on this terminal (for workspaces "
      "with `cloister ssh-policy NAME --confirm on`; unanswered requests are refused)");
  cmd->add_option("NAME", *name, "Workspace name")->required();
  cmd->callback([&cli, name] {
    if (Status st = Listen(cli, *name); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli

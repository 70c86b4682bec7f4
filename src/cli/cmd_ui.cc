// `cloister ui [--port N] [--open] [--json]`: the local dashboard (src/ui). Serves on 127.0.0.1
// (a random port unless --port), prints the URL with its one-run token (Jupyter style), and runs
// until Ctrl-C / SIGTERM. Everything the page shows or does is a CLI verb (cli/ui_backend.h).
#include <signal.h>

#include <thread>

#include "base/subprocess.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/ui_backend.h"
#include "ui/server.h"

namespace cloister::cli {

void AddUiCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "ui",
      "Serve the local dashboard (workspaces, live traffic, leaks, residue audits, actions) on "
      "127.0.0.1 until Ctrl-C; prints the URL with its access token");
  struct Opts {
    uint16_t port = 0;
    bool open = false;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--port", o->port, "Port on 127.0.0.1 (default: a random free one)");
  cmd->add_flag("--open", o->open, "Open the URL in the desktop's browser (xdg-open)");
  cmd->add_flag("--json", o->json, "Print {\"url\", \"port\"} as JSON instead of a sentence");
  cmd->callback([&cli, o] {
    // Block the stop signals before any thread starts, so only sigwait below receives them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    UiBackendOptions bo;
    bo.store_root = cli.StoreRoot();
    auto backend = MakeUiBackend(bo);
    ui::ServerOptions so;
    so.port = o->port;
    auto server = ui::Server::Start(*backend, so);
    if (!server.ok()) return (void)cli.Fail(server.error());
    const std::string url = (*server)->Url();
    if (o->json) {
      cli.out() << nlohmann::json{{"url", url}, {"port", (*server)->port()}}.dump() << std::endl;
    } else {
      cli.out() << "cloister ui: serving " << bo.store_root << " on 127.0.0.1 only. Open:\n  "
                << url << "\n(the token is this run's; Ctrl-C stops)" << std::endl;
    }
    if (o->open) {
      if (ProgramExists("xdg-open")) {
        RunOptions ro;
        ro.timeout = std::chrono::seconds(30);
        auto r = RunProcess({"xdg-open", url}, ro);
        if (!r.ok() || r->exit_code != 0) cli.err() << "cloister: xdg-open failed; open the URL by hand\n";
      } else {
        cli.err() << "cloister: no xdg-open here; open the URL by hand\n";
      }
    }
    int sig = 0;
    sigwait(&stop, &sig);
    (*server)->Stop();
    pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  });
}

}  // namespace cloister::cli

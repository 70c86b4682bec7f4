// `cloister ui [--port N] [--open] [--json]`: the local dashboard (src/ui). Serves on 127.0.0.1
// (a random port unless --port) under a per-run name, <random>.localhost, prints the URL with its
// one-use token (Jupyter style), and runs until Ctrl-C / SIGTERM. `--open` hands the desktop's
// browser a 0600 file that redirects to the URL (ui/open_page.h), never the URL itself: the token
// is in no process's argv or environment. Everything the page shows or does is a CLI verb
// (cli/ui_backend.h).
#include <signal.h>

#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/subprocess.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/ui_backend.h"
#include "ui/open_page.h"
#include "ui/server.h"

namespace cloister::cli {

void AddUiCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "ui",
      "Serve the local dashboard (workspaces, live traffic, leaks, residue audits, actions) on "
      "127.0.0.1 until Ctrl-C; prints the URL with its one-use access token (on a per-run "
      "<random>.localhost name, so its cookie goes to no other local web app). Only this user's "
      "connections are served");
  struct Opts {
    uint16_t port = 0;
    bool open = false;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--port", o->port, "Port on 127.0.0.1 (default: a random free one)");
  cmd->add_flag("--open", o->open,
                "Open the dashboard in the desktop's browser (xdg-open on a private file that "
                "redirects to the URL: the token never appears in a command line)");
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
    // The page --open writes goes once the token bought its session.
    auto page = std::make_shared<std::optional<ui::OpenPage>>();
    auto page_mu = std::make_shared<std::mutex>();
    so.on_session = [page, page_mu] {
      std::lock_guard<std::mutex> l(*page_mu);
      if (*page) (*page)->Remove();
    };
    auto server = ui::Server::Start(*backend, so);
    if (!server.ok()) return (void)cli.Fail(server.error());
    const std::string url = (*server)->Url();
    if (o->json) {
      cli.out() << nlohmann::json{{"url", url}, {"port", (*server)->port()}}.dump() << std::endl;
    } else {
      cli.out() << "cloister ui: serving " << bo.store_root << " on 127.0.0.1 only. Open:\n  "
                << url << "\n(the link works once, in one browser; Ctrl-C stops)" << std::endl;
    }
    if (o->open) {
      // SECURITY: xdg-open (and the browser it starts) get a path, never the URL: every local
      // user reads a process's argv.
      std::string path;
      {
        std::lock_guard<std::mutex> l(*page_mu);
        auto written = ui::OpenPage::Write(url);
        if (written.ok()) {
          page->emplace(std::move(written).value());
          path = (**page).path();
        } else {
          cli.err() << "cloister: " << written.error().message() << "; open the URL by hand\n";
        }
      }
      if (!path.empty() && ProgramExists("xdg-open")) {
        RunOptions ro;
        ro.timeout = std::chrono::seconds(30);
        auto r = RunProcess({"xdg-open", path}, ro);
        if (!r.ok() || r->exit_code != 0) cli.err() << "cloister: xdg-open failed; open the URL by hand\n";
      } else if (!path.empty()) {
        cli.err() << "cloister: no xdg-open here; open the URL by hand\n";
      }
    }
    int sig = 0;
    sigwait(&stop, &sig);
    (*server)->Stop();
    {
      std::lock_guard<std::mutex> l(*page_mu);
      if (*page) (*page)->Remove();
    }
    pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  });
}

}  // namespace cloister::cli

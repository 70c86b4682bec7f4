#include "cli/port_watch.h"

#include <unistd.h>

#include "base/json_util.h"
#include "supervisor/control.h"
#include "supervisor/launcher.h"
#include "supervisor/workspace.h"
#include "supervisor/ports.h"

namespace cloister::cli {

using nlohmann::json;

json LiveForwards(const std::string& socket) {
  auto reply = vm::ControlRequest(socket, {{"op", vm::kPortsControlOp}, {"action", "ls"}},
                                  std::chrono::seconds(5));
  if (!reply.ok()) return json::array();
  auto it = reply->find("ports");
  return it != reply->end() && it->is_array() ? *it : json::array();
}

std::string ForwardLine(const json& f) {
  std::string ip = vm::JsonString(f, "host_ip");
  if (ip.find(':') != std::string::npos) ip = "[" + ip + "]";
  return ip + ":" + std::to_string(JsonInt<int>(f, "host_port", 0)) + " -> guest port " +
         std::to_string(JsonInt<int>(f, "guest_port", 0)) + " (" + vm::JsonString(f, "origin") + ")";
}

AutoPortAnnouncer::AutoPortAnnouncer(std::string workspace, std::string socket, std::ostream& out,
                                     bool raw_terminal, std::chrono::milliseconds every)
    : workspace_(std::move(workspace)), socket_(std::move(socket)), out_(out), raw_(raw_terminal),
      every_(every) {
  thread_ = std::thread([this] { Loop(); });
}

AutoPortAnnouncer::~AutoPortAnnouncer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AutoPortAnnouncer::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    json forwards = LiveForwards(socket_);
    l.lock();
    if (stop_) break;
    for (const json& f : forwards) {
      if (!f.is_object() || vm::JsonString(f, "origin") != "auto") continue;
      std::string line = ForwardLine(f);
      if (!shown_.insert(line).second) continue;
      // The host picked this port (never the guest's number): the user learns it here.
      out_ << "cloister: " << workspace_ << ": published " << line << (raw_ ? "\r\n" : "\n")
           << std::flush;
    }
    cv_.wait_for(l, every_, [&] { return stop_; });
  }
}

std::unique_ptr<AutoPortAnnouncer> AnnounceAutoPorts(Store& store, const std::string& name,
                                                     std::ostream& out) {
  auto config = store.LoadConfig(name);
  if (!config.ok()) return nullptr;
  auto ports = vm::PortsConfigFromConfig(*config);
  if (!ports.ok() || !ports->auto_ports) return nullptr;
  return std::make_unique<AutoPortAnnouncer>(name, vm::RunPathsFor(store, name).supervisor_socket,
                                             out, isatty(STDERR_FILENO) == 1);
}

}  // namespace cloister::cli

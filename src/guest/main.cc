// cloister-agent entry point (static binary on the metadata disk). See guest/agent.h.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "guest/agent.h"
#include "guest/ssh_connect.h"

int main(int argc, char** argv) {
  // ssh's ProxyCommand (guest/ssh_connect.h), run by the guest user, not the boot hook.
  if (argc >= 2 && std::string(argv[1]) == "ssh-connect") {
    return cloister::guest::RunSshConnect(std::vector<std::string>(argv + 2, argv + argc));
  }
  cloister::guest::AgentOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cloister-agent: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--meta") {
      o.meta_dir = next();
    } else if (a == "--config") {
      o.config_path = next();
    } else if (a == "--channel-socket") {
      o.channel_path = next();
    } else if (a == "--no-setup") {
      o.setup = false;
    } else if (a == "--resolv-conf") {
      o.resolv_conf = next();
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: cloister-agent [--meta DIR] [--config FILE] [--channel-socket PATH] [--no-setup]\n"
          "                      [--resolv-conf PATH]\n"
          "       cloister-agent ssh-connect [--proxy-port N] HOST PORT   (ssh ProxyCommand)\n"
          "Guest agent of a cloister workspace; started by the image's boot hook.\n");
      return 0;
    } else {
      std::fprintf(stderr, "cloister-agent: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  return cloister::guest::RunAgent(o);
}

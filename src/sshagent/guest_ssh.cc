#include "sshagent/guest_ssh.h"

namespace cloister::sshagent {

std::string GuestSshConfig(const std::string& connect_path, const std::string& agent_socket) {
  std::string out =
      "# Written by cloister at every boot. The guest has no route out: ssh reaches servers\n"
      "# through the egress proxy's CONNECT tunnel (allowed hosts and ports are the host's\n"
      "# decision), and signs with the workspace's host-side agent.\n"
      "Host *\n"
      "  ProxyCommand " + connect_path + " %h %p\n";
  if (!agent_socket.empty()) out += "  IdentityAgent " + agent_socket + "\n";
  return out;
}

}  // namespace cloister::sshagent

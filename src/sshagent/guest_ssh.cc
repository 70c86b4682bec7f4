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

std::string GuestConnectScript(uint16_t proxy_port) {
  return R"(#!/usr/bin/python3
# cloister: ssh ProxyCommand through the egress proxy (HTTP CONNECT). Written at every boot.
import os, select, socket, sys

def main():
    if len(sys.argv) != 3:
        sys.exit('usage: ssh-connect HOST PORT')
    host, port = sys.argv[1], sys.argv[2]
    if not port.isdigit() or any(c in host for c in ' \r\n'):
        sys.exit('ssh-connect: bad host or port')
    s = socket.create_connection(('127.0.0.1', )" + std::to_string(proxy_port) + R"())
    target = '[%s]:%s' % (host, port) if ':' in host else '%s:%s' % (host, port)
    s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (target, target)).encode())
    head = b''
    while b'\r\n\r\n' not in head:
        b = s.recv(1)
        if not b or len(head) > 16384:
            sys.exit('ssh-connect: the proxy closed the connection')
        head += b
    status = head.split(b'\r\n', 1)[0].decode('latin-1')
    if status.split(' ')[1:2] != ['200']:
        sys.exit('ssh-connect: proxy refused %s: %s' % (target, status))
    fds = {0: s.fileno(), s.fileno(): 1}
    open_in = {0, s.fileno()}
    while open_in:
        r, _, _ = select.select(list(open_in), [], [])
        for fd in r:
            data = os.read(fd, 65536)
            if not data:
                open_in.discard(fd)
                if fd == 0:
                    s.shutdown(socket.SHUT_WR)
                else:
                    os.close(1)
                continue
            out = fds[fd]
            while data:
                n = os.write(out, data)
                data = data[n:]

main()
)";
}

}  // namespace cloister::sshagent

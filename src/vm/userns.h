// User namespaces held by an fd (issue 38): the one QEMU enters when the CLI runs as root (guest
// uid 1000 is QEMU's own uid there) and the ones that idmap a shared folder's mount (its owner
// seen as QEMU's uid). Made by a short-lived child whose maps this (root) process writes; the fd
// keeps the namespace alive after the child exits.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/result.h"

namespace cloister::vm {

// An O_RDONLY|O_CLOEXEC fd of a new user namespace with these /proc/PID/uid_map and gid_map
// contents ("INSIDE OUTSIDE COUNT\n" lines). Needs CAP_SETUID/CAP_SETGID for maps other than
// the caller's own ids. The caller closes it.
Result<int> MakeUserNamespace(const std::string& uid_map, const std::string& gid_map);

// Whether the filesystem holding the directory `dir_fd` accepts an idmapped mount: a detached
// clone of it is idmapped with `userns_fd` and dropped (nothing is attached). Root only.
Status CheckIdmappable(int dir_fd, int userns_fd, const std::string& path);

}  // namespace cloister::vm

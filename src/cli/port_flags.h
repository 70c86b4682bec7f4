// The -p/--publish and --auto-ports flags of `create` and `run` (defined in cmd_port.cc): parsed
// before the workspace is made, stored in its config.json "ports" (supervisor/ports.h) after.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "base/result.h"
#include "store/store.h"
#include "supervisor/ports.h"

namespace cloister::cli {

// Parses each -p SPEC; a non-loopback HOST_IP is allowed (spelled out) and warned about on `warn`.
Result<vm::PortsConfig> ParsePublishFlags(const std::vector<std::string>& publish, bool auto_ports,
                                          std::ostream& warn);

// Writes `ports` into NAME's config (nothing to write: OK). The workspace was just created.
Status StorePublishFlags(Store& store, const std::string& name, const vm::PortsConfig& ports);

}  // namespace cloister::cli

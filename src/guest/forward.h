// The guest agent's forwarded listeners (config.json "forwards": the proxy on 127.0.0.1:3128, the
// ssh-agent socket): each connection a guest client makes is handed to a host channel service,
// bridged to one stream of the current channel session.
#pragma once

#include <functional>
#include <string>

#include "channel/mux.h"

namespace cloister::guest {

// Hands the accepted client connection `conn` (owned from now on) to the host service `service`
// over `mux` (null: no host connected). Past the channel's stream cap the connection waits for a
// stream (channel/mux.h). When no stream can be had (no host, the channel closed, too many
// waiting) the client's connection is reset, never closed cleanly without a byte: a proxy client
// reads a clean close before its CONNECT answer as "still waiting" (npm 9's proxy agent waits for
// its whole fetch timeout), a reset as an error it reports or retries at once.
void ForwardConnection(channel::Mux* mux, const std::string& service, int conn,
                       const std::function<void(const std::string&)>& log);

}  // namespace cloister::guest

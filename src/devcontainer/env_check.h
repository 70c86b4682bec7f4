// The workspace environment a devcontainer.json asks for (containerEnv, and a Feature's
// containerEnv baked into its image), checked before it is recorded and again at every boot.
//
// Refused, each with what to do instead:
//   - a name that is not [A-Za-z_][A-Za-z0-9_]* (at most 256 bytes);
//   - a name cloister sets itself: the proxy settings (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY,
//     NO_PROXY in either case), the CA bundle variables (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
//     REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO), npm's registry settings, and the
//     variables that carry credential placeholders (each credential kind's, vault/credential.h):
//     the guest's egress and its placeholders are cloister's;
//   - a value that substitutes from the host, `${localEnv:...}` or `${localWorkspaceFolder...}`:
//     cloister never copies the host's environment into the guest; any other `${...}` variable,
//     which cloister does not substitute;
//   - a value that looks like a credential (vault/credential_shape.h): the guest holds
//     placeholders only; the hint is `cloister cred add`.
//
// SECURITY: this is what keeps a repository's devcontainer.json (which an agent may have written)
// from putting a real key, or the host's environment, into the guest, or from steering the
// guest's traffic around the proxy.
#pragma once

#include <map>
#include <string>

#include "base/result.h"

namespace cloister::devcontainer {

// `where` names the map in errors ("devcontainer.json containerEnv").
Status CheckContainerEnv(const std::map<std::string, std::string>& env, const std::string& where);

}  // namespace cloister::devcontainer

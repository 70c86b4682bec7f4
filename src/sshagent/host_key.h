// SSH server host keys as the agent meets them in session-bind@openssh.com (OpenSSH's
// PROTOCOL.agent): a public key blob, and a signature by that key over the session identifier.
//
// Supported host key types: ssh-ed25519, ecdsa-sha2-nistp256/384/521, and ssh-rsa keys with
// rsa-sha2-256/512 signatures (never SHA-1 "ssh-rsa" signatures). Certificates (*-cert-v01) and
// security-key types are refused: the agent cannot check a CA it does not know.
//
// SECURITY: blobs and signatures come from the guest (the guest's ssh relays what the server
// sent). Everything is parsed with the bounded SshReader and must be consumed exactly.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::sshagent {

inline constexpr size_t kMaxHostKeyBlob = 16 * 1024;

// The key type name a blob starts with ("ssh-ed25519", ...), if the blob is a supported,
// well-formed host key.
Result<std::string> HostKeyType(std::string_view key_blob);

// OK only if `signature_blob` (string alg, string sig) is a valid signature of `data` by the host
// key `key_blob`.
Status VerifyHostKeySignature(std::string_view key_blob, std::string_view data,
                              std::string_view signature_blob);

// "ssh-ed25519 AAAA..." (known_hosts form, no host, no comment) and back.
Result<std::string> HostKeyLine(std::string_view key_blob);
Result<std::string> HostKeyBlobFromLine(std::string_view line);
// "SHA256:..." as ssh-keygen -l prints it.
std::string HostKeyFingerprint(std::string_view key_blob);

}  // namespace cloister::sshagent

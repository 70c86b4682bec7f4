// The sign-only SSH agent: one workspace key, two requests, nothing else.
//
// Shape (after Chromium's syscall broker): the holder of the private key answers an allowlisted
// pair of requests and refuses everything else.
//   SSH_AGENTC_REQUEST_IDENTITIES -> the workspace's one public key
//   SSH_AGENTC_EXTENSION "session-bind@openssh.com"
//                                 -> SUCCESS once per connection, if the server host key's
//                                    signature over the session id verifies, the binding is not
//                                    for forwarding, and the host binder names the policy host that
//                                    key is pinned for (sshagent/host_pins.h)
//   SSH_AGENTC_SIGN_REQUEST       -> an ssh-ed25519 signature, only for our key, only over an SSH
//                                    user-authentication request of the connection's bound session
//                                    (same session id; for publickey-hostbound, same host key) or
//                                    an SSHSIG blob (ssh-keygen -Y, git commit signing), only with
//                                    known flags, and only if the optional confirmation callback
//                                    says yes
//   anything else (add, remove, remove-all, lock/unlock, smartcard, other extensions, unknown)
//                                 -> SSH_AGENT_FAILURE
// There is no path to the host's own agent and no way to load another key: the agent holds
// exactly the key it was constructed with.
//
// Services take a connected fd (docs/design.md): ServeAgentConnection() serves one stream, be it a
// channel stream from the guest, a unix socket in tests, or a loopback TCP socket.
//
// SECURITY: every byte read here comes from the guest. Messages are capped (kMaxAgentMessage),
// parsed with the bounded SshReader, must be consumed exactly, and any malformed message gets
// SSH_AGENT_FAILURE. A length prefix over the cap ends the connection after a FAILURE reply.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "base/result.h"
#include "sshagent/ed25519_key.h"

namespace cloister::sshagent {

// Message numbers (draft-miller-ssh-agent).
inline constexpr uint8_t kAgentFailure = 5;
inline constexpr uint8_t kAgentSuccess = 6;
inline constexpr uint8_t kAgentcRequestIdentities = 11;
inline constexpr uint8_t kAgentIdentitiesAnswer = 12;
inline constexpr uint8_t kAgentcSignRequest = 13;
inline constexpr uint8_t kAgentSignResponse = 14;
inline constexpr uint8_t kAgentcAddIdentity = 17;
inline constexpr uint8_t kAgentcRemoveIdentity = 18;
inline constexpr uint8_t kAgentcRemoveAllIdentities = 19;
inline constexpr uint8_t kAgentcAddSmartcardKey = 20;
inline constexpr uint8_t kAgentcRemoveSmartcardKey = 21;
inline constexpr uint8_t kAgentcLock = 22;
inline constexpr uint8_t kAgentcUnlock = 23;
inline constexpr uint8_t kAgentcAddIdConstrained = 25;
inline constexpr uint8_t kAgentcAddSmartcardKeyConstrained = 26;
inline constexpr uint8_t kAgentcExtension = 27;

// Sign-request flags. The RSA SHA-2 flags select the hash for RSA keys; the protocol lets a
// client send them with any key, and for Ed25519 they change nothing, so they are accepted.
// Any other bit (including the obsolete SSH_AGENT_OLD_SIGNATURE, 1) is refused.
inline constexpr uint32_t kAgentRsaSha2_256 = 0x02;
inline constexpr uint32_t kAgentRsaSha2_512 = 0x04;
inline constexpr uint32_t kAgentAllowedFlags = kAgentRsaSha2_256 | kAgentRsaSha2_512;

// Largest message (after the 4-byte length) the agent reads; OpenSSH's own agent uses 256 KiB.
inline constexpr size_t kMaxAgentMessage = 256 * 1024;

// What a sign request is for, shown to the user by the confirmation callback.
struct SignRequestInfo {
  enum class Kind { kUserAuth, kSshSig };
  Kind kind = Kind::kUserAuth;
  std::string user;        // kUserAuth: the remote user name
  std::string host;        // kUserAuth: the policy host the session is bound to (set by the agent)
  std::string session_id;  // kUserAuth: the SSH session identifier the request signs
  std::string host_key;    // kUserAuth, publickey-hostbound only: the server host key blob
  std::string sig_namespace;  // kSshSig: e.g. "git", "file"
  uint32_t flags = 0;
  // One line for the terminal, e.g. `SSH login as "git" to github.com`.
  std::string Describe() const;
};

// Returns true to allow the signature. Called on the serving thread; must be thread-safe if one
// agent serves several connections. The supervisor implements it on the user's terminal.
using ConfirmFn = std::function<bool(const SignRequestInfo&)>;

// Names the policy host a server host key (blob) is pinned for, pinning it on first use; an error
// refuses the binding. Called on the serving thread, may block (a first use asks the host for its
// keys); must be thread-safe. No binder: every binding, so every user-authentication, is refused.
using HostBinder = std::function<Result<std::string>(std::string_view host_key_blob)>;

// One agent connection's session binding (OpenSSH's PROTOCOL.agent: a connection is bound by
// the client once, right after key exchange). Owned by the connection (AgentConnection).
struct AgentSession {
  bool bound = false;
  std::string host_key;    // blob
  std::string session_id;
  std::string host;        // the policy host the binder named
};

class SignOnlyAgent {
 public:
  // `comment` is what `ssh-add -L` shows after the key (e.g. "cloister:NAME").
  SignOnlyAgent(Ed25519Key key, std::string comment, ConfirmFn confirm = nullptr,
                HostBinder binder = nullptr);

  // Handles one message body (type byte + payload, without the length prefix) of the connection
  // whose binding is `*session`, and returns the reply body. Never fails: anything it will not do
  // is answered with SSH_AGENT_FAILURE.
  std::string Handle(std::string_view message, AgentSession* session) const;
  // The same on a fresh, unbound connection.
  std::string Handle(std::string_view message) const {
    AgentSession fresh;
    return Handle(message, &fresh);
  }

  const Ed25519Key& key() const { return key_; }
  const std::string& comment() const { return comment_; }

  // Counters for tests and status output.
  uint64_t signatures() const;
  uint64_t refusals() const;

 private:
  Result<std::string> HandleSign(std::string_view payload, const AgentSession& session) const;
  Status HandleBind(std::string_view payload, AgentSession* session) const;
  std::string Refuse() const;

  Ed25519Key key_;
  std::string key_blob_;
  std::string comment_;
  ConfirmFn confirm_;
  HostBinder binder_;
  mutable std::mutex mu_;
  mutable uint64_t signatures_ = 0;  // guarded by mu_
  mutable uint64_t refusals_ = 0;    // guarded by mu_
};

// Checks what a sign request's data is and that it names our key (binding is checked by the
// agent, not here). Exposed for tests and fuzzing.
// SECURITY: parses guest bytes with bounded reads.
Result<SignRequestInfo> ClassifySignData(std::string_view data, std::string_view our_key_blob);

// Incremental framing over a byte stream: feed bytes as they arrive, get the bytes to send back.
// Buffers at most one message (kMaxAgentMessage + 4 bytes).
class AgentConnection {
 public:
  explicit AgentConnection(const SignOnlyAgent& agent) : agent_(agent) {}
  // Returns the reply bytes (zero or more length-prefixed replies) for the complete messages in
  // the stream so far. An error (oversized or empty length prefix) means: send `*reply` (a
  // FAILURE) if non-empty, then close the connection.
  Result<std::string> Consume(std::string_view bytes, std::string* fatal_reply);
  // True if a partial message is buffered (EOF now would cut a message).
  bool partial() const { return !buffer_.empty(); }

 private:
  const SignOnlyAgent& agent_;
  AgentSession session_;
  std::string buffer_;
};

// Serves one connected stream fd until the peer closes it (OK) or sends something that ends the
// connection (error). Blocks. Does not close `fd`; the caller owns it.
Status ServeAgentConnection(int fd, const SignOnlyAgent& agent);

}  // namespace cloister::sshagent

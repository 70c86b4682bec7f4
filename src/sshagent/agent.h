// The sign-only SSH agent: one workspace key, two requests, nothing else.
//
// Shape (after Chromium's syscall broker): the holder of the private key answers an allowlisted
// pair of requests and refuses everything else.
//   SSH_AGENTC_REQUEST_IDENTITIES -> the workspace's one public key
//   SSH_AGENTC_SIGN_REQUEST       -> an ssh-ed25519 signature, only for our key, only over an SSH
//                                    user-authentication request or an SSHSIG blob (ssh-keygen -Y,
//                                    git commit signing), only with known flags, and only if the
//                                    optional confirmation callback says yes
//   anything else (add, remove, remove-all, lock/unlock, smartcard, extensions, unknown)
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
  std::string sig_namespace;  // kSshSig: e.g. "git", "file"
  uint32_t flags = 0;
  std::string Describe() const;  // one line for the terminal, e.g. "SSH login as git"
};

// Returns true to allow the signature. Called on the serving thread; must be thread-safe if one
// agent serves several connections. The supervisor implements it on the user's terminal.
using ConfirmFn = std::function<bool(const SignRequestInfo&)>;

class SignOnlyAgent {
 public:
  // `comment` is what `ssh-add -L` shows after the key (e.g. "cloister:NAME").
  SignOnlyAgent(Ed25519Key key, std::string comment, ConfirmFn confirm = nullptr);

  // Handles one message body (type byte + payload, without the length prefix) and returns the
  // reply body. Never fails: anything it will not do is answered with SSH_AGENT_FAILURE.
  std::string Handle(std::string_view message) const;

  const Ed25519Key& key() const { return key_; }
  const std::string& comment() const { return comment_; }

  // Counters for tests and status output.
  uint64_t signatures() const;
  uint64_t refusals() const;

 private:
  Result<std::string> HandleSign(std::string_view payload) const;
  std::string Refuse() const;

  Ed25519Key key_;
  std::string key_blob_;
  std::string comment_;
  ConfirmFn confirm_;
  mutable std::mutex mu_;
  mutable uint64_t signatures_ = 0;  // guarded by mu_
  mutable uint64_t refusals_ = 0;    // guarded by mu_
};

// Checks what a sign request's data is and that it names our key. Exposed for tests and fuzzing.
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
  std::string buffer_;
};

// Serves one connected stream fd until the peer closes it (OK) or sends something that ends the
// connection (error). Blocks. Does not close `fd`; the caller owns it.
Status ServeAgentConnection(int fd, const SignOnlyAgent& agent);

}  // namespace cloister::sshagent

#include "sshagent/agent.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "sshagent/host_key.h"
#include "sshagent/wire.h"

namespace cloister::sshagent {
namespace {

constexpr uint8_t kMsgUserAuthRequest = 50;  // SSH2_MSG_USERAUTH_REQUEST
constexpr std::string_view kSshSigMagic = "SSHSIG";
constexpr size_t kMaxSessionId = 64;         // SHA-512 output
constexpr size_t kMaxName = 1024;
constexpr std::string_view kSessionBind = "session-bind@openssh.com";

std::string Framed(std::string_view body) {
  return SshWriter().Uint32(static_cast<uint32_t>(body.size())).Raw(body).Take();
}

bool PrintableName(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    // MSG_NOSIGNAL: a guest that hangs up must not SIGPIPE the supervisor.
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("ssh-agent: write", errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

}  // namespace

std::string SignRequestInfo::Describe() const {
  // SECURITY: the names come from the guest; ClassifySignData admits printable ASCII only, and
  // they are cut here so a question always fits on one terminal line.
  auto cut = [](const std::string& s) { return s.size() <= 64 ? s : s.substr(0, 61) + "..."; };
  if (kind == Kind::kSshSig) {
    return "sign data (ssh-keygen -Y sign, namespace \"" + cut(sig_namespace) + "\")";
  }
  return "SSH login as \"" + cut(user) + "\"" + (host.empty() ? "" : " to " + cut(host));
}

SignOnlyAgent::SignOnlyAgent(Ed25519Key key, std::string comment, ConfirmFn confirm,
                             HostBinder binder)
    : key_(std::move(key)),
      comment_(std::move(comment)),
      confirm_(std::move(confirm)),
      binder_(std::move(binder)) {
  key_blob_ = key_.PublicKeyBlob();
}

uint64_t SignOnlyAgent::signatures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signatures_;
}

uint64_t SignOnlyAgent::refusals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusals_;
}

std::string SignOnlyAgent::Refuse() const {
  std::lock_guard<std::mutex> lock(mu_);
  ++refusals_;
  return std::string(1, static_cast<char>(kAgentFailure));
}

Result<SignRequestInfo> ClassifySignData(std::string_view data, std::string_view our_key_blob) {
  // SECURITY: `data` is chosen by the guest. We sign only the two structures OpenSSH clients
  // produce, and only if they name our key, so the key cannot be used as a general signing oracle.
  SignRequestInfo info;
  if (data.substr(0, kSshSigMagic.size()) == kSshSigMagic) {
    SshReader r(data);
    RETURN_IF_ERROR(r.Raw(kSshSigMagic.size()));
    ASSIGN_OR_RETURN(std::string_view ns, r.String(kMaxName));
    ASSIGN_OR_RETURN(std::string_view reserved, r.String(kMaxName));
    ASSIGN_OR_RETURN(std::string_view hash_alg, r.String(64));
    ASSIGN_OR_RETURN(std::string_view hash, r.String(64));
    RETURN_IF_ERROR(r.ExpectEnd("SSHSIG data"));
    (void)reserved;
    if (ns.empty() || !PrintableName(ns)) return Error(ErrorCode::kCorrupt, "SSHSIG: bad namespace");
    if (!((hash_alg == "sha256" && hash.size() == 32) || (hash_alg == "sha512" && hash.size() == 64))) {
      return Error(ErrorCode::kCorrupt, "SSHSIG: unsupported hash");
    }
    info.kind = SignRequestInfo::Kind::kSshSig;
    info.sig_namespace = std::string(ns);
    return info;
  }
  SshReader r(data);
  ASSIGN_OR_RETURN(std::string_view session_id, r.String(kMaxSessionId));
  if (session_id.empty()) return Error(ErrorCode::kCorrupt, "userauth: empty session id");
  ASSIGN_OR_RETURN(uint8_t msg, r.Byte());
  if (msg != kMsgUserAuthRequest) {
    return Error(ErrorCode::kCorrupt, "data is neither an SSH user-auth request nor SSHSIG");
  }
  ASSIGN_OR_RETURN(std::string_view user, r.String(kMaxName));
  ASSIGN_OR_RETURN(std::string_view service, r.String(kMaxName));
  ASSIGN_OR_RETURN(std::string_view method, r.String(kMaxName));
  ASSIGN_OR_RETURN(bool has_sig, r.Bool());
  ASSIGN_OR_RETURN(std::string_view alg, r.String(kMaxName));
  ASSIGN_OR_RETURN(std::string_view blob, r.String(kMaxName));
  bool hostbound = method == "publickey-hostbound-v00@openssh.com";
  if (service != "ssh-connection" || !(method == "publickey" || hostbound) || !has_sig) {
    return Error(ErrorCode::kCorrupt, "userauth: not a publickey request");
  }
  if (alg != kEd25519KeyType) return Error(ErrorCode::kCorrupt, "userauth: algorithm is not ssh-ed25519");
  if (blob != our_key_blob) return Error(ErrorCode::kCorrupt, "userauth: names another key");
  if (hostbound) {
    ASSIGN_OR_RETURN(std::string_view host_key, r.String(kMaxHostKeyBlob));
    info.host_key = std::string(host_key);
  }
  RETURN_IF_ERROR(r.ExpectEnd("userauth data"));
  if (!PrintableName(user)) return Error(ErrorCode::kCorrupt, "userauth: bad user name");
  info.kind = SignRequestInfo::Kind::kUserAuth;
  info.user = std::string(user);
  info.session_id = std::string(session_id);
  return info;
}

Status SignOnlyAgent::HandleBind(std::string_view payload, AgentSession* session) const {
  // SECURITY: every field is the guest's. The signature proves the session id was signed by the
  // host key (so the guest cannot bind to a key it has no session with); the binder decides
  // whether that key is pinned for a policy host.
  SshReader r(payload);
  ASSIGN_OR_RETURN(std::string_view host_key, r.String(kMaxHostKeyBlob));
  ASSIGN_OR_RETURN(std::string_view session_id, r.String(kMaxSessionId));
  ASSIGN_OR_RETURN(std::string_view signature, r.String(kMaxHostKeyBlob));
  ASSIGN_OR_RETURN(bool forwarding, r.Bool());
  RETURN_IF_ERROR(r.ExpectEnd("session-bind"));
  if (session->bound) {
    return Error(ErrorCode::kFailedPrecondition, "session-bind: the connection is already bound");
  }
  if (forwarding) {
    return Error(ErrorCode::kPermissionDenied, "session-bind: agent forwarding is not offered");
  }
  if (session_id.empty()) return Error(ErrorCode::kCorrupt, "session-bind: empty session id");
  RETURN_IF_ERROR(VerifyHostKeySignature(host_key, session_id, signature));
  if (!binder_) return Error(ErrorCode::kPermissionDenied, "session-bind: no host key is pinned");
  ASSIGN_OR_RETURN(std::string host, binder_(host_key));
  if (host.empty()) return Error(ErrorCode::kPermissionDenied, "session-bind: host key not pinned");
  session->bound = true;
  session->host_key = std::string(host_key);
  session->session_id = std::string(session_id);
  session->host = std::move(host);
  return OkStatus();
}

Result<std::string> SignOnlyAgent::HandleSign(std::string_view payload,
                                              const AgentSession& session) const {
  SshReader r(payload);
  ASSIGN_OR_RETURN(std::string_view blob, r.String(kMaxAgentMessage));
  ASSIGN_OR_RETURN(std::string_view data, r.String(kMaxAgentMessage));
  ASSIGN_OR_RETURN(uint32_t flags, r.Uint32());
  RETURN_IF_ERROR(r.ExpectEnd("sign request"));
  if (blob != key_blob_) return Error(ErrorCode::kNotFound, "sign request for a key we do not hold");
  if ((flags & ~kAgentAllowedFlags) != 0) {
    return Error(ErrorCode::kInvalidArgument, "sign request with unsupported flags");
  }
  ASSIGN_OR_RETURN(SignRequestInfo info, ClassifySignData(data, key_blob_));
  info.flags = flags;
  if (info.kind == SignRequestInfo::Kind::kUserAuth) {
    // SECURITY: a login signature only for the session this connection is bound to, whose host
    // key is pinned for a policy host (issue 15 item 10). Unbound, another session's id, or a
    // hostbound request naming another host key: refused.
    if (!session.bound) return Error(ErrorCode::kPermissionDenied, "userauth: session not bound");
    if (info.session_id != session.session_id) {
      return Error(ErrorCode::kPermissionDenied, "userauth: another session than the bound one");
    }
    if (!info.host_key.empty() && info.host_key != session.host_key) {
      return Error(ErrorCode::kPermissionDenied, "userauth: another host key than the bound one");
    }
    info.host = session.host;
  }
  if (confirm_ && !confirm_(info)) return Error(ErrorCode::kCancelled, "signature refused by user");
  ASSIGN_OR_RETURN(std::string sig, key_.SignBlob(data));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++signatures_;
  }
  return SshWriter().Byte(kAgentSignResponse).String(sig).Take();
}

std::string SignOnlyAgent::Handle(std::string_view message, AgentSession* session) const {
  SshReader r(message);
  auto type = r.Byte();
  if (!type.ok()) return Refuse();
  std::string_view payload = message.substr(1);
  switch (*type) {
    case kAgentcRequestIdentities: {
      if (!payload.empty()) return Refuse();
      return SshWriter()
          .Byte(kAgentIdentitiesAnswer)
          .Uint32(1)
          .String(key_blob_)
          .String(comment_)
          .Take();
    }
    case kAgentcSignRequest: {
      auto reply = HandleSign(payload, *session);
      if (!reply.ok()) return Refuse();
      return std::move(reply).value();
    }
    case kAgentcExtension: {
      SshReader ext(payload);
      auto name = ext.String(kMaxName);
      if (!name.ok() || *name != kSessionBind) return Refuse();
      if (!HandleBind(payload.substr(4 + name->size()), session).ok()) return Refuse();
      return std::string(1, static_cast<char>(kAgentSuccess));
    }
    default:
      // Add/remove/remove-all identities, smartcard keys, lock/unlock, and anything unknown:
      // refused. Nothing here changes state.
      return Refuse();
  }
}

Result<std::string> AgentConnection::Consume(std::string_view bytes, std::string* fatal_reply) {
  fatal_reply->clear();
  std::string out;
  while (!bytes.empty() || buffer_.size() >= 4) {
    // Fill the 4-byte length prefix, then the message, never buffering more than one message.
    if (buffer_.size() < 4) {
      size_t take = std::min(bytes.size(), 4 - buffer_.size());
      buffer_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (buffer_.size() < 4) break;
    }
    SshReader hdr(std::string_view(buffer_).substr(0, 4));
    uint32_t len = *hdr.Uint32();
    if (len == 0 || len > kMaxAgentMessage) {
      // SECURITY: never allocate or wait for a guest-declared length over the cap.
      *fatal_reply = Framed(std::string(1, static_cast<char>(kAgentFailure)));
      buffer_.clear();
      return Error(ErrorCode::kCorrupt,
                   "ssh-agent: message length " + std::to_string(len) + " outside 1.." +
                       std::to_string(kMaxAgentMessage));
    }
    size_t need = 4 + static_cast<size_t>(len) - buffer_.size();
    size_t take = std::min(bytes.size(), need);
    buffer_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (buffer_.size() < 4 + static_cast<size_t>(len)) break;
    out += Framed(agent_.Handle(std::string_view(buffer_).substr(4), &session_));
    buffer_.clear();
  }
  return out;
}

Status ServeAgentConnection(int fd, const SignOnlyAgent& agent) {
  AgentConnection conn(agent);
  char buf[16 * 1024];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("ssh-agent: read", errno);
    }
    if (n == 0) {
      if (conn.partial()) return Error(ErrorCode::kCorrupt, "ssh-agent: peer closed mid-message");
      return OkStatus();
    }
    std::string fatal;
    auto replies = conn.Consume(std::string_view(buf, static_cast<size_t>(n)), &fatal);
    if (!replies.ok()) {
      if (!fatal.empty()) (void)WriteAll(fd, fatal);
      return replies.error();
    }
    if (!replies->empty()) RETURN_IF_ERROR(WriteAll(fd, *replies));
  }
}

}  // namespace cloister::sshagent

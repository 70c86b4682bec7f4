#include "sshagent/ide_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <random>
#include <sstream>

#include <openssl/rand.h>

#include "base/file_util.h"
#include "base/strings.h"
#include "sshagent/wire.h"
#include "vault/crypto.h"

namespace cloister::sshagent {
namespace {

constexpr std::string_view kBegin = "-----BEGIN OPENSSH PRIVATE KEY-----";
constexpr std::string_view kEnd = "-----END OPENSSH PRIVATE KEY-----";
constexpr std::string_view kMagic{"openssh-key-v1\0", 15};
constexpr size_t kMaxKeyFile = 16 << 10;

Result<std::string> ReadSmallFile(const std::string& path) {
  auto text = ReadFileBounded(path, kMaxKeyFile, Follow::kNoSymlinks);
  if (!text.ok() && text.error().code() == ErrorCode::kCorrupt) {
    return Error(ErrorCode::kCorrupt, path + " is too large for a key file");
  }
  return text;
}

Status MkdirMode(const std::string& dir, mode_t mode) {
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir, errno);
  return OkStatus();
}

// Publishes `content` at `path` unless a file is already there (link(2) never replaces): true if
// this call published it.
Result<bool> PublishNew(const std::string& path, std::string_view content, mode_t mode) {
  unsigned char r[8];
  RAND_bytes(r, sizeof r);
  std::string tmp = path + ".new." + HexEncode(std::string_view(reinterpret_cast<char*>(r), 8));
  RETURN_IF_ERROR(WriteFileAtomic(tmp, content, mode));
  int rc = link(tmp.c_str(), path.c_str());
  int e = errno;
  unlink(tmp.c_str());
  if (rc == 0) return true;
  if (e == EEXIST) return false;
  return ErrnoError("link " + path, e);
}

Result<Ed25519Key> LoadKeyFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  SecretString secret(std::move(text));
  auto key = ParseOpenSshPrivateKey(secret.view());
  if (!key.ok()) {
    return Error(ErrorCode::kCorrupt, path + ": " + key.error().message(),
                 "delete it (and its .pub) to make a new key");
  }
  return key;
}

Result<Ed25519Key> LoadOrMake(const std::string& path, std::string_view comment, bool* created) {
  if (created) *created = false;
  auto existing = LoadKeyFile(path);
  if (existing.ok() || existing.error().code() != ErrorCode::kNotFound) return existing;
  ASSIGN_OR_RETURN(Ed25519Key key, Ed25519Key::Generate());
  ASSIGN_OR_RETURN(SecretString text, OpenSshPrivateKey(key, comment));
  ASSIGN_OR_RETURN(bool won, PublishNew(path, text.view(), 0600));
  if (!won) return LoadKeyFile(path);  // another process made it first: use theirs
  if (created) *created = true;
  RETURN_IF_ERROR(WriteFileAtomic(path + ".pub", key.AuthorizedKeysLine(comment) + "\n", 0644));
  return key;
}

std::string HostKeyPath(const std::string& workspace_dir) {
  return workspace_dir + "/ssh/" + kSshdHostKeyFile;
}

}  // namespace

Result<SecretString> OpenSshPrivateKey(const Ed25519Key& key, std::string_view comment) {
  ASSIGN_OR_RETURN(SecretString seed, key.Seed());
  uint32_t check = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&check), sizeof check) != 1) {
    return Error(ErrorCode::kInternal, "RAND_bytes failed");
  }
  SshWriter priv;
  priv.Uint32(check).Uint32(check).String(kEd25519KeyType).String(key.public_key());
  std::string sk = seed.str() + key.public_key();
  priv.String(sk).String(comment);
  vault::SecureWipe(sk);
  std::string p = priv.Take();
  for (uint8_t pad = 1; p.size() % 8 != 0; ++pad) p.push_back(static_cast<char>(pad));
  SshWriter file;
  file.Raw(kMagic).String("none").String("none").String("").Uint32(1).String(key.PublicKeyBlob());
  file.String(p);
  vault::SecureWipe(p);
  std::string blob = file.Take();
  std::string b64 = vault::Base64Encode(blob);
  vault::SecureWipe(blob);
  std::string out = std::string(kBegin) + "\n";
  for (size_t i = 0; i < b64.size(); i += 70) out += b64.substr(i, 70) + "\n";
  out += std::string(kEnd) + "\n";
  vault::SecureWipe(b64);
  return SecretString(std::move(out));
}

Result<Ed25519Key> ParseOpenSshPrivateKey(std::string_view text) {
  size_t b = text.find(kBegin);
  size_t e = text.find(kEnd);
  if (b == std::string_view::npos || e == std::string_view::npos || e < b) {
    return Error(ErrorCode::kCorrupt, "not an OpenSSH private key");
  }
  std::string b64;
  for (char c : text.substr(b + kBegin.size(), e - b - kBegin.size())) {
    if (c != '\n' && c != '\r') b64.push_back(c);
  }
  auto decoded = vault::Base64Decode(b64);
  vault::SecureWipe(b64);
  if (!decoded.ok()) return Error(ErrorCode::kCorrupt, "OpenSSH private key: bad base64");
  SecretString blob(std::move(*decoded));
  SshReader r(blob.view());
  auto magic = r.Raw(kMagic.size());
  if (!magic.ok() || *magic != kMagic) return Error(ErrorCode::kCorrupt, "not openssh-key-v1");
  auto cipher = r.String(64), kdf = r.String(64), kdfopts = r.String(1024);
  auto nkeys = r.Uint32();
  if (!cipher.ok() || !kdf.ok() || !kdfopts.ok() || !nkeys.ok()) {
    return Error(ErrorCode::kCorrupt, "OpenSSH private key: truncated header");
  }
  if (*cipher != "none" || *kdf != "none") {
    return Error(ErrorCode::kCorrupt, "OpenSSH private key is encrypted (cloister writes plain keys)");
  }
  if (*nkeys != 1) return Error(ErrorCode::kCorrupt, "OpenSSH private key: not exactly one key");
  auto pubblob = r.String(1024);
  auto priv = r.String(4096);
  if (!pubblob.ok() || !priv.ok()) return Error(ErrorCode::kCorrupt, "OpenSSH private key: truncated");
  SshReader p(*priv);
  auto c1 = p.Uint32(), c2 = p.Uint32();
  auto type = p.String(64), pk = p.String(64), sk = p.String(128);
  if (!c1.ok() || !c2.ok() || !type.ok() || !pk.ok() || !sk.ok()) {
    return Error(ErrorCode::kCorrupt, "OpenSSH private key: truncated private section");
  }
  if (*c1 != *c2) return Error(ErrorCode::kCorrupt, "OpenSSH private key: check bytes differ");
  if (*type != kEd25519KeyType || pk->size() != kEd25519PublicSize ||
      sk->size() != kEd25519SeedSize + kEd25519PublicSize) {
    return Error(ErrorCode::kCorrupt, "OpenSSH private key: not ssh-ed25519");
  }
  ASSIGN_OR_RETURN(Ed25519Key key, Ed25519Key::FromSeed(sk->substr(0, kEd25519SeedSize)));
  if (key.public_key() != *pk || sk->substr(kEd25519SeedSize) != *pk ||
      key.PublicKeyBlob() != *pubblob) {
    return Error(ErrorCode::kCorrupt, "OpenSSH private key: public key does not match");
  }
  return key;
}

std::string ClientKeyPath(const std::string& keys_dir) {
  return keys_dir + "/" + kClientKeyFile;
}

Result<Ed25519Key> LoadOrMakeClientKey(const std::string& keys_dir, bool* created) {
  RETURN_IF_ERROR(MkdirMode(keys_dir, 0700));
  return LoadOrMake(ClientKeyPath(keys_dir), kClientKeyComment, created);
}

Status MakeSshdHostKey(const std::string& workspace_dir) {
  RETURN_IF_ERROR(MkdirMode(workspace_dir + "/ssh", 0700));
  ASSIGN_OR_RETURN(Ed25519Key key, Ed25519Key::Generate());
  ASSIGN_OR_RETURN(SecretString text, OpenSshPrivateKey(key, "cloister-sshd"));
  std::string path = HostKeyPath(workspace_dir);
  RETURN_IF_ERROR(WriteFileAtomic(path, text.view(), 0600));
  return WriteFileAtomic(path + ".pub", key.AuthorizedKeysLine("cloister-sshd") + "\n", 0644);
}

Result<Ed25519Key> LoadOrMakeSshdHostKey(const std::string& workspace_dir) {
  RETURN_IF_ERROR(MkdirMode(workspace_dir + "/ssh", 0700));
  return LoadOrMake(HostKeyPath(workspace_dir), "cloister-sshd", nullptr);
}

std::string KnownHostsLine(const std::string& name, const Ed25519Key& host_key) {
  std::string line = host_key.AuthorizedKeysLine("");
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return name + kSshHostSuffix + " " + line;
}

std::string KnownHostsPath(const std::string& workspace_dir) {
  return workspace_dir + "/ssh/" + kKnownHostsFile;
}

Status PinSshdHostKey(const std::string& name, const std::string& workspace_dir) {
  ASSIGN_OR_RETURN(Ed25519Key key, LoadOrMakeSshdHostKey(workspace_dir));
  return WriteFileAtomic(KnownHostsPath(workspace_dir), KnownHostsLine(name, key) + "\n", 0644);
}

Status CheckSshdHostPin(const std::string& name, const std::string& workspace_dir) {
  ASSIGN_OR_RETURN(std::string pinned, ReadSmallFile(KnownHostsPath(workspace_dir)));
  ASSIGN_OR_RETURN(Ed25519Key key, LoadOrMakeSshdHostKey(workspace_dir));
  if (Trim(pinned) == KnownHostsLine(name, key)) return OkStatus();
  return Error(ErrorCode::kFailedPrecondition,
               "the SSH host key of " + name + " is not the one pinned in " +
                   KnownHostsPath(workspace_dir) + " (the workspace was wiped since)",
               "`cloister ssh-config " + name + "` pins its new host key");
}

Result<SshdGuestMaterial> SshdGuestMaterialFor(const std::string& keys_dir,
                                               const std::string& workspace_dir) {
  ASSIGN_OR_RETURN(Ed25519Key client, LoadOrMakeClientKey(keys_dir));
  ASSIGN_OR_RETURN(Ed25519Key host, LoadOrMakeSshdHostKey(workspace_dir));
  SshdGuestMaterial m;
  ASSIGN_OR_RETURN(m.host_key, OpenSshPrivateKey(host, "cloister-sshd"));
  // SECURITY: the client key's public line only; `restrict` turns off agent and X11 forwarding
  // and the user's rc file for this key whatever sshd_config says; `pty` gives back the terminal,
  // `port-forwarding` the local forwards IDEs use (sshd_config limits them to the guest's
  // loopback and refuses remote ones, guest/sshd.cc).
  m.authorized_keys =
      "restrict,pty,port-forwarding " + client.AuthorizedKeysLine(kClientKeyComment) + "\n";
  return m;
}

}  // namespace cloister::sshagent

// Host-side keys of IDE access over SSH (`cloister ssh`, `cloister ssh-config`; the guest side
// is guest/sshd.h):
//   - the store's CLIENT key, `<store>/keys/ssh-client` (0600, OpenSSH private key format, for
//     the host's `ssh -i`) and `ssh-client.pub`: one per store, outside every workspace. Made on
//     first use (ssh-config, ssh, or a boot). SECURITY: its private part never enters a guest:
//     the guest gets only the authorized_keys line (SshdGuestMaterial).
//   - each workspace's SSHD HOST key, `workspaces/NAME/ssh/sshd_host_ed25519_key` (0600) and
//     `.pub`: generated on the host, made at `create` and replaced at `wipe` (the store's
//     make_sshd_host_key hook). Its private part is given to the guest at every boot on the
//     metadata disk (the guest's sshd must hold it; it authenticates the guest end of a
//     connection the host itself routes there, so nothing is protected by keeping it from the
//     guest).
//   - the PIN, `workspaces/NAME/ssh/known_hosts`: written only by `cloister ssh-config` (and by
//     `cloister ssh` when no pin exists yet), read by the host's ssh (UserKnownHostsFile). After
//     `wipe` the pin still holds the old host key, so ssh refuses until ssh-config is re-run.
//
// Ownership: nothing here caches a key; every call reads the files again. Concurrent first uses
// are safe: a new key file is published with link(2), which never replaces a winner's file.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"
#include "sshagent/ed25519_key.h"

namespace cloister::sshagent {

inline constexpr char kClientKeyFile[] = "ssh-client";          // under <store>/keys
inline constexpr char kClientKeyComment[] = "cloister-client";
inline constexpr char kSshdHostKeyFile[] = "sshd_host_ed25519_key";  // under <workspace>/ssh
inline constexpr char kKnownHostsFile[] = "known_hosts";             // under <workspace>/ssh
inline constexpr char kSshHostSuffix[] = ".cloister";                // Host NAME.cloister

// The OpenSSH private key file ("-----BEGIN OPENSSH PRIVATE KEY-----", openssh-key-v1,
// unencrypted) of `key`. SECURITY: the text holds the private seed; write it only to 0600 files.
Result<SecretString> OpenSshPrivateKey(const Ed25519Key& key, std::string_view comment);
// Reads back what OpenSshPrivateKey wrote (unencrypted ssh-ed25519 only; bounded; anything else
// is kCorrupt). The public key inside must match the private one.
Result<Ed25519Key> ParseOpenSshPrivateKey(std::string_view text);

// <keys_dir>/ssh-client, made (with keys_dir, 0700) if absent. `created` says whether this call
// made it.
Result<Ed25519Key> LoadOrMakeClientKey(const std::string& keys_dir, bool* created = nullptr);
std::string ClientKeyPath(const std::string& keys_dir);

// The store hook for `create` and `wipe` (StoreOptions::make_sshd_host_key): a fresh host key in
// <workspace_dir>/ssh/, replacing the old one.
Status MakeSshdHostKey(const std::string& workspace_dir);
// The workspace's host key, made if absent (a workspace created before this key existed).
Result<Ed25519Key> LoadOrMakeSshdHostKey(const std::string& workspace_dir);

// "NAME.cloister ssh-ed25519 AAAA..." (known_hosts form).
std::string KnownHostsLine(const std::string& name, const Ed25519Key& host_key);
std::string KnownHostsPath(const std::string& workspace_dir);
// Writes the pin (atomic, 0644) for the workspace's current host key.
Status PinSshdHostKey(const std::string& name, const std::string& workspace_dir);
// Whether the pin exists and names the workspace's current host key: kNotFound without a pin,
// kFailedPrecondition (with the ssh-config hint) when it names another key.
Status CheckSshdHostPin(const std::string& name, const std::string& workspace_dir);

// What the guest's sshd needs for one boot. SECURITY: the client key's PUBLIC part only.
struct SshdGuestMaterial {
  SecretString host_key;        // OpenSSH private key text of the workspace's host key
  std::string authorized_keys;  // "restrict,pty,port-forwarding ssh-ed25519 AAAA... cloister-client\n"
};
Result<SshdGuestMaterial> SshdGuestMaterialFor(const std::string& keys_dir,
                                               const std::string& workspace_dir);

}  // namespace cloister::sshagent

// Fuzzes the sign-only SSH agent's stream framing and message handling with guest-controlled bytes.
// The input is fed to one AgentConnection in pieces whose sizes come from the first byte, so message
// reassembly across reads is exercised too. The agent's key has seed 32 x 0x66 ('f'), so corpus
// files can carry sign requests that name the right key and reach the signing path; the host key
// with seed 32 x 0x68 ('h') is "pinned" (the binder accepts it), so session-bind messages it signs
// reach a bound session. The whole input is also fed to the host key and ssh-keyscan parsers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sshagent/agent.h"
#include "sshagent/host_key.h"
#include "sshagent/host_pins.h"

using cloister::sshagent::AgentConnection;
using cloister::sshagent::ClassifySignData;
using cloister::sshagent::Ed25519Key;
using cloister::sshagent::SignOnlyAgent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const SignOnlyAgent* agent = [] {
    auto key = Ed25519Key::FromSeed(std::string(32, 'f'));
    std::string pinned = std::move(Ed25519Key::FromSeed(std::string(32, 'h'))).value().PublicKeyBlob();
    return new SignOnlyAgent(std::move(key).value(), "cloister:fuzz", nullptr,
                             [pinned](std::string_view blob) -> cloister::Result<std::string> {
                               if (blob == pinned) return std::string("git.example.test");
                               return cloister::Error(cloister::ErrorCode::kPermissionDenied, "not pinned");
                             });
  }();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t piece = 1;
  if (!in.empty()) {
    piece = static_cast<uint8_t>(in[0]) + 1;
    in.remove_prefix(1);
  }
  AgentConnection conn(*agent);
  std::string fatal;
  while (!in.empty()) {
    size_t n = in.size() < piece ? in.size() : piece;
    auto out = conn.Consume(in.substr(0, n), &fatal);
    if (!out.ok()) break;
    in.remove_prefix(n);
  }
  std::string_view all(reinterpret_cast<const char*>(data), size);
  (void)ClassifySignData(all, agent->key().PublicKeyBlob());
  (void)cloister::sshagent::HostKeyType(all);
  (void)cloister::sshagent::HostKeyBlobFromLine(all);
  (void)cloister::sshagent::ParseKeyscanOutput(all);
  // The input split in three (key blob, data, signature) for the signature checks.
  size_t a = size / 3, b = 2 * size / 3;
  (void)cloister::sshagent::VerifyHostKeySignature(all.substr(0, a), all.substr(a, b - a), all.substr(b));
  return 0;
}

// Fuzzes the sign-only SSH agent's stream framing and message handling with guest-controlled bytes.
// The input is fed to one AgentConnection in pieces whose sizes come from the first byte, so message
// reassembly across reads is exercised too. The agent's key has seed 32 x 0x66 ('f'), so corpus
// files can carry sign requests that name the right key and reach the signing path.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sshagent/agent.h"

using cloister::sshagent::AgentConnection;
using cloister::sshagent::ClassifySignData;
using cloister::sshagent::Ed25519Key;
using cloister::sshagent::SignOnlyAgent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const SignOnlyAgent* agent = [] {
    auto key = Ed25519Key::FromSeed(std::string(32, 'f'));
    return new SignOnlyAgent(std::move(key).value(), "cloister:fuzz");
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
  (void)ClassifySignData(std::string_view(reinterpret_cast<const char*>(data), size),
                         agent->key().PublicKeyBlob());
  return 0;
}

#include "sshagent/host_pins.h"

#include <gtest/gtest.h>

#include "sshagent/ed25519_key.h"
#include "sshagent/host_key.h"

namespace cloister::sshagent {
namespace {

std::string Blob(char c) {
  return std::move(Ed25519Key::FromSeed(std::string(kEd25519SeedSize, c))).value().PublicKeyBlob();
}

// A workspace policy in memory and hosts that present fixed keys.
struct Fake {
  SshPolicy policy;
  std::map<std::string, std::vector<std::string>> presents;  // host -> blobs
  std::vector<std::string> scanned;                          // "host:port", in order

  HostPinnerDeps Deps() {
    return {[this]() -> Result<SshPolicy> { return policy; },
            [this](const std::string& host, const std::vector<std::string>& lines) -> Status {
              if (policy.host_keys.count(host)) return Error(ErrorCode::kAlreadyExists, "pinned meanwhile");
              policy.host_keys[host] = lines;
              return ValidateSshPolicy(policy);
            },
            [this](const std::string& host, uint16_t port) -> Result<std::vector<std::string>> {
              scanned.push_back(host + ":" + std::to_string(port));
              auto it = presents.find(host);
              if (it == presents.end()) return Error(ErrorCode::kUnavailable, "no answer");
              return it->second;
            }};
  }
};

TEST(HostKeyPinnerTest, FirstUsePinsEveryKeyTheHostItselfPresents) {
  Fake f;
  f.presents["github.com"] = {Blob('g'), Blob('G')};
  f.presents["gitlab.com"] = {Blob('l')};
  HostKeyPinner pinner(f.Deps());
  auto host = pinner.Bind(Blob('l'));
  ASSERT_TRUE(host.ok()) << host.error().ToString();
  EXPECT_EQ(*host, "gitlab.com");
  ASSERT_EQ(f.policy.host_keys.count("gitlab.com"), 1u);
  EXPECT_EQ(f.policy.host_keys["gitlab.com"], std::vector<std::string>{*HostKeyLine(Blob('l'))});
  // Pinned now: answered from the pins without asking anyone.
  size_t scans = f.scanned.size();
  EXPECT_EQ(*pinner.Bind(Blob('l')), "gitlab.com");
  EXPECT_EQ(f.scanned.size(), scans);
  // github.com presented two keys; the pin takes both.
  EXPECT_EQ(*pinner.Bind(Blob('G')), "github.com");
  EXPECT_EQ(f.policy.host_keys["github.com"].size(), 2u);
  EXPECT_EQ(*pinner.Bind(Blob('g')), "github.com");
}

TEST(HostKeyPinnerTest, AKeyNoPolicyHostPresentsIsRefusedAndScansAreReused) {
  Fake f;
  f.presents["github.com"] = {Blob('g')};
  HostKeyPinner pinner(f.Deps());
  auto r = pinner.Bind(Blob('x'));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(HostKeyFingerprint(Blob('x'))), std::string::npos);
  EXPECT_NE(r.error().hint().find("--add-host"), std::string::npos);
  EXPECT_TRUE(f.policy.host_keys.empty());
  // Each policy host was asked once on each tunnel port...
  EXPECT_EQ(f.scanned, (std::vector<std::string>{"github.com:22", "gitlab.com:22", "bitbucket.org:22"}));
  // ...and a guest binding key after key does not make the host ask again within the window.
  EXPECT_FALSE(pinner.Bind(Blob('y')).ok());
  EXPECT_EQ(f.scanned.size(), 3u);
  EXPECT_EQ(pinner.scans(), 3u);
  // The cached answer still pins a key the host did present.
  EXPECT_EQ(*pinner.Bind(Blob('g')), "github.com");
}

TEST(HostKeyPinnerTest, APinnedHostsChangedKeyIsRefusedNotRepinned) {
  Fake f;
  f.policy.host_keys["github.com"] = {*HostKeyLine(Blob('g'))};
  f.presents["github.com"] = {Blob('n')};  // the host now presents a new key (or a MITM does)
  HostKeyPinner pinner(f.Deps());
  auto r = pinner.Bind(Blob('n'));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().hint().find("--unpin HOST"), std::string::npos);
  EXPECT_EQ(f.policy.host_keys["github.com"], std::vector<std::string>{*HostKeyLine(Blob('g'))});
  for (const std::string& s : f.scanned) EXPECT_NE(s.rfind("github.com:", 0), 0u) << s;
  // After `--unpin github.com` the next use pins the new key.
  f.policy.host_keys.clear();
  EXPECT_EQ(*pinner.Bind(Blob('n')), "github.com");
}

TEST(HostKeyPinnerTest, OnlyPolicyHostsAreAskedAndPinned) {
  Fake f;
  f.policy.tunnel_hosts = {"git.example.test"};
  f.policy.tunnel_ports = {22, 2222};
  f.presents["github.com"] = {Blob('g')};
  HostKeyPinner pinner(f.Deps());
  EXPECT_FALSE(pinner.Bind(Blob('g')).ok());
  EXPECT_EQ(f.scanned, (std::vector<std::string>{"git.example.test:22", "git.example.test:2222"}));
  // A pin for a host no longer in the policy names nothing (the policy drops such pins).
  f.policy.tunnel_hosts = {};
  EXPECT_FALSE(pinner.Bind(Blob('g')).ok());
}

TEST(KeyscanOutputTest, ParsesKeysSkipsCommentsAndUnknownTypes) {
  std::string g = *HostKeyLine(Blob('g'));
  std::string out = "# github.com:22 SSH-2.0-babeld\n"
                    "github.com " + g + "\n"
                    "github.com ssh-ed25519-cert-v01@openssh.com AAAA\n"
                    "github.com " + g + "\n"
                    "garbage\n";
  auto blobs = ParseKeyscanOutput(out);
  ASSERT_TRUE(blobs.ok());
  EXPECT_EQ(*blobs, std::vector<std::string>{Blob('g')});
  EXPECT_FALSE(ParseKeyscanOutput(std::string(300 * 1024, 'a')).ok());
}

}  // namespace
}  // namespace cloister::sshagent

#include "sshagent/agent.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "base/strings.h"
#include "sshagent/wire.h"

namespace cloister::sshagent {
namespace {

std::string Seed(char c) { return std::string(kEd25519SeedSize, c); }

const std::string kSid(32, 's');  // the session id of the bound test session

// The server host key of the test sessions, pinned for git.example.test by the test binder.
const Ed25519Key& HostKey() {
  static const Ed25519Key* k = new Ed25519Key(std::move(Ed25519Key::FromSeed(Seed('h'))).value());
  return *k;
}

Result<std::string> TestBinder(std::string_view blob) {
  if (blob == HostKey().PublicKeyBlob()) return std::string("git.example.test");
  return Error(ErrorCode::kPermissionDenied, "not pinned");
}

SignOnlyAgent MakeAgent(ConfirmFn confirm = nullptr, HostBinder binder = TestBinder) {
  auto key = Ed25519Key::FromSeed(Seed('k'));
  EXPECT_TRUE(key.ok());
  return SignOnlyAgent(std::move(key).value(), "cloister:test", std::move(confirm), std::move(binder));
}

// A session-bind@openssh.com message: `host` signs `sid` (or `signed_sid` when given).
std::string BindMessage(const Ed25519Key& host, const std::string& sid, bool forwarding = false,
                        const std::string& signed_sid = "") {
  auto sig = host.SignBlob(signed_sid.empty() ? sid : signed_sid);
  EXPECT_TRUE(sig.ok());
  return SshWriter()
      .Byte(kAgentcExtension)
      .String("session-bind@openssh.com")
      .String(host.PublicKeyBlob())
      .String(sid)
      .String(*sig)
      .Byte(forwarding ? 1 : 0)
      .Take();
}

const std::string kSuccess(1, static_cast<char>(kAgentSuccess));

// A session bound to HostKey() with session id kSid.
AgentSession Bound(const SignOnlyAgent& agent) {
  AgentSession s;
  EXPECT_EQ(agent.Handle(BindMessage(HostKey(), kSid), &s), kSuccess);
  return s;
}

std::string UserAuthData(const std::string& key_blob, const std::string& user = "git",
                         const std::string& alg = "ssh-ed25519", const std::string& sid = kSid,
                         const std::string* hostbound_key = nullptr) {
  SshWriter w;
  w.String(sid)
      .Byte(50)
      .String(user)
      .String("ssh-connection")
      .String(hostbound_key ? "publickey-hostbound-v00@openssh.com" : "publickey")
      .Byte(1)
      .String(alg)
      .String(key_blob);
  if (hostbound_key) w.String(*hostbound_key);
  return w.Take();
}

std::string SshSigData(const std::string& ns) {
  return SshWriter()
      .Raw("SSHSIG")
      .String(ns)
      .String("")
      .String("sha512")
      .String(std::string(64, 'h'))
      .Take();
}

std::string SignRequest(const std::string& blob, const std::string& data, uint32_t flags) {
  return SshWriter().Byte(kAgentcSignRequest).String(blob).String(data).Uint32(flags).Take();
}

const std::string kFailure(1, static_cast<char>(kAgentFailure));

TEST(Ed25519KeyTest, Rfc8032TestVector1) {
  // RFC 8032 section 7.1, TEST 1 (empty message).
  auto seed = HexDecode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
  ASSERT_TRUE(seed.ok());
  auto key = Ed25519Key::FromSeed(*seed);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(HexEncode(key->public_key()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  auto sig = key->SignRaw("");
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(HexEncode(*sig),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
            "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b");
}

TEST(Ed25519KeyTest, GeneratedKeysDifferAndSeedRoundTrips) {
  auto a = Ed25519Key::Generate();
  auto b = Ed25519Key::Generate();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->public_key(), b->public_key());
  auto seed = a->Seed();
  ASSERT_TRUE(seed.ok());
  auto again = Ed25519Key::FromSeed(seed->view());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->public_key(), a->public_key());
  EXPECT_FALSE(Ed25519Key::FromSeed("short").ok());
}

TEST(Ed25519KeyTest, AuthorizedKeysLineHasOpenSshShape) {
  auto key = Ed25519Key::FromSeed(Seed('k'));
  ASSERT_TRUE(key.ok());
  std::string line = key->AuthorizedKeysLine("cloister:ws");
  EXPECT_TRUE(line.rfind("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI", 0) == 0) << line;
  EXPECT_TRUE(line.size() > 12 && line.substr(line.size() - 12) == " cloister:ws");
  EXPECT_TRUE(key->Fingerprint().rfind("SHA256:", 0) == 0);
  EXPECT_EQ(key->Fingerprint().size(), 7u + 43u);
}

TEST(SignOnlyAgentTest, ListsExactlyItsOneKey) {
  SignOnlyAgent agent = MakeAgent();
  std::string reply = agent.Handle(std::string(1, static_cast<char>(kAgentcRequestIdentities)));
  SshReader r(reply);
  EXPECT_EQ(*r.Byte(), kAgentIdentitiesAnswer);
  EXPECT_EQ(*r.Uint32(), 1u);
  EXPECT_EQ(*r.String(), agent.key().PublicKeyBlob());
  EXPECT_EQ(*r.String(), "cloister:test");
  EXPECT_TRUE(r.ExpectEnd("answer").ok());
}

TEST(SignOnlyAgentTest, SignsUserAuthWithOurKeyAndSignatureVerifies) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  std::string data = UserAuthData(blob);
  AgentSession session = Bound(agent);
  for (uint32_t flags : {0u, kAgentRsaSha2_256, kAgentRsaSha2_512}) {
    std::string reply = agent.Handle(SignRequest(blob, data, flags), &session);
    SshReader r(reply);
    ASSERT_EQ(*r.Byte(), kAgentSignResponse) << "flags " << flags;
    auto sig = r.String();
    ASSERT_TRUE(sig.ok());
    EXPECT_TRUE(VerifyEd25519Blob(agent.key().public_key(), data, *sig).ok());
    EXPECT_FALSE(VerifyEd25519Blob(agent.key().public_key(), data + "x", *sig).ok());
  }
  EXPECT_EQ(agent.signatures(), 3u);
}

TEST(SignOnlyAgentTest, SignsSshSigBlobs) {
  std::vector<std::string> seen;
  SignOnlyAgent agent = MakeAgent([&](const SignRequestInfo& info) {
    seen.push_back(info.Describe());
    return true;
  });
  std::string blob = agent.key().PublicKeyBlob();
  std::string reply = agent.Handle(SignRequest(blob, SshSigData("git"), 0));
  EXPECT_EQ(reply[0], static_cast<char>(kAgentSignResponse));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("\"git\""), std::string::npos);
}

TEST(SignOnlyAgentTest, RefusesUnknownOrObsoleteFlags) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  AgentSession session = Bound(agent);
  for (uint32_t flags : {1u, 8u, 0x80000000u, 0x7u}) {
    EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob), flags), &session), kFailure) << flags;
  }
  EXPECT_EQ(agent.signatures(), 0u);
}

TEST(SignOnlyAgentTest, RefusesOtherKeysAndArbitraryData) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  auto other = Ed25519Key::FromSeed(Seed('o'));
  ASSERT_TRUE(other.ok());
  std::string other_blob = other->PublicKeyBlob();
  AgentSession s = Bound(agent);
  // A sign request naming another key.
  EXPECT_EQ(agent.Handle(SignRequest(other_blob, UserAuthData(other_blob), 0), &s), kFailure);
  // Our key, but userauth data naming another key / another algorithm.
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(other_blob), 0), &s), kFailure);
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob, "git", "rsa-sha2-256"), 0), &s), kFailure);
  // Arbitrary bytes: the key is not a general signing oracle.
  EXPECT_EQ(agent.Handle(SignRequest(blob, "please sign this", 0), &s), kFailure);
  EXPECT_EQ(agent.Handle(SignRequest(blob, "", 0), &s), kFailure);
  // Trailing bytes after the flags, truncated request.
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob), 0) + "x", &s), kFailure);
  std::string req = SignRequest(blob, UserAuthData(blob), 0);
  EXPECT_EQ(agent.Handle(req.substr(0, req.size() - 2), &s), kFailure);
  EXPECT_EQ(agent.signatures(), 0u);
  // The same request, whole, in the bound session: signed (the refusals above were the checks).
  EXPECT_EQ(agent.Handle(req, &s)[0], static_cast<char>(kAgentSignResponse));
}

TEST(SignOnlyAgentTest, EveryOtherMessageTypeGetsFailure) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  auto other = Ed25519Key::FromSeed(Seed('o'));
  ASSERT_TRUE(other.ok());
  // Plausible payloads for each message, so a refusal is the agent's decision, not a parse error.
  std::string add = SshWriter().String("ssh-ed25519").String(other->public_key()).Take();
  std::vector<std::string> msgs = {
      SshWriter().Byte(kAgentcAddIdentity).Raw(add).Take(),
      SshWriter().Byte(kAgentcAddIdConstrained).Raw(add).Byte(1).Uint32(60).Take(),
      SshWriter().Byte(kAgentcRemoveIdentity).String(blob).Take(),
      SshWriter().Byte(kAgentcRemoveAllIdentities).Take(),
      SshWriter().Byte(kAgentcLock).String("pw").Take(),
      SshWriter().Byte(kAgentcUnlock).String("pw").Take(),
      SshWriter().Byte(kAgentcAddSmartcardKey).String("/usr/lib/p11.so").String("1234").Take(),
      SshWriter().Byte(kAgentcRemoveSmartcardKey).String("/usr/lib/p11.so").String("").Take(),
      SshWriter().Byte(kAgentcAddSmartcardKeyConstrained).String("/x.so").String("").Take(),
      SshWriter().Byte(kAgentcExtension).String("query").Take(),
      SshWriter().Byte(kAgentcExtension).String("session-bind@openssh.com").Take(),
      SshWriter().Byte(1).Take(),   // SSH1 request RSA identities
      SshWriter().Byte(9).Take(),   // SSH1 remove all
      SshWriter().Byte(200).Take(),
      SshWriter().Byte(kAgentcRequestIdentities).Raw("junk").Take(),
      std::string(),
  };
  for (const auto& m : msgs) EXPECT_EQ(agent.Handle(m), kFailure) << HexEncode(m);
  // And the key is still there, unchanged, after all of that.
  std::string reply = agent.Handle(std::string(1, static_cast<char>(kAgentcRequestIdentities)));
  SshReader r(reply);
  ASSERT_EQ(*r.Byte(), kAgentIdentitiesAnswer);
  EXPECT_EQ(*r.Uint32(), 1u);
  EXPECT_EQ(*r.String(), blob);
}

TEST(SignOnlyAgentTest, ConfirmationCanRefuseAndSeesTheUserAndHost) {
  std::string seen_user, seen;
  bool allow = false;
  SignOnlyAgent agent = MakeAgent([&](const SignRequestInfo& info) {
    seen_user = info.user;
    seen = info.Describe();
    return allow;
  });
  std::string blob = agent.key().PublicKeyBlob();
  AgentSession s = Bound(agent);
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob, "alice"), 0), &s), kFailure);
  EXPECT_EQ(seen_user, "alice");
  EXPECT_EQ(agent.signatures(), 0u);
  allow = true;
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob, "bob"), 0), &s)[0],
            static_cast<char>(kAgentSignResponse));
  EXPECT_EQ(seen_user, "bob");
  // The prompt names the host the session is bound to (from the pin, not from the guest).
  EXPECT_EQ(seen, "SSH login as \"bob\" to git.example.test");
}

// Issue 15 item 10: userauth signatures only inside a session bound to a pinned host key.
TEST(SessionBindTest, UserAuthOutsideABoundSessionIsRefused) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  std::string req = SignRequest(blob, UserAuthData(blob), 0);
  AgentSession unbound;
  EXPECT_EQ(agent.Handle(req, &unbound), kFailure);
  EXPECT_EQ(agent.Handle(req), kFailure);
  // SSHSIG (git commit signing) is not a login and needs no binding.
  EXPECT_EQ(agent.Handle(SignRequest(blob, SshSigData("git"), 0), &unbound)[0],
            static_cast<char>(kAgentSignResponse));
  EXPECT_EQ(agent.signatures(), 1u);
}

TEST(SessionBindTest, BindingToAnUnpinnedHostKeyIsRefused) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  auto stranger = Ed25519Key::FromSeed(Seed('x'));
  ASSERT_TRUE(stranger.ok());
  AgentSession s;
  EXPECT_EQ(agent.Handle(BindMessage(*stranger, kSid), &s), kFailure);
  EXPECT_FALSE(s.bound);
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob), 0), &s), kFailure);
  // No binder at all: fail closed.
  SignOnlyAgent no_binder = MakeAgent(nullptr, nullptr);
  AgentSession s2;
  EXPECT_EQ(no_binder.Handle(BindMessage(HostKey(), kSid), &s2), kFailure);
  EXPECT_EQ(no_binder.Handle(SignRequest(blob, UserAuthData(blob), 0), &s2), kFailure);
  EXPECT_EQ(agent.signatures() + no_binder.signatures(), 0u);
}

TEST(SessionBindTest, ABadHostSignatureForwardingOrRebindIsRefused) {
  SignOnlyAgent agent = MakeAgent();
  AgentSession s;
  // The pinned key's signature over another session id: the guest has no session with it.
  EXPECT_EQ(agent.Handle(BindMessage(HostKey(), kSid, false, std::string(32, 'z')), &s), kFailure);
  EXPECT_FALSE(s.bound);
  EXPECT_EQ(agent.Handle(BindMessage(HostKey(), kSid, /*forwarding=*/true), &s), kFailure);
  EXPECT_FALSE(s.bound);
  EXPECT_EQ(agent.Handle(BindMessage(HostKey(), kSid) + "x", &s), kFailure);
  EXPECT_EQ(agent.Handle(BindMessage(HostKey(), kSid), &s), kSuccess);
  EXPECT_EQ(s.host, "git.example.test");
  // One binding per connection.
  EXPECT_EQ(agent.Handle(BindMessage(HostKey(), std::string(32, 't')), &s), kFailure);
  EXPECT_EQ(s.session_id, kSid);
}

TEST(SessionBindTest, UserAuthForAnotherSessionOrHostKeyIsRefused) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  AgentSession s = Bound(agent);
  // Another session's id (a relayed challenge).
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob, "git", "ssh-ed25519", std::string(32, 'r')), 0), &s),
            kFailure);
  // publickey-hostbound naming another host key than the bound one.
  auto stranger = Ed25519Key::FromSeed(Seed('x'));
  ASSERT_TRUE(stranger.ok());
  std::string stranger_blob = stranger->PublicKeyBlob();
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob, "git", "ssh-ed25519", kSid, &stranger_blob), 0), &s),
            kFailure);
  EXPECT_EQ(agent.signatures(), 0u);
  std::string host_blob = HostKey().PublicKeyBlob();
  EXPECT_EQ(agent.Handle(SignRequest(blob, UserAuthData(blob, "git", "ssh-ed25519", kSid, &host_blob), 0), &s)[0],
            static_cast<char>(kAgentSignResponse));
}

TEST(SessionBindTest, BindingLastsForItsConnectionOnly) {
  SignOnlyAgent agent = MakeAgent();
  std::string blob = agent.key().PublicKeyBlob();
  auto framed = [](const std::string& m) { return SshWriter().String(m).Take(); };
  AgentConnection one(agent), two(agent);
  std::string fatal;
  auto bound = one.Consume(framed(BindMessage(HostKey(), kSid)), &fatal);
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ(*bound, framed(kSuccess));
  auto on_two = two.Consume(framed(SignRequest(blob, UserAuthData(blob), 0)), &fatal);
  ASSERT_TRUE(on_two.ok());
  EXPECT_EQ(*on_two, framed(kFailure));
  auto on_one = one.Consume(framed(SignRequest(blob, UserAuthData(blob), 0)), &fatal);
  ASSERT_TRUE(on_one.ok());
  EXPECT_EQ(static_cast<uint8_t>((*on_one)[4]), kAgentSignResponse);
}

TEST(AgentConnectionTest, ReassemblesMessagesSplitAcrossReads) {
  SignOnlyAgent agent = MakeAgent();
  AgentConnection conn(agent);
  std::string req = SshWriter().Uint32(1).Byte(kAgentcRequestIdentities).Take();
  std::string stream = req + req;
  std::string replies, fatal;
  for (char c : stream) {
    auto out = conn.Consume(std::string_view(&c, 1), &fatal);
    ASSERT_TRUE(out.ok());
    replies += *out;
  }
  EXPECT_FALSE(conn.partial());
  std::string one = agent.Handle(std::string(1, static_cast<char>(kAgentcRequestIdentities)));
  std::string framed = SshWriter().String(one).Take();
  EXPECT_EQ(replies, framed + framed);
}

TEST(AgentConnectionTest, OversizedLengthIsFatalWithFailureReply) {
  SignOnlyAgent agent = MakeAgent();
  AgentConnection conn(agent);
  std::string fatal;
  auto out = conn.Consume(SshWriter().Uint32(kMaxAgentMessage + 1).Take(), &fatal);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message().find("outside"), std::string::npos);
  EXPECT_EQ(fatal, SshWriter().String(kFailure).Take());
  AgentConnection conn2(agent);
  EXPECT_FALSE(conn2.Consume(SshWriter().Uint32(0).Take(), &fatal).ok());
  // Exactly the cap is fine (gets FAILURE as an unknown message, but the connection lives).
  AgentConnection conn3(agent);
  std::string big = SshWriter().Uint32(kMaxAgentMessage).Byte(99).Raw(std::string(kMaxAgentMessage - 1, 0)).Take();
  auto ok = conn3.Consume(big, &fatal);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, SshWriter().String(kFailure).Take());
}

TEST(ServeAgentConnectionTest, ServesOverASocketAndEndsOnOversize) {
  SignOnlyAgent agent = MakeAgent();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Status served;
  std::thread t([&] { served = ServeAgentConnection(sv[1], agent); });
  std::string req = SshWriter().Uint32(1).Byte(kAgentcRequestIdentities).Take();
  ASSERT_EQ(write(sv[0], req.data(), req.size()), static_cast<ssize_t>(req.size()));
  char len[4];
  ASSERT_EQ(read(sv[0], len, 4), 4);
  std::string bad = SshWriter().Uint32(0x7fffffff).Take();
  // Drain the first reply body, then send the oversized prefix.
  uint32_t n = *SshReader(std::string_view(len, 4)).Uint32();
  std::string body(n, 0);
  size_t got = 0;
  while (got < n) got += static_cast<size_t>(read(sv[0], body.data() + got, n - got));
  EXPECT_EQ(body[0], static_cast<char>(kAgentIdentitiesAnswer));
  ASSERT_EQ(write(sv[0], bad.data(), bad.size()), 4);
  char fail[5];
  ASSERT_EQ(read(sv[0], fail, 5), 5);
  EXPECT_EQ(fail[4], static_cast<char>(kAgentFailure));
  t.join();
  EXPECT_FALSE(served.ok());
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace cloister::sshagent

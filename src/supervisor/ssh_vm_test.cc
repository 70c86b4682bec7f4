// The workspace's sign-only SSH agent inside a real VM (issue 6's proof), under TCG with the test
// image and the real `cloister` binary, in one boot:
//   - `create` made the workspace key (ssh-keygen shows it without making one);
//   - OpenSSH's own clients in the guest: `ssh-add -L` lists exactly the workspace key;
//     `ssh-keygen -Y sign` then `-Y verify` round-trips; `ssh` logs in, through the proxy's
//     CONNECT tunnel (the guest's ssh_config drop-in, `cloister-agent ssh-connect`), to an sshd
//     this test starts on 127.0.0.1 with only the workspace key authorised (CLOISTER_PROXY_RESOLVE
//     maps github.com:22 to it); a host outside the workspace's SSH policy gets the proxy's 403;
//     `ssh-add KEY`, `ssh-add -D` and `ssh-add -x` are all refused and the key stays listed;
//   - confirmation (`ssh-policy --confirm on`): with nobody listening a login is refused (the
//     guest's ssh error names `cloister ssh-confirm`); the real `cloister ssh-confirm ws` on a pipe
//     answers "n" (refused) then "y" (allowed), and exits when the VM stops;
//   - no private key bytes in the guest: the guest's block devices as the host stores them (every
//     file of the workspace directory: system and home layers, metadata disk, logs) and, as root in
//     the guest, every process environment hold none of the key's forms (the 32-byte seed, its
//     hex and base64 forms); the same scans find a canary the test wrote to the home.
// Nothing leaves 127.0.0.1 (resolve-only). Home 256 MiB (the fixture's default).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_net.h"
#include "sshagent/vault_key_store.h"
#include "vault/crypto.h"
#include "supervisor/testing.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using testing::Slurp;

// "\ooo" per byte: a printf format that the guest's shell turns back into the bytes, so binary
// needles travel as printable argv and exist whole only in the guest shell's memory.
std::string Octal(std::string_view bytes) {
  std::string out;
  char buf[8];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "\\%03o", c);
    out += buf;
  }
  return out;
}

bool ShellSafeBinary(std::string_view s) {
  // A shell variable cannot hold NUL, command substitution drops trailing newlines and the scan
  // splits lines at NUL and newline: such needles would be searched wrongly.
  return s.find('\0') == std::string_view::npos && s.find('\n') == std::string_view::npos;
}

class SshVmTest : public testing::CliVmTest {
 protected:
  void TearDown() override {
    sshd_.reset();
    testing::CliVmTest::TearDown();
    if (listener_ > 0 && waitpid(listener_, nullptr, WNOHANG) == 0) {
      kill(listener_, SIGTERM);
      waitpid(listener_, nullptr, 0);
    }
  }

  // sshd on 127.0.0.1 with its own host key and only `authorized` authorised; returns its port.
  int StartSshd(const std::string& dir, const std::string& authorized) {
    testnet::SshdOptions o;
    o.dir = dir;
    o.authorized_keys = authorized;
    auto sshd = testnet::TestSshd::Start(o);
    EXPECT_TRUE(sshd.ok()) << sshd.error().ToString();
    if (!sshd.ok()) return -1;
    sshd_ = std::make_unique<testnet::TestSshd>(std::move(sshd).value());
    return sshd_->port();
  }

  std::unique_ptr<testnet::TestSshd> sshd_;
  pid_t listener_ = -1;  // `cloister ssh-confirm ws`
};

TEST_F(SshVmTest, OpenSshInTheGuestUsesOnlyTheWorkspaceKeyWhichNeverEntersTheGuest) {
  if (!testnet::TestSshd::Runnable()) {
    GTEST_SKIP() << "needs openssh-server and root (sshd privilege separation)";
  }
  setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
  env_["CLOISTER_VAULT_KEY_BACKEND"] = "file";
  // Through the real `create` verb: it makes the workspace key (the fixture's Create uses the
  // store directly, without the CLI's key hook).
  auto created = Cloister({"create", "ws", "--image", image_dir() + "/disk.raw", "--memory", "384",
                           "--cpus", "1", "--home-size", "256M"});
  ASSERT_EQ(created.exit_code, 0) << created.err;

  // `create` made the key: ssh-keygen shows it and makes none.
  auto shown = Cloister({"ssh-keygen", "ws", "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  auto doc = nlohmann::json::parse(shown.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  EXPECT_FALSE(doc["created"].get<bool>());
  // The scan below passes the seed to the guest shell as octal argv; regenerate (bounded) until
  // the seed has no NUL or newline byte (p = 0.78 per key).
  sshagent::VaultKeyStore keys(vault::VaultLocation{
      root_ + "/keys", root_ + "/workspaces/ws/secrets.enc", "ws"});
  std::string seed;
  for (int i = 0; i < 40; ++i) {
    auto s = keys.LoadSeed();
    ASSERT_TRUE(s.ok() && s->has_value());
    seed = (*s)->str();
    if (ShellSafeBinary(seed)) break;
    ASSERT_EQ(Cloister({"ssh-keygen", "ws", "--regenerate", "--yes"}).exit_code, 0);
  }
  ASSERT_EQ(seed.size(), 32u);
  ASSERT_TRUE(ShellSafeBinary(seed));
  doc = nlohmann::json::parse(Cloister({"ssh-keygen", "ws", "--json"}).out, nullptr, false);
  const std::string pub_line = doc["public_key"].get<std::string>();
  const std::string fingerprint = doc["fingerprint"].get<std::string>();
  std::vector<std::string> pub_fields = Split(pub_line, ' ');
  ASSERT_GE(pub_fields.size(), 2u);
  const std::string pub_key = pub_fields[0] + " " + pub_fields[1];

  std::string dir = root_ + "/sshd";
  fs::create_directories(dir);
  int port = StartSshd(dir, pub_line);
  ASSERT_GT(port, 0) << Slurp(dir + "/sshd.log");
  env_["CLOISTER_PROXY_RESOLVE"] = "github.com:22=127.0.0.1:" + std::to_string(port);
  // Every signature of this boot needs the user's yes (`cloister ssh-confirm`).
  ASSERT_EQ(Cloister({"ssh-policy", "ws", "--confirm", "on"}).exit_code, 0);
  ASSERT_NO_FATAL_FAILURE(Start("ws"));
  const std::string supervisor_log = root_ + "/workspaces/ws/supervisor.log";
  const std::string hostpub = Trim(Slurp(dir + "/hostkey.pub"));
  const std::string user = getpwuid(geteuid())->pw_name;
  const std::string login_script =
      "cd && printf 'github.com %s\\n' \"$0\" > kh && "
      "ssh -o BatchMode=yes -o UserKnownHostsFile=$HOME/kh -o StrictHostKeyChecking=yes "
      "-o ConnectTimeout=120 \"$1\"@github.com echo cloister-login-ok 2>&1; echo rc=$?";

  // ssh-add -L: exactly the workspace key.
  int code = -1;
  std::string listed = Exec("ws", "ssh-add -L", &code);
  ASSERT_EQ(code, 0) << listed;
  std::vector<std::string> lines;
  for (const std::string& l : Split(listed, '\n')) {
    if (!Trim(l).empty()) lines.push_back(Trim(l));
  }
  ASSERT_EQ(lines.size(), 1u) << listed;
  EXPECT_EQ(lines[0].substr(0, pub_key.size()), pub_key);
  EXPECT_NE(lines[0].find("cloister:ws"), std::string::npos);

  // Confirmation on and nobody listening: the signature is refused (fail closed); the guest's ssh
  // names the hint through the key comment, the supervisor log says why.
  std::string unconfirmed = Exec("ws", login_script, &code, "dev", {hostpub, user});
  EXPECT_EQ(unconfirmed.find("cloister-login-ok"), std::string::npos) << unconfirmed;
  EXPECT_NE(unconfirmed.find("agent refused operation"), std::string::npos) << unconfirmed;
  EXPECT_NE(unconfirmed.find("confirm on the host: cloister ssh-confirm ws"), std::string::npos)
      << unconfirmed;
  EXPECT_NE(Slurp(supervisor_log).find("nobody is listening; run `cloister ssh-confirm ws`"),
            std::string::npos) << Slurp(supervisor_log);

  // The user's terminal: `cloister ssh-confirm ws`, its stdin a pipe the test answers through.
  int answers[2];
  ASSERT_EQ(pipe2(answers, O_CLOEXEC), 0);
  const std::string listener_out = root_ + "/ssh-confirm.out";
  pid_t listener = listener_ = fork();
  if (listener == 0) {
    dup2(answers[0], 0);
    int out = open(listener_out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    dup2(out, 2);
    for (const auto& [k, v] : env_) setenv(k.c_str(), v.c_str(), 1);
    execl(exe_.c_str(), exe_.c_str(), "--store", root_.c_str(), "ssh-confirm", "ws", nullptr);
    _exit(127);
  }
  close(answers[0]);
  ASSERT_GT(listener, 0);
  ASSERT_TRUE(testing::WaitFor(
      [&] { return Slurp(supervisor_log).find("ssh-confirm: a listener connected") != std::string::npos; },
      std::chrono::seconds(60)))
      << Slurp(listener_out);
  auto answer = [&](const std::string& a) {
    ASSERT_EQ(write(answers[1], a.data(), a.size()), static_cast<ssize_t>(a.size()));
  };
  // "n": refused.
  answer("n\n");
  std::string denied = Exec("ws", login_script, &code, "dev", {hostpub, user});
  EXPECT_EQ(denied.find("cloister-login-ok"), std::string::npos) << denied;
  EXPECT_NE(denied.find("agent refused operation"), std::string::npos) << denied;
  EXPECT_NE(Slurp(supervisor_log).find("refused by the user (SSH login as \"" + user + "\" to github.com)"),
            std::string::npos) << Slurp(supervisor_log);
  // "y" from now on (one per signature below; spare lines are never read).
  answer("y\ny\ny\ny\ny\ny\n");

  // ssh-keygen -Y sign, then -Y verify (and a changed message fails).
  std::string signed_out = Exec(
      "ws",
      "cd && printf '%s\\n' \"$0\" > ws.pub && printf 'commit 1234\\n' > msg && "
      "ssh-keygen -Y sign -f ws.pub -n git msg && printf 'dev@cloister %s\\n' \"$0\" > allowed && "
      "ssh-keygen -Y verify -f allowed -I dev@cloister -n git -s msg.sig < msg && "
      "if printf 'commit 1235\\n' | ssh-keygen -Y verify -f allowed -I dev@cloister -n git -s msg.sig; "
      "then echo FORGED; else echo changed-message-fails; fi",
      &code, "dev", {pub_line});
  EXPECT_EQ(code, 0) << signed_out;
  EXPECT_NE(signed_out.find("Good \"git\" signature for dev@cloister"), std::string::npos) << signed_out;
  EXPECT_NE(signed_out.find("changed-message-fails"), std::string::npos) << signed_out;
  EXPECT_EQ(signed_out.find("FORGED"), std::string::npos);

  // ssh logs in through the proxy's tunnel with the workspace key; a host outside the policy is
  // refused by the proxy with the hint.
  std::string login = Exec(
      "ws",
      login_script + "; ssh -o BatchMode=yes -o UserKnownHostsFile=$HOME/kh -o ConnectTimeout=120 "
                     "git@elsewhere.example.org true 2>&1; echo rc=$?",
      &code, "dev", {hostpub, user});
  EXPECT_NE(login.find("cloister-login-ok\nrc=0"), std::string::npos)
      << login << "\n" << Slurp(dir + "/sshd.log");
  std::string sshd_log = Slurp(dir + "/sshd.log");
  EXPECT_NE(sshd_log.find("Accepted publickey for"), std::string::npos) << sshd_log;
  EXPECT_NE(sshd_log.find(fingerprint), std::string::npos) << sshd_log;
  EXPECT_NE(login.find("proxy refused elsewhere.example.org:22"), std::string::npos) << login;
  EXPECT_NE(login.find("403"), std::string::npos) << login;
  EXPECT_NE(login.find("cloister ssh-policy NAME --add-host HOST"), std::string::npos) << login;
  // The proxy's trace recorded the tunnel.
  std::string trace = Slurp(root_ + "/workspaces/ws/trace.jsonl");
  EXPECT_NE(trace.find("\"host\":\"github.com\""), std::string::npos) << trace;

  // Add, remove-all and lock: refused, and the key is still the only one listed.
  std::string refused = Exec(
      "ws",
      "cd && ssh-keygen -q -t ed25519 -N '' -f newkey && "
      "printf '#!/bin/sh\\necho lockpw\\n' > askpass && chmod 700 askpass && "
      "export SSH_ASKPASS=$HOME/askpass SSH_ASKPASS_REQUIRE=force DISPLAY=:0 && "
      "ssh-add newkey </dev/null; echo add=$?; ssh-add -D </dev/null; echo removeall=$?; "
      "ssh-add -x </dev/null; echo lock=$?; ssh-add -L",
      &code, "dev");
  EXPECT_NE(refused.find("add=1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("removeall=1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("lock=1"), std::string::npos) << refused;
  size_t listed_after = 0;
  for (const std::string& l : Split(refused, '\n')) {
    if (StartsWith(l, "ssh-ed25519 ")) {
      ++listed_after;
      EXPECT_EQ(l.substr(0, pub_key.size()), pub_key);
    }
  }
  EXPECT_EQ(listed_after, 1u) << refused;

  // No private key bytes in the guest. A canary (random bytes) written to the home proves the
  // scans can find.
  std::mt19937_64 rng(std::random_device{}());
  std::string canary;
  do {
    canary.clear();
    for (int i = 0; i < 32; ++i) canary.push_back(static_cast<char>(rng() & 0xff));
  } while (!ShellSafeBinary(canary));
  const std::vector<std::string> forms = {seed, HexEncode(seed), vault::Base64Encode(seed),
                                          vault::Base64Encode(seed, false, false),
                                          vault::Base64Encode(seed, true, false)};
  // In the guest, as root: every process environment (needles travel split, as octal for the
  // binary ones, so they exist whole only in the shell's memory).
  std::vector<std::string> args;
  std::vector<std::string> coded = {Octal(seed), forms[1], forms[2], forms[3], forms[4], Octal(canary)};
  for (const std::string& n : coded) {
    args.push_back(n.substr(0, n.size() / 2));
    args.push_back(n.substr(n.size() / 2));
  }
  std::string scan = Exec(
      "ws",
      "S=$(printf \"$0$1\"); H=$2$3; B=$4$5; U=$6$7; W=$8$9; C=$(printf \"${10}${11}\"); "
      "printf %s \"$C\" > /home/dev/canary.bin && sync; "
      "n=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\000' '\\n' | "
      "    grep -c -F -e \"$S\" -e \"$H\" -e \"$B\" -e \"$U\" -e \"$W\"); echo \"key environ $n\"; "
      "echo \"canary file $(tr '\\000' '\\n' < /home/dev/canary.bin | grep -c -F -e \"$C\")\"",
      &code, "root", args);
  EXPECT_EQ(code, 0) << scan;
  EXPECT_NE(scan.find("key environ 0\n"), std::string::npos) << scan;
  EXPECT_NE(scan.find("canary file 1\n"), std::string::npos) << "the in-guest search cannot find: " << scan;
  // The guest's block devices as the host stores them: every file of the workspace directory
  // (system and home layers, the metadata disk, logs, config, trace). The canary is in the home.
  for (const std::string& f : forms) {
    auto found = FindInWorkspaceFiles("ws", f);
    EXPECT_TRUE(found.empty()) << "key bytes in " << found.begin()->first;
  }
  auto canary_found = FindInWorkspaceFiles("ws", canary);
  EXPECT_FALSE(canary_found.empty()) << "the host-side scan cannot find the canary";
  bool in_home = false;
  for (const auto& [path, n] : canary_found) {
    if (path.find("/home.") != std::string::npos) in_home = true;
  }
  EXPECT_TRUE(in_home);
  ASSERT_NO_FATAL_FAILURE(Stop("ws"));

  // The listener asked on its terminal, was answered, and left when the VM stopped.
  int status = -1;
  ASSERT_TRUE(testing::WaitFor([&] { return waitpid(listener, &status, WNOHANG) == listener; },
                               std::chrono::seconds(60)));
  listener_ = -1;
  close(answers[1]);
  std::string asked = Slurp(listener_out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << asked;
  EXPECT_NE(asked.find("ws asks to SSH login as \"" + user + "\" to github.com with its key " + fingerprint),
            std::string::npos) << asked;
  EXPECT_NE(asked.find("ws asks to sign data (ssh-keygen -Y sign, namespace \"git\")"),
            std::string::npos) << asked;
  EXPECT_NE(asked.find("refused\n"), std::string::npos) << asked;
  EXPECT_NE(asked.find("allowed\n"), std::string::npos) << asked;
  EXPECT_NE(asked.find("ws stopped; no more requests"), std::string::npos) << asked;
}

}  // namespace
}  // namespace cloister::vm

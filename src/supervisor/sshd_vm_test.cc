// IDE access over SSH in a real VM (issue 17's proof), under TCG with the test image and the real
// `cloister` binary, in one boot. The host's own OpenSSH uses the config `cloister ssh-config`
// prints (ProxyCommand `cloister _ssh-stdio ws`: a channel stream to the guest's sshd service;
// the guest listens on no port):
//   - the host key pinned before a `wipe` is refused after it (ssh: REMOTE HOST IDENTIFICATION
//     HAS CHANGED; `cloister ssh` names the fix) until ssh-config runs again;
//   - `ssh ws.cloister echo ok` as dev, `cloister ssh ws -- CMD`, `scp` both ways, `sftp`,
//     `rsync -e ssh` of a tree (modes kept);
//   - an unknown client key is refused, even when the guest put it in ~dev/.ssh/authorized_keys;
//   - `ssh -A` with a host ssh-agent holding a key: in the session SSH_AUTH_SOCK is the
//     workspace's agent and lists the workspace key only, never the host agent's;
//   - the client key's private part is in no file of the workspace directory (disk layers,
//     metadata disk) and nowhere in the guest's /run, /etc, /home, /root, /tmp, while the same
//     scan finds the client's public key in the guest.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_net.h"
#include "sshagent/ide_keys.h"
#include "supervisor/testing.h"
#include "vault/crypto.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using testing::Slurp;

class SshdVmTest : public testing::CliVmTest {
 protected:
  void TearDown() override {
    for (pid_t p : agents_) testnet::StopDaemon(p);  // each unlinks its socket as it goes
    testing::CliVmTest::TearDown();
  }

  // Host OpenSSH tool (`ssh`, `scp`, `sftp`) with -F `config`, no agent unless `agent`.
  RunOutput Tool(const std::string& tool, const std::string& config, std::vector<std::string> args,
                 const std::string& agent = "") {
    std::vector<std::string> argv = {tool, "-F", config, "-o", "BatchMode=yes"};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions ro;
    ro.timeout = std::chrono::seconds(300);
    ro.env_set = env_;
    if (agent.empty()) {
      ro.env_unset = {"SSH_AUTH_SOCK"};
    } else {
      ro.env_set["SSH_AUTH_SOCK"] = agent;
    }
    auto r = RunProcess(argv, ro);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }

  std::vector<pid_t> agents_;
};

TEST_F(SshdVmTest, OpenSshThroughSshConfigReachesTheGuestSshdAndNothingMore) {
  if (!ProgramExists("ssh") || !ProgramExists("ssh-agent")) GTEST_SKIP() << "needs openssh-client";
  setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
  env_["CLOISTER_VAULT_KEY_BACKEND"] = "file";
  auto created = Cloister({"create", "ws", "--image", image_dir() + "/disk.raw", "--memory", "384",
                           "--cpus", "1", "--home-size", "256M"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string dir = root_ + "/t";
  fs::create_directories(dir);
  const std::string cfg = dir + "/ssh_config";

  // Pinned before a wipe: the old key.
  auto old_cfg = Cloister({"ssh-config", "ws"});
  ASSERT_EQ(old_cfg.exit_code, 0) << old_cfg.err;
  std::ofstream(cfg) << old_cfg.out;
  ASSERT_EQ(Cloister({"wipe", "ws", "--yes"}).exit_code, 0);
  ASSERT_NO_FATAL_FAILURE(Start("ws"));

  auto refused = Tool("ssh", cfg, {"ws.cloister", "echo ok"});
  EXPECT_EQ(refused.exit_code, 255) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("REMOTE HOST IDENTIFICATION HAS CHANGED"), std::string::npos) << refused.err;
  auto refused2 = Cloister({"ssh", "ws", "--", "echo", "ok"});
  EXPECT_NE(refused2.exit_code, 0);
  EXPECT_NE(refused2.err.find("cloister ssh-config ws"), std::string::npos) << refused2.err;

  // ssh-config again: the new key is pinned, and everything works.
  auto fresh = Cloister({"ssh-config", "ws"});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  std::ofstream(cfg) << fresh.out;
  auto ok = Tool("ssh", cfg, {"ws.cloister", "echo ok; id -un; echo \"sock=$SSH_AUTH_SOCK\""});
  ASSERT_EQ(ok.exit_code, 0) << ok.err << "\n" << Slurp(root_ + "/workspaces/ws/console.log");
  EXPECT_EQ(ok.out, "ok\ndev\nsock=/run/cloister/ssh-agent.sock\n");
  auto via = Cloister({"ssh", "ws", "--", "echo", "via-cloister-ssh"});
  EXPECT_EQ(via.exit_code, 0) << via.err;
  EXPECT_EQ(via.out, "via-cloister-ssh\n");

  // scp both ways, sftp, rsync.
  std::string data;
  for (int i = 0; i < 200000; ++i) data += static_cast<char>('a' + (i * 7) % 26);
  std::ofstream(dir + "/up.bin") << data;
  auto up = Tool("scp", cfg, {"-q", dir + "/up.bin", "ws.cloister:up.bin"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  auto down = Tool("scp", cfg, {"-q", "ws.cloister:up.bin", dir + "/down.bin"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_EQ(Slurp(dir + "/down.bin"), data);
  int code = -1;
  EXPECT_EQ(Exec("ws", "wc -c < /home/dev/up.bin", &code), "200000\n");
  std::ofstream(dir + "/batch") << "put " << dir << "/up.bin sftp.bin\nget sftp.bin " << dir
                                << "/sftp-back.bin\n";
  auto sftp = Tool("sftp", cfg, {"-b", dir + "/batch", "ws.cloister"});
  ASSERT_EQ(sftp.exit_code, 0) << sftp.err;
  EXPECT_EQ(Slurp(dir + "/sftp-back.bin"), data);
  if (ProgramExists("rsync")) {
    fs::create_directories(dir + "/tree/sub");
    std::ofstream(dir + "/tree/sub/f") << "rsync me";
    chmod((dir + "/tree/sub/f").c_str(), 0640);
    RunOptions ro;
    ro.timeout = std::chrono::seconds(300);
    ro.env_set = env_;
    ro.env_unset = {"SSH_AUTH_SOCK"};
    auto rs = RunProcess({"rsync", "-a", "-e", "ssh -F " + cfg + " -o BatchMode=yes", dir + "/tree/",
                          "ws.cloister:tree/"},
                         ro);
    ASSERT_TRUE(rs.ok());
    EXPECT_EQ(rs->exit_code, 0) << rs->err;
    EXPECT_EQ(Exec("ws", "cat tree/sub/f; echo; stat -c %a tree/sub/f", &code), "rsync me\n640\n");
  } else {
    ADD_FAILURE() << "rsync is not installed (scripts/install-deps.sh test)";
  }

  // An unknown client key is refused, even one the guest authorised itself.
  const std::string other = dir + "/other";
  ASSERT_EQ(RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other})->exit_code, 0);
  Exec("ws", "mkdir -p ~/.ssh && chmod 700 ~/.ssh && printf '%s\\n' \"$0\" >> ~/.ssh/authorized_keys "
             "&& chmod 600 ~/.ssh/authorized_keys",
       &code, "dev", {Trim(Slurp(other + ".pub"))});
  ASSERT_EQ(code, 0);
  std::string other_cfg_text = fresh.out;
  std::string client_path = root_ + "/keys/" + sshagent::kClientKeyFile;
  size_t at = other_cfg_text.find(client_path);
  ASSERT_NE(at, std::string::npos);
  other_cfg_text.replace(at, client_path.size(), other);
  std::ofstream(dir + "/other_config") << other_cfg_text;
  auto unknown = Tool("ssh", dir + "/other_config", {"ws.cloister", "echo ok"});
  EXPECT_EQ(unknown.exit_code, 255);
  EXPECT_EQ(unknown.out, "");
  EXPECT_NE(unknown.err.find("Permission denied (publickey)"), std::string::npos) << unknown.err;

  // ssh -A with the user's own agent holding a key: the session sees the workspace agent only.
  const std::string host_agent = dir + "/agent.sock", user_key = dir + "/userkey";
  ASSERT_EQ(RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", user_key})->exit_code, 0);
  auto a = RunProcess({"ssh-agent", "-a", host_agent});
  ASSERT_TRUE(a.ok() && a->exit_code == 0);
  size_t pid_at = a->out.find("SSH_AGENT_PID=");
  if (pid_at != std::string::npos) agents_.push_back(std::stoi(a->out.substr(pid_at + 14)));
  RunOptions add;
  add.env_set = {{"SSH_AUTH_SOCK", host_agent}};
  ASSERT_EQ(RunProcess({"ssh-add", user_key}, add)->exit_code, 0);
  std::vector<std::string> user_pub = Split(Trim(Slurp(user_key + ".pub")), ' ');
  auto ws_key = nlohmann::json::parse(Cloister({"ssh-keygen", "ws", "--json"}).out, nullptr, false);
  ASSERT_FALSE(ws_key.is_discarded());
  std::vector<std::string> ws_pub = Split(ws_key["public_key"].get<std::string>(), ' ');
  auto fwd = Tool("ssh", cfg, {"-A", "-o", "ForwardAgent=yes", "ws.cloister",
                               "echo \"sock=$SSH_AUTH_SOCK\"; ssh-add -L"},
                  host_agent);
  EXPECT_EQ(fwd.exit_code, 0) << fwd.err;
  EXPECT_NE(fwd.out.find("sock=/run/cloister/ssh-agent.sock\n"), std::string::npos) << fwd.out;
  EXPECT_NE(fwd.out.find(ws_pub[0] + " " + ws_pub[1]), std::string::npos) << fwd.out;
  EXPECT_EQ(fwd.out.find(user_pub[1]), std::string::npos) << "the host agent reached the guest:\n"
                                                          << fwd.out;

  // The client key's private part never entered the guest.
  std::string key_text = Slurp(client_path);
  auto client = sshagent::ParseOpenSshPrivateKey(key_text);
  ASSERT_TRUE(client.ok());
  auto seed = client->Seed();
  ASSERT_TRUE(seed.ok());
  std::vector<std::string> needles = {HexEncode(seed->str()), vault::Base64Encode(seed->str()),
                                      vault::Base64Encode(seed->str(), false, false)};
  std::vector<std::string> lines = Split(key_text, '\n');
  ASSERT_GE(lines.size(), 5u);
  for (size_t i = 2; i + 2 < lines.size(); ++i) needles.push_back(lines[i]);  // the private part
  needles.push_back(seed->str());
  for (const std::string& n : needles) {
    auto found = FindInWorkspaceFiles("ws", n);
    EXPECT_TRUE(found.empty()) << "client key bytes in " << found.begin()->first;
  }
  std::vector<std::string> client_pub = Split(client->AuthorizedKeysLine(""), ' ');
  std::vector<std::string> args = {client_pub[1]};
  for (size_t i = 0; i + 1 < needles.size(); ++i) args.push_back(needles[i]);
  std::string scan = Exec(
      "ws",
      "n=0; for s in \"$@\"; do c=$(grep -rlF -e \"$s\" /run /etc /home /root /tmp 2>/dev/null | "
      "wc -l); n=$((n + c)); done; "
      "echo \"private $n\"; echo \"public $(grep -rlF -e \"$0\" /run/cloister/sshd | wc -l)\"",
      &code, "root", args);
  EXPECT_NE(scan.find("private 0\n"), std::string::npos) << scan;
  EXPECT_NE(scan.find("public 1\n"), std::string::npos) << "the in-guest scan cannot find: " << scan;
  ASSERT_NO_FATAL_FAILURE(Stop("ws"));
}

}  // namespace
}  // namespace cloister::vm

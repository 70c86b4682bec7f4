// `cloister ssh-confirm NAME` end to end without a VM: the real verb answers a SshConfirmBroker
// served on the workspace's control socket (as the supervisor serves it), the workspace's
// sign-only agent asks that broker, and OpenSSH's own `ssh-keygen -Y sign` signs through the
// agent: allowed, refused, and refused when nobody listens.
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "cli/cli.h"
#include "sshagent/key_store.h"
#include "sshagent/unix_server.h"
#include "sshagent/vault_key_store.h"
#include "store/env.h"
#include "supervisor/control.h"
#include "supervisor/ssh_confirm.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class SshConfirmCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists("ssh-keygen")) GTEST_SKIP() << "needs openssh-client";
    char tmpl[] = "/tmp/cloister-ssh-confirm.XXXXXX";
    dir_ = mkdtemp(tmpl);
    ASSERT_TRUE(Env::Default()->Truncate(dir_ + "/base.raw", 64 << 20).ok());
    store_ = dir_ + "/s";
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    std::istringstream none;
    ASSERT_EQ(Run({"create", "dev", "--image", dir_ + "/base.raw", "--home-size", "64M"}, none).code, 0);

    vm::SshConfirmBroker::Options o;
    o.workspace = "dev";
    o.enabled = true;
    o.fingerprint = "SHA256:x";
    o.timeout = std::chrono::seconds(20);
    o.log = [this](const std::string& l) {
      std::lock_guard<std::mutex> g(log_mu_);
      log_ += l + "\n";
    };
    broker_ = std::make_shared<vm::SshConfirmBroker>(o);
    // The agent the supervisor would build for a workspace with confirmation on.
    sshagent::VaultKeyStore ks(vault::VaultLocation{store_ + "/keys",
                                                    store_ + "/workspaces/dev/secrets.enc", "dev"});
    auto agent = sshagent::AgentForWorkspace(
        ks, "dev", [b = broker_](const sshagent::SignRequestInfo& i) { return b->Confirm(i); });
    ASSERT_TRUE(agent.ok()) << agent.error().ToString();
    agent_ = std::move(agent).value();
    sock_ = dir_ + "/agent.sock";
    auto server = sshagent::UnixAgentServer::Start(sock_, agent_.get());
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();

    // The supervisor's end of the control socket: the "ssh-confirm" op goes to the broker.
    std::string run = store_ + "/workspaces/dev/run";
    fs::create_directories(run);
    chmod(run.c_str(), 0700);
    auto listen_fd = vm::ListenUnix(run + "/supervisor.sock");
    ASSERT_TRUE(listen_fd.ok()) << listen_fd.error().ToString();
    listen_fd_ = *listen_fd;
    acceptor_ = std::thread([this] {
      while (true) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;
        vm::LineConn conn(fd);
        auto req = conn.Read(Clock::now() + std::chrono::seconds(10));
        if (req.ok() && vm::JsonString(*req, "op") == vm::kSshConfirmOp) broker_->ServeListener(conn);
      }
    });
  }
  void TearDown() override {
    if (broker_) broker_->Stop();
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
    if (server_) server_->Stop();
    if (!dir_.empty()) (void)Env::Default()->RemoveAll(dir_);
  }

  struct Outcome {
    int code;
    std::string out, err;
  };
  Outcome Run(std::vector<std::string> args, std::istream& in) {
    std::vector<std::string> full = {"cloister", "--store", store_};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<const char*> argv;
    for (const auto& a : full) argv.push_back(a.c_str());
    std::ostringstream out, err;
    int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, in);
    return {code, out.str(), err.str()};
  }

  // OpenSSH signs `msg` with the workspace key through the agent; true if it produced a signature.
  bool Sign(const std::string& msg) {
    std::string file = dir_ + "/" + msg;
    std::ofstream(file) << msg << "\n";
    RunOptions ro;
    ro.env_set["SSH_AUTH_SOCK"] = sock_;
    ro.timeout = std::chrono::seconds(60);
    auto r = RunProcess({"ssh-keygen", "-Y", "sign", "-f", store_ + "/workspaces/dev/ssh/id_ed25519.pub",
                         "-n", "git", file}, ro);
    EXPECT_TRUE(r.ok());
    last_err_ = r.ok() ? r->err : "";
    return r.ok() && r->exit_code == 0 && fs::exists(file + ".sig");
  }

  std::string Log() {
    std::lock_guard<std::mutex> g(log_mu_);
    return log_;
  }

  std::string dir_, store_, sock_, last_err_;
  std::shared_ptr<vm::SshConfirmBroker> broker_;
  std::unique_ptr<sshagent::SignOnlyAgent> agent_;
  std::unique_ptr<sshagent::UnixAgentServer> server_;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::mutex log_mu_;
  std::string log_;
};

TEST_F(SshConfirmCliTest, NobodyListeningMeansRefused) {
  EXPECT_FALSE(Sign("m0"));
  EXPECT_NE(last_err_.find("agent refused operation"), std::string::npos) << last_err_;
  EXPECT_NE(Log().find("nobody is listening; run `cloister ssh-confirm dev`"), std::string::npos) << Log();
  EXPECT_EQ(agent_->signatures(), 0u);
}

TEST_F(SshConfirmCliTest, TheUserAllowsAndDeniesOnTheTerminal) {
  // The user answers "n" to the first request and "y" to the second.
  std::istringstream answers("n\ny\n");
  auto listener = std::async(std::launch::async, [&] { return Run({"ssh-confirm", "dev"}, answers); });
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (broker_->listeners() == 0 && Clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(broker_->listeners(), 1);
  EXPECT_FALSE(Sign("m1"));
  EXPECT_NE(last_err_.find("agent refused operation"), std::string::npos) << last_err_;
  EXPECT_TRUE(Sign("m2"));
  EXPECT_EQ(agent_->signatures(), 1u);
  // The VM stops: the listener is hung up and exits cleanly.
  broker_->Stop();
  Outcome o = listener.get();
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("dev asks to sign data (ssh-keygen -Y sign, namespace \"git\") with its key SHA256:x. Allow? [y/N]"),
            std::string::npos) << o.err;
  EXPECT_NE(o.err.find("refused\n"), std::string::npos);
  EXPECT_NE(o.err.find("allowed\n"), std::string::npos);
  EXPECT_NE(o.err.find("dev stopped; no more requests"), std::string::npos) << o.err;
  EXPECT_NE(Log().find("refused by the user"), std::string::npos);
  EXPECT_NE(Log().find("allowed by the user"), std::string::npos);
}

TEST_F(SshConfirmCliTest, StdinEndingRefusesAndStopsListening) {
  std::istringstream nothing("");
  auto listener = std::async(std::launch::async, [&] { return Run({"ssh-confirm", "dev"}, nothing); });
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (broker_->listeners() == 0 && Clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(broker_->listeners(), 1);
  EXPECT_FALSE(Sign("m3"));
  Outcome o = listener.get();
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("stdin ended"), std::string::npos) << o.err;
  EXPECT_EQ(agent_->signatures(), 0u);
}

TEST_F(SshConfirmCliTest, AListenerForAWorkspaceWithoutConfirmationIsTurnedAway) {
  broker_->Configure(false, "SHA256:x");
  std::istringstream none;
  Outcome o = Run({"ssh-confirm", "dev"}, none);
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("confirmation of SSH signatures is off for dev"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("ssh-policy dev --confirm on"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace cloister::cli

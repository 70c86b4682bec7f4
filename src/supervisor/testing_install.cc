#include "supervisor/testing_install.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/strings.h"
#include "base/subprocess.h"
#include "channel/mux.h"
#include "guest/forward.h"
#include "image/npm_tarball.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/npm_tree.h"
#include "proxy/proxy.h"
#include "proxy/trace.h"
#include "protocol/contract.h"

namespace cloister::vm::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class InstallRig::Impl {
 public:
  ~Impl() {
    if (listen_fd >= 0) shutdown(listen_fd, SHUT_RDWR);
    if (accepter.joinable()) accepter.join();
    if (listen_fd >= 0) close(listen_fd);
    if (guest_mux) guest_mux->Stop();
    if (host_mux) host_mux->Stop();
    if (proxy) proxy->Stop();
    fake.reset();
    std::error_code ec;
    if (!work.empty()) fs::remove_all(work, ec);
  }

  std::string work;
  std::shared_ptr<proxy::testing::NpmRegistryFake> registry;
  std::unique_ptr<proxy::testing::FakeUpstream> fake;
  std::unique_ptr<proxy::Proxy> proxy;
  std::unique_ptr<channel::Mux> host_mux, guest_mux;
  int listen_fd = -1;
  std::thread accepter;
  std::string upstream_ca_file, proxy_ca_file, registry_url, direct_url, proxy_url;
  std::mutex mu;
  std::map<std::string, double> served;
  std::vector<std::string> forward_log;
};

Result<std::unique_ptr<InstallRig>> InstallRig::Start(InstallRigOptions o) {
  std::unique_ptr<InstallRig> rig(new InstallRig());
  rig->impl_ = std::make_unique<Impl>();
  Impl& r = *rig->impl_;
  char tmpl[] = "/tmp/cloister-install-rig-XXXXXX";
  if (!mkdtemp(tmpl)) return ErrnoError("mkdtemp", errno);
  r.work = tmpl;

  // The tree, cached beside the npm tarballs (deterministic for its size).
  ASSIGN_OR_RETURN(proxy::testing::NpmTree tree,
                   proxy::testing::WriteNpmTree(image::NpmCacheDir() + "/install-tree-" +
                                                    std::to_string(o.packages),
                                                {.packages = o.packages}));
  rig->root_spec_ = tree.root;
  rig->tarballs_ = tree.tarballs;
  ASSIGN_OR_RETURN(r.registry, proxy::testing::NpmRegistryFake::Load(tree.dir));
  for (const auto& t : r.registry->tarballs()) rig->tree_bytes_ += fs::file_size(t.path);

  ASSIGN_OR_RETURN(auto upstream_ca, proxy::CertAuthority::CreateInMemory("install rig upstream CA"));
  ASSIGN_OR_RETURN(auto proxy_ca, proxy::CertAuthority::CreateInMemory("install rig proxy CA"));
  r.upstream_ca_file = r.work + "/upstream-ca.pem";
  r.proxy_ca_file = r.work + "/proxy-ca.pem";
  std::ofstream(r.upstream_ca_file) << upstream_ca->cert_pem();
  std::ofstream(r.proxy_ca_file) << proxy_ca->cert_pem();

  proxy::testing::Handler npm = r.registry->handler(o.behaviour);
  Impl* impl = &r;
  ASSIGN_OR_RETURN(r.fake, proxy::testing::FakeUpstream::Start(
                               upstream_ca, [npm, impl](const proxy::testing::SeenRequest& req,
                                                        proxy::testing::ResponseWriter& w) {
                                 auto start = Clock::now();
                                 npm(req, w);
                                 double ms = std::chrono::duration<double, std::milli>(
                                                 Clock::now() - start).count();
                                 std::lock_guard<std::mutex> l(impl->mu);
                                 double& slot = impl->served[proxy::TracePath(req.target)];
                                 slot = std::max(slot, ms);
                               }));
  const std::string authority = "registry.npm.test:" + std::to_string(r.fake->port());
  r.registry_url = "https://" + authority + "/";
  r.direct_url = "https://localhost:" + std::to_string(r.fake->port()) + "/";

  rig->trace_file_ = r.work + "/trace.jsonl";
  ASSIGN_OR_RETURN(auto sink, proxy::TraceSink::Open(rig->trace_file_));
  proxy::ProxyConfig pc;
  pc.workspace = "rig";
  pc.ca = proxy_ca;
  pc.resolve = {{authority, r.fake->Address()}};
  pc.resolve_only = true;
  pc.upstream_ca_file = r.upstream_ca_file;
  pc.trace = sink;
  ASSIGN_OR_RETURN(r.proxy, proxy::Proxy::Start(std::move(pc)));

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoError("socketpair", errno);
  channel::MuxOptions hm, gm;
  hm.role = channel::MuxRole::kHost;
  hm.max_streams = protocol::kHostChannelStreams;  // as the supervisor and the agent set them
  gm.role = channel::MuxRole::kGuest;
  gm.max_streams = protocol::kGuestChannelStreams;
  ASSIGN_OR_RETURN(r.host_mux, channel::Mux::Create(sv[0], hm));
  ASSIGN_OR_RETURN(r.guest_mux, channel::Mux::Create(sv[1], gm));
  proxy::Proxy* px = r.proxy.get();
  r.host_mux->RegisterService(protocol::kProxyService,
                              [px](int fd, const std::vector<std::string>&) { px->Serve(fd); });
  RETURN_IF_ERROR(r.host_mux->Start());
  RETURN_IF_ERROR(r.guest_mux->Start());

  // The guest agent's accept loop for its proxy forward (guest/boot.cc), on a loopback port.
  r.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (r.listen_fd < 0 || bind(r.listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      listen(r.listen_fd, 128) != 0 ||
      getsockname(r.listen_fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    return ErrnoError("listen for the guest forward", errno);
  }
  r.proxy_url = "http://127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  r.accepter = std::thread([impl] {
    for (;;) {
      int conn = accept4(impl->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // the listener was shut down
      }
      guest::ForwardConnection(impl->guest_mux.get(), protocol::kProxyService, conn,
                               [impl](const std::string& line) {
                                 std::lock_guard<std::mutex> l(impl->mu);
                                 impl->forward_log.push_back(line);
                               });
    }
  });
  return rig;
}

InstallRig::~InstallRig() = default;

NpmRun InstallRig::Npm(const std::string& npm_cli, bool through_proxy, const std::string& dir) {
  Impl& r = *impl_;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir + "/home", ec);
  std::ofstream(dir + "/npmrc") << "";
  std::vector<std::string> argv = {"node", npm_cli, "install", "--prefix", dir + "/prefix",
                                   "--cache", dir + "/cache", "--registry",
                                   through_proxy ? r.registry_url : r.direct_url, "--cafile",
                                   through_proxy ? r.proxy_ca_file : r.upstream_ca_file,
                                   "--no-audit", "--no-fund", "--no-update-notifier",
                                   "--loglevel=http", "--fetch-timeout=300000"};
  if (through_proxy) {
    argv.push_back("--https-proxy=" + r.proxy_url);
    argv.push_back("--proxy=" + r.proxy_url);
  }
  argv.push_back(root_spec_);
  RunOptions ro;
  ro.env_set = {{"HOME", dir + "/home"}, {"npm_config_userconfig", dir + "/npmrc"}};
  ro.env_unset = {"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY",
                  "all_proxy", "NO_PROXY", "no_proxy", "npm_config_proxy",
                  "npm_config_https_proxy", "npm_config_registry", "NODE_EXTRA_CA_CERTS"};
  ro.timeout = std::chrono::minutes(12);
  auto start = Clock::now();
  auto out = RunProcess(argv, ro);
  NpmRun run;
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!out.ok()) {
    run.log = out.error().ToString();
    return run;
  }
  run.ok = out->success();
  run.log = out->out + out->err;
  for (const std::string& line : Split(run.log, '\n')) {
    if (line.find(" attempt #") != std::string::npos ||
        line.find(" failed with ") != std::string::npos) {
      run.retries.push_back(line);
    }
  }
  return run;
}

double InstallRig::ServedMs(const std::string& path) {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->served.find(path);
  return it == impl_->served.end() ? -1 : it->second;
}

std::vector<std::string> InstallRig::ForwardLog() {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->forward_log;
}

Result<std::string> UnpackDebianNpm(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string tgz, image::VerifiedNpmTarball(image::kDebianNpm, image::NpmCacheDir()));
  std::error_code ec;
  fs::remove_all(dir, ec);
  RETURN_IF_ERROR(image::UnpackNpmTarball(tgz, dir));
  return dir + "/bin/npm-cli.js";
}

}  // namespace cloister::vm::testing

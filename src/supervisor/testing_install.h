// Tests and benches only: real package managers on this host taking the path a guest's client
// takes to the egress proxy, without a VM:
//   client -> the guest agent's proxy forward (guest/forward.h, on a loopback port) -> a guest
//   channel::Mux stream -> the host Mux (over a socketpair, as over the virtio-serial port) ->
//   Proxy::Serve -> the fake npm registry (proxy/npm_fake.h) on loopback, TLS
// with both muxes capped as the agent and the supervisor cap them (protocol/contract.h). The
// registry serves a synthetic tree (proxy/npm_tree.h) under a made-up name that only the proxy's
// resolve override maps; a client going direct reaches the same fake as localhost.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/result.h"
#include "proxy/npm_fake.h"

namespace cloister::vm::testing {

struct InstallRigOptions {
  size_t packages = 75;  // the tree's size (proxy/npm_tree.h)
  proxy::testing::RegistryBehaviour behaviour;
};

// One npm run's outcome.
struct NpmRun {
  bool ok = false;
  double seconds = 0;
  std::string log;                   // npm's stdout and stderr (--loglevel=http)
  std::vector<std::string> retries;  // its "attempt #N" and "failed with" lines
};

class InstallRig {
 public:
  static Result<std::unique_ptr<InstallRig>> Start(InstallRigOptions options);
  ~InstallRig();

  // `npm_cli` (an npm-cli.js, run with this host's node) installs the tree's root into a fresh
  // prefix and cache under `dir`, through the proxy or directly.
  NpmRun Npm(const std::string& npm_cli, bool through_proxy, const std::string& dir);

  const std::string& root_spec() const { return root_spec_; }
  size_t tarballs() const { return tarballs_; }
  uint64_t tree_bytes() const { return tree_bytes_; }
  const std::string& trace_file() const { return trace_file_; }
  // The longest the fake took to serve `path` (ms; -1: never asked).
  double ServedMs(const std::string& path);
  // What the guest forward logged (open failures).
  std::vector<std::string> ForwardLog();

  class Impl;

 private:
  InstallRig() = default;
  std::unique_ptr<Impl> impl_;
  std::string root_spec_, trace_file_;
  size_t tarballs_ = 0;
  uint64_t tree_bytes_ = 0;
};

// npm 9.2.0 (image/npm_tarball.h kDebianNpm) unpacked under `dir`: its npm-cli.js.
Result<std::string> UnpackDebianNpm(const std::string& dir);

}  // namespace cloister::vm::testing

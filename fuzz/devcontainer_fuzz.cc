// Fuzzes the readers of a repository's devcontainer.json, devcontainer-feature.json and a build
// context's .dockerignore (devcontainer/config.h, feature.h, jsonc.h, dockerignore.h): the repository is hostile (an agent may have written
// it). Nothing may crash; what is accepted must hold the bounds the rest of cloister relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "devcontainer/config.h"
#include "devcontainer/dockerignore.h"
#include "devcontainer/env_check.h"
#include "devcontainer/feature.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cloister::devcontainer;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto c = ParseConfig(text, "devcontainer.json");
  if (c.ok()) {
    if (c->image.empty() == !c->build.has_value()) std::abort();
    if (c->features.size() > kMaxFeatures || c->forward_ports.size() > kMaxForwardPorts) std::abort();
    for (uint16_t p : c->forward_ports) {
      if (p == 0) std::abort();
    }
    if (!CheckContainerEnv(c->container_env, "containerEnv").ok()) std::abort();
    for (const auto& [key, cmd] : c->lifecycle) {
      if (cmd.commands.empty() || cmd.commands.size() > kMaxCommands) std::abort();
      auto back = LifecycleFromJson(LifecycleToJson(cmd), key);
      if (!back.ok() || !(*back == cmd)) std::abort();
    }
    for (const FeatureRequest& f : c->features) {
      if (f.ref.local() ? f.ref.path.empty() : f.ref.registry.empty()) std::abort();
    }
  }
  auto m = ParseFeatureMetadata(text, "devcontainer-feature.json");
  if (m.ok()) {
    if (m->id.empty() || m->options.size() > kMaxOptions) std::abort();
    (void)FeatureEnvironment(*m, {{"version", "1"}}, {"dev", "/home/dev"});
  }
  auto ignore = DockerIgnore::Parse(text);
  if (ignore.ok()) {
    for (const char* path : {"a", "node_modules/x/y", ".git/config", "a/b/c/d/e/f/g", "docs/keep.md"}) {
      (void)ignore->Excluded(path);
    }
  }
  return 0;
}

// Fuzzes the guest agent's parser of the metadata config.json (guest/config.h): the host writes
// it, but the agent runs it as root and a damaged disk or a mismatched build must never crash it;
// the `tool` name must only ever select a row of the compiled-in table; a devcontainer's
// lifecycle steps (guest/devcontainer.h) hold each command as exactly one of shell text or argv.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/agent_tools.h"
#include "guest/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto c = cloister::guest::ParseAgentConfig(text);
  if (c.ok()) {
    if (!cloister::FindAgentTool(c->tool)) std::abort();
    if (!c->workdir.empty() && c->workdir[0] != '/') std::abort();
    (void)cloister::guest::ProfileScript(c->env);
    const auto& dc = c->devcontainer;
    for (const auto* steps : {&dc.create, &dc.start}) {
      if (steps->size() > cloister::guest::kMaxLifecycleSteps) std::abort();
      for (const auto& s : *steps) {
        if (s.commands.empty() || (!s.parallel && s.commands.size() != 1)) std::abort();
        for (const auto& cmd : s.commands) {
          if (cmd.shell.empty() == cmd.argv.empty()) std::abort();
        }
      }
    }
  }
  return 0;
}

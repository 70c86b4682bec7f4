#include "guest/tool.h"

#include <sys/wait.h>
#include <cerrno>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "base/file_util.h"
#include "guest/config.h"
#include "guest/spawn.h"

namespace cloister::guest {

namespace {

std::string Q(std::string_view v) { return ShellQuote(std::string(v)); }

// Run by the user before the first start of Claude Code: the onboarding is marked done, the
// placeholder key (its last 20 characters, as Claude Code records an approval) is approved unless
// the user rejected it, and the workdir's trust question is answered. A settings file that is not
// a JSON object is left alone. Double quotes only: it travels in single quotes.
constexpr char kClaudePrep[] = R"JS(
const fs = require("fs"), os = require("os");
const p = os.homedir() + "/.claude.json";
let c = {};
try { c = JSON.parse(fs.readFileSync(p, "utf8")); } catch (e) { if (e.code !== "ENOENT") process.exit(0); }
if (typeof c !== "object" || c === null || Array.isArray(c)) process.exit(0);
c.hasCompletedOnboarding = true;
const k = process.env.ANTHROPIC_API_KEY || "";
if (k) {
  const s = k.slice(-20);
  const r = c.customApiKeyResponses = (c.customApiKeyResponses || {});
  r.approved = Array.isArray(r.approved) ? r.approved : [];
  r.rejected = Array.isArray(r.rejected) ? r.rejected : [];
  if (!r.approved.includes(s) && !r.rejected.includes(s)) r.approved.push(s);
}
const w = process.env.CLOISTER_WORKDIR || os.homedir();
c.projects = c.projects || {};
const pr = c.projects[w] = (c.projects[w] || {});
if (pr.hasTrustDialogAccepted === undefined) pr.hasTrustDialogAccepted = true;
fs.writeFileSync(p + ".cloister-tmp", JSON.stringify(c, null, 2), { mode: 0o600 });
fs.renameSync(p + ".cloister-tmp", p);
)JS";

}  // namespace

std::string ToolPaths::Marker(const AgentTool& t) const {
  return marker_dir + "/tool-" + std::string(t.name) + ".installed";
}

std::string ToolInstallScript(const AgentTool& tool, const ToolPaths& paths) {
  std::string s = "#!/bin/sh\n# Written by cloister-agent at every boot: installs " +
                  std::string(tool.description) + " once (guest/tool.h).\n";
  s += "marker=" + Q(paths.Marker(tool)) + "\nstatus=" + Q(paths.Status()) + "\nlog=" +
       Q(paths.log) + "\nspec=" + Q(AgentToolPackageSpec(tool)) + "\ncmd=" + Q(tool.command) + "\n";
  s += R"SH(say() { printf '%s\n' "$1" > "$status.tmp" && mv -f "$status.tmp" "$status"; }
if [ "$(cat "$marker" 2>/dev/null)" = "$spec" ] && command -v "$cmd" >/dev/null 2>&1; then
  say ok
  exit 0
fi
mkdir -p "${log%/*}"
start=$(date +%s)
printf 'cloister: installing %s with npm through the workspace proxy (%s)\n' "$spec" "$(date -u)" >> "$log"
say installing
(
  if ! command -v npm >/dev/null 2>&1; then
    echo "cloister: npm is not installed in this image"
    exit 127
  fi
  exec npm install -g --no-fund --no-audit --no-update-notifier --fetch-retries=5 --loglevel=http "$spec"
) >> "$log" 2>&1 < /dev/null
rc=$?
if [ "$rc" -eq 0 ] && command -v "$cmd" >/dev/null 2>&1; then
  mkdir -p "${marker%/*}" && printf '%s\n' "$spec" > "$marker.tmp" && mv -f "$marker.tmp" "$marker"
  printf 'cloister: installed %s in %s s\n' "$spec" "$(( $(date +%s) - start ))" >> "$log"
  say ok
else
  [ "$rc" -eq 0 ] && rc=127 && echo "cloister: npm succeeded but $cmd is not on PATH" >> "$log"
  printf 'cloister: installing %s failed (exit %s)\n' "$spec" "$rc" >> "$log"
  say "failed $rc"
fi
)SH";
  return s;
}

std::string ToolWindowScript(const AgentTool& tool, const ToolPaths& paths,
                             const std::string& workdir) {
  std::string s = "#!/bin/sh\n# Written by cloister-agent at every boot: the first tmux window "
                  "runs " + std::string(tool.description) + " (guest/tool.h).\n";
  s += "status=" + Q(paths.Status()) + "\nlog=" + Q(paths.log) + "\nspec=" +
       Q(AgentToolPackageSpec(tool)) + "\ncmd=" + Q(tool.command) + "\nCLOISTER_WORKDIR=" +
       Q(workdir) + "\nexport CLOISTER_WORKDIR\n";
  s += R"SH(tailpid=
while :; do
  s=$(cat "$status" 2>/dev/null)
  case "$s" in
    ok) break ;;
    failed*)
      [ -n "$tailpid" ] && kill "$tailpid" 2>/dev/null
      printf '\ncloister: installing %s failed (%s); the log is %s\n' "$spec" "$s" "$log"
      tail -n 20 "$log" 2>/dev/null
      printf 'cloister: a shell follows; the next boot (cloister reboot) tries again\n'
      exec "${SHELL:-/bin/sh}" -l ;;
  esac
  if [ -z "$tailpid" ] && [ "$s" = installing ]; then
    printf 'cloister: first boot: installing %s (log: %s)\n' "$spec" "$log"
    tail -n +1 -f "$log" &
    tailpid=$!
  fi
  sleep 1
done
if [ -n "$tailpid" ]; then
  kill "$tailpid" 2>/dev/null
  printf 'cloister: %s is installed\n' "$spec"
fi
)SH";
  if (tool.name == "claude") {
    s += "node -e " + Q(kClaudePrep) + " 2>/dev/null\n";
  } else if (tool.name == "codex") {
    s += R"SH(if [ -n "${OPENAI_API_KEY:-}" ] && [ ! -e "$HOME/.codex/auth.json" ]; then
  printf '%s' "$OPENAI_API_KEY" | codex login --with-api-key >/dev/null 2>&1
fi
w=${CLOISTER_WORKDIR:-$HOME}
mkdir -p "$HOME/.codex"
if ! grep -qF "[projects.\"$w\"]" "$HOME/.codex/config.toml" 2>/dev/null; then
  printf '\n[projects."%s"]\ntrust_level = "trusted"\n' "$w" >> "$HOME/.codex/config.toml"
fi
)SH";
  }
  s += R"SH("$cmd"
rc=$?
printf '\ncloister: %s exited (%s); this window is now a shell (run %s to start it again)\n' "$cmd" "$rc" "$cmd"
exec "${SHELL:-/bin/sh}" -l
)SH";
  return s;
}

std::vector<std::string> ToolWindowCommand(const AgentTool& tool, const ToolPaths& paths) {
  if (tool.package.empty()) return {};
  return {"/bin/sh", paths.WindowScript()};
}

Status WriteToolWindowScript(const AgentTool& tool, const ToolPaths& paths,
                             const std::string& workdir) {
  std::error_code ec;
  std::filesystem::create_directories(paths.run_dir, ec);
  return WriteFileAtomic(paths.WindowScript(), ToolWindowScript(tool, paths, workdir), 0755);
}

Status StartToolInstall(const AgentTool& tool, const ToolPaths& paths,
                        const std::vector<std::string>& env) {
  std::error_code ec;
  std::filesystem::create_directories(paths.run_dir, ec);
  std::filesystem::create_directories(std::filesystem::path(paths.log).parent_path(), ec);
  if (Status st = WriteFileAtomic(paths.InstallScript(), ToolInstallScript(tool, paths), 0755);
      !st.ok()) {
    (void)WriteFileAtomic(paths.Status(), "failed to write the installer\n", 0644);
    return st;
  }
  SpawnSpec spec;
  // Everything the installer prints goes to the log (its pipes are closed below).
  spec.argv = {"/bin/sh", "-c", "exec /bin/sh \"$0\" >> \"$1\" 2>&1", paths.InstallScript(),
               paths.log};
  spec.env = env;
  spec.cwd = "/";
  spec.stdin_null = true;
  Result<Spawned> child = Spawn(spec);
  if (!child.ok()) {
    (void)WriteFileAtomic(paths.Status(), "failed to start the installer\n", 0644);
    return child.error();
  }
  // The child is reaped when it ends.
  for (int fd : {child->in, child->out, child->err}) {
    if (fd >= 0) close(fd);
  }
  std::thread([pid = child->pid, pidfd = child->pidfd] {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (pidfd >= 0) close(pidfd);
  }).detach();
  return OkStatus();
}

}  // namespace cloister::guest

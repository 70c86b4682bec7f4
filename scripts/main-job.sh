#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine: installs what it needs, builds cloister, makes the
# default image, creates a workspace and runs in it. It grows as the issues land.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh run
BUILD="${CLOISTER_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only what this job runs (the `product` target: the CLI and the binaries it puts on a guest's
# metadata disk); the test binaries are scripts/test.sh's.
cmake --build "$BUILD" --target product -j"$(nproc)"
CLOISTER="$PWD/$BUILD/src/cli/cloister"
"$CLOISTER" version

export CLOISTER_HOME="${CLOISTER_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/cloister}"
# The default base image (Debian 12, mmdebstrap): built once, then reused while it verifies
# against the signed local catalog (a reproducible rebuild keeps the files). Slow: 25 to 55
# minutes on 2 shared cores; every stage prints its progress.
if "$CLOISTER" image verify debian-12 >/dev/null 2>&1; then
  echo "cloister: image debian-12 already built and verified"
else
  "$CLOISTER" image build
fi
"$CLOISTER" image ls
# A workspace from the default image (`--image` omitted = debian-12, checked against its signed
# catalog), and what it records. Re-runnable: an existing workspace is kept. Then it is booted
# (KVM where it can run a stock kernel, else software emulation with a notice), a command runs in
# it through the guest agent, and it stops cleanly.
"$CLOISTER" describe main >/dev/null 2>&1 || "$CLOISTER" create main
"$CLOISTER" describe main
# The coding agent: Claude Code with ANTHROPIC_API_KEY in this environment, else Codex with
# OPENAI_API_KEY, else a plain shell. The real key goes into the workspace's encrypted vault; the
# guest only ever sees its placeholder. The first boot installs the agent in the guest (npm,
# through the workspace's egress proxy).
tool=shell kind="" var=""
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then tool=claude kind=anthropic var=ANTHROPIC_API_KEY
elif [ -n "${OPENAI_API_KEY:-}" ]; then tool=codex kind=openai var=OPENAI_API_KEY
fi
"$CLOISTER" stop main >/dev/null 2>&1 || true   # a re-run: the settings apply at a fresh start
"$CLOISTER" config main --tool "$tool"
if [ -n "$kind" ]; then "$CLOISTER" cred add main "$kind" --from-env "$var"; fi
"$CLOISTER" start main
"$CLOISTER" exec main -- sh -c 'echo "hello from $(hostname): $(uname -sr), $(id -un) in $PWD"; git --version; python3 --version; node --version'
if [ "$tool" != shell ]; then
  # Wait (bounded: 30 minutes) for the first-boot install, then show the agent answers.
  "$CLOISTER" exec main -- sh -c 'i=0; while [ $i -lt 900 ] && ! grep -qE "^(ok|failed)" /run/cloister/tool.status 2>/dev/null; do sleep 2; i=$((i+1)); done; tail -n 3 /var/log/cloister-tool.log; grep -q "^ok" /run/cloister/tool.status'
  "$CLOISTER" exec main -- "$tool" --version
fi
"$CLOISTER" ls
# The workspace stays running with its agent (or shell) ready in window 0 of its tmux session.
echo "cloister: workspace main is ready ($tool): cloister attach main   (C-b d detaches; cloister stop main)"

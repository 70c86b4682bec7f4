#!/usr/bin/env bash
# Every benchmark's smoke mode (tiny sizes, seconds), so a bench whose measured path breaks fails
# CI instead of rotting unnoticed. Runs each executable in the build tree's bench/ directory that
# supports --smoke (its binary contains the string "--smoke"; a bench without one is listed as
# skipped); fails when any of them exits non-zero. Each bench finds what it needs by itself.
# Usage: scripts/bench-smoke.sh [BUILD_DIR]   (default: $CLOISTER_BUILD_DIR or build)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-${CLOISTER_BUILD_DIR:-build}}"
dir="$BUILD/bench"
if [ ! -d "$dir" ]; then
  echo "bench-smoke: no $dir (Hint: build first: cmake --build $BUILD)" >&2
  exit 1
fi
failed=()
ran=0
for b in "$dir"/*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  name="$(basename "$b")"
  if ! grep -qa -- '--smoke' "$b"; then
    echo "bench-smoke: $name has no --smoke mode; skipped" >&2
    continue
  fi
  ran=$((ran + 1))
  start=$(date +%s)
  log="$(mktemp)"
  # A bound per bench: a hung measured path is a failure, not a stuck CI job.
  timeout 300 "$b" --smoke >"$log" 2>&1
  rc=$?
  echo "bench-smoke: $name --smoke: exit $rc in $(( $(date +%s) - start )) s" >&2
  if [ "$rc" != 0 ]; then
    sed 's/^/  /' "$log" >&2
    failed+=("$name")
  fi
  rm -f "$log"
done
if [ "$ran" = 0 ]; then
  echo "bench-smoke: no bench with a --smoke mode in $dir" >&2
  exit 1
fi
if [ "${#failed[@]}" != 0 ]; then
  echo "bench-smoke: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "bench-smoke: $ran benches passed their smoke runs" >&2

#!/usr/bin/env bash
# Every benchmark's smoke mode (tiny sizes, seconds), so a bench whose measured path breaks fails
# CI instead of rotting unnoticed. Runs each executable in the build tree's bench/ directory that
# supports --smoke (its binary contains the string "--smoke"; a bench without one is listed as
# skipped); fails when any of them exits non-zero. Each bench finds what it needs by itself.
# Each runs with --markdown too and must print its section of docs/benchmarks.md (bench/report.h),
# so the path scripts/bench-markdown.sh takes cannot rot either.
# Smoke runs measure nothing worth keeping (pass or fail only), so CLOISTER_BENCH_JOBS of them
# (default: nproc) run at once; each bench keeps its own temporary store.
# Usage: scripts/bench-smoke.sh [BUILD_DIR]   (default: $CLOISTER_BUILD_DIR or build)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/jobs.sh
BUILD="${1:-${CLOISTER_BUILD_DIR:-build}}"
JOBS="${CLOISTER_BENCH_JOBS:-$(nproc)}"
dir="$BUILD/bench"
if [ ! -d "$dir" ]; then
  echo "bench-smoke: no $dir (Hint: build first: cmake --build $BUILD)" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
names=()
for b in "$dir"/*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  name="$(basename "$b")"
  if ! grep -qa -- '--smoke' "$b"; then
    echo "bench-smoke: $name has no --smoke mode; skipped" >&2
    continue
  fi
  names+=("$name")
  wait_for_slot "$JOBS"
  (
    start=$(date +%s)
    # A bound per bench: a hung measured path is a failure, not a stuck CI job.
    timeout 300 "$b" --smoke --markdown >"$work/$name.log" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && ! grep -qxF "<!-- bench:$name end -->" "$work/$name.log"; then
      echo "$name printed no --markdown section (bench/report.h)" >>"$work/$name.log"
      rc=markdown
    fi
    echo "$rc $(( $(date +%s) - start ))" >"$work/$name.status"
  ) &
done
wait
if [ "${#names[@]}" = 0 ]; then
  echo "bench-smoke: no bench with a --smoke mode in $dir" >&2
  exit 1
fi
failed=()
for name in "${names[@]}"; do
  read -r rc secs <"$work/$name.status" 2>/dev/null || { rc=missing; secs=?; }
  echo "bench-smoke: $name --smoke: exit $rc in $secs s" >&2
  if [ "$rc" != 0 ]; then
    sed 's/^/  /' "$work/$name.log" >&2
    failed+=("$name")
  fi
done
if [ "${#failed[@]}" != 0 ]; then
  echo "bench-smoke: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "bench-smoke: ${#names[@]} benches passed their smoke runs ($JOBS at a time)" >&2

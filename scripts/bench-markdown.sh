#!/usr/bin/env bash
# Runs benches with --markdown and puts the section each one prints into docs/benchmarks.md,
# between its two marker lines (bench/report.h), so the page shows what the benches printed: the
# figures, the command line, the machine, its load and the date. Nothing else on the page changes.
# Usage: scripts/bench-markdown.sh [--build DIR] [NAME[:ARGS]]...
#   NAME is a bench of BUILD/bench (default build dir: $CLOISTER_BUILD_DIR or build); ARGS, after
#   a colon, are its arguments, e.g. 'proxy_bench:--no-mitmproxy --rounds 3'. Without names: the
#   benches that take seconds to minutes (below); the VM benches take 10-60 minutes each on two
#   cores and are run by name: 'vm_boot_bench:--runs 6'. Run it on a machine as quiet as you can
#   get: the load is recorded with the figures, not subtracted from them.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${CLOISTER_BUILD_DIR:-build}"
if [ "${1:-}" = --build ]; then BUILD="$2"; shift 2; fi
specs=("$@")
if [ "${#specs[@]}" = 0 ]; then
  specs=(aws_resign_bench channel_bench image_verify_bench store_bench egress_bench port_bench share_bench
         "proxy_bench:--rounds 3 --bulk-mib 512" "proxy_load_bench:--soak-seconds 60"
         "install_bench:--runs 3")
fi
page=docs/benchmarks.md
CLOISTER_BENCH_REVISION="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo '+changes')"
export CLOISTER_BENCH_REVISION
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for spec in "${specs[@]}"; do
  name="${spec%%:*}"
  args=""
  [ "$spec" != "$name" ] && args="${spec#*:}"
  bin="$BUILD/bench/$name"
  if [ ! -x "$bin" ]; then
    echo "bench-markdown: no $bin (Hint: cmake --build $BUILD --target $name)" >&2
    exit 1
  fi
  begin="<!-- bench:$name begin -->"
  end="<!-- bench:$name end -->"
  if ! grep -qxF "$begin" "$page" || ! grep -qxF "$end" "$page"; then
    echo "bench-markdown: $page has no section for $name (Hint: add its two marker lines)" >&2
    exit 1
  fi
  echo "bench-markdown: $name $args (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  # shellcheck disable=SC2086  # ARGS are words by design
  "$bin" $args --markdown | tee "$work/out" >&2
  awk -v b="$begin" -v e="$end" '$0 == b {on = 1} on {print} $0 == e {on = 0}' "$work/out" \
    >"$work/section"
  if ! grep -qxF "$end" "$work/section"; then
    echo "bench-markdown: $name printed no --markdown section; $page unchanged for it" >&2
    exit 1
  fi
  awk -v b="$begin" -v e="$end" -v f="$work/section" '
    $0 == b { while ((getline line < f) > 0) print line; skip = 1; next }
    skip && $0 == e { skip = 0; next }
    !skip { print }' "$page" >"$work/page"
  cp "$work/page" "$page"
  echo "bench-markdown: $page: $name's section rewritten" >&2
done

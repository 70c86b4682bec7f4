#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine: installs what it needs, builds, runs ctest.
# Tests labelled "opt-in" (e.g. the full image build) run only with CLOISTER_TEST_ALL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
# Each stage's wall time is printed when it ends and again in one summary line at the end (also
# on failure), so a CI log shows where the suite's minutes went; the slowest tests are listed too.
suite_start=$(date +%s)
stage_start=$suite_start
stages=""
stage_done() {
  local now secs
  now=$(date +%s)
  secs=$((now - stage_start))
  echo "cloister: stage $1 took ${secs} s (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  stages="$stages $1=${secs}s"
  stage_start=$now
}
trap 'echo "cloister: suite stages:${stages:- none done} (total $(( $(date +%s) - suite_start )) s)" >&2' EXIT
bash scripts/install-deps.sh test
stage_done deps
BUILD="${CLOISTER_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
stage_done build
# Disk is a resource the VM tests need (images, workspaces): say how much is left, so a full disk
# is visible in the log before a test fails on it.
echo "cloister: build tree $(du -sh "$BUILD" | cut -f1); free: $(df -h --output=avail "$BUILD" | tail -1 | tr -d ' ') on $(df --output=target "$BUILD" | tail -1), $(df -h --output=avail /tmp | tail -1 | tr -d ' ') in /tmp" >&2
exclude=(-LE opt-in)
[ "${CLOISTER_TEST_ALL:-0}" = 1 ] && exclude=()
cd "$BUILD"
# A test that fails is retried once: the VM tests run under software emulation on shared CI
# machines, and a second failure is a real one.
# Every test that needed its retry is named at the end: each is a bug to fix, not noise.
ctest_log="$(mktemp)"
set +e
ctest --output-on-failure --no-tests=error --repeat until-pass:2 -j"$(nproc)" "${exclude[@]}" 2>&1 |
  tee "$ctest_log"
ctest_rc=${PIPESTATUS[0]}
set -e
bash "$ROOT/scripts/retried-tests.sh" "$ctest_log" >&2
# The ten slowest test runs (a retried test's runs are listed apart): where ctest's time went.
echo "cloister: slowest tests:" >&2
grep -aE '(Passed|\*\*\*[A-Za-z]+) +[0-9.]+ sec' "$ctest_log" |
  sed -E 's/^.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec.*$/\2 \1/' | sort -rn | head -n 10 |
  sed 's/^/  /' >&2 || true
rm -f "$ctest_log"
stage_done ctest
[ "$ctest_rc" = 0 ] || exit "$ctest_rc"
# Every bench's --smoke mode: a measured path that breaks fails here (scripts/bench-smoke.sh).
(cd "$ROOT" && bash scripts/bench-smoke.sh "$BUILD")
stage_done bench-smoke
# Sanitizers and fuzzing: every fuzz target's corpus replayed and each fuzzed for a bounded time
# under ASan+UBSan, in its own build dir (scripts/fuzz.sh). CLOISTER_SKIP_FUZZ=1 skips it.
cd "$ROOT"
# Every registered fuzz target (fuzz/CMakeLists.txt) is fuzzed, each for CLOISTER_FUZZ_SECONDS
# (10 here, fuzz.sh's own default is 20), after its corpus is replayed under ASan+UBSan. The suite
# fuzzes to catch a change that breaks a parser; longer runs (fuzz.sh NAME, 60 s and more) are
# how a new parser is fuzzed before it lands.
if [ "${CLOISTER_SKIP_FUZZ:-0}" != 1 ]; then
  CLOISTER_FUZZ_SECONDS="${CLOISTER_FUZZ_SECONDS:-10}" bash scripts/fuzz.sh
  stage_done fuzz
fi

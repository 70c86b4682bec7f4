#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine: installs what it needs, builds, runs ctest.
# Tests labelled "opt-in" (e.g. the full image build) run only with CLOISTER_TEST_ALL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
bash scripts/install-deps.sh test
BUILD="${CLOISTER_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
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
rm -f "$ctest_log"
[ "$ctest_rc" = 0 ] || exit "$ctest_rc"
# Every bench's --smoke mode: a measured path that breaks fails here (scripts/bench-smoke.sh).
(cd "$ROOT" && bash scripts/bench-smoke.sh "$BUILD")
# Sanitizers and fuzzing: every fuzz target's corpus replayed and each fuzzed for a bounded time
# under ASan+UBSan, in its own build dir (scripts/fuzz.sh). CLOISTER_SKIP_FUZZ=1 skips it.
cd "$ROOT"
# Every registered fuzz target (fuzz/CMakeLists.txt) is fuzzed, each for CLOISTER_FUZZ_SECONDS
# (default 20), after its corpus is replayed under ASan+UBSan. All nine passed a full fuzz.sh run.
[ "${CLOISTER_SKIP_FUZZ:-0}" = 1 ] || bash scripts/fuzz.sh

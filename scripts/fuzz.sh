#!/usr/bin/env bash
# Sanitizer + fuzzing pass: builds every fuzz target with clang, libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer in its own build dir, replays each corpus under the sanitizers, then
# fuzzes each target for a bounded time. Any crash, leak or sanitizer report fails the script.
#   scripts/fuzz.sh                 # all targets, CLOISTER_FUZZ_SECONDS (default 20) each
#   scripts/fuzz.sh ext4_bitmap     # one target
# Env: CLOISTER_FUZZ_BUILD_DIR (default build-fuzz), CLOISTER_FUZZ_SECONDS, CLOISTER_FUZZ_JOBS.
# Libraries are built with -fsanitize=fuzzer-no-link so the fuzzers see coverage inside them.
# Cost: ~1-2 minutes to build plus SECONDS per target, JOBS targets at a time (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/jobs.sh
BUILD="${CLOISTER_FUZZ_BUILD_DIR:-build-fuzz}"
SECONDS_EACH="${CLOISTER_FUZZ_SECONDS:-20}"
JOBS="${CLOISTER_FUZZ_JOBS:-$(nproc)}"

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not installed (scripts/install-deps.sh test)" >&2; exit 1; }
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" \
  -DCLOISTER_FUZZ=ON -DCLOISTER_SANITIZE=ON -DCLOISTER_BUILD_GUEST=OFF >/dev/null

# Every target registered through cloister_add_fuzzer (fuzz/CMakeLists.txt).
mapfile -t all < <(sed -n 's/^[[:space:]]*cloister_add_fuzzer(\([A-Za-z0-9_]*\).*/\1/p' fuzz/CMakeLists.txt)
targets=("${@:-${all[@]}}")
((${#targets[@]})) || { echo "fuzz.sh: no fuzz targets registered" >&2; exit 1; }
cmake --build "$BUILD" -j"$JOBS" --target $(printf '%s_fuzzer ' "${targets[@]}")

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# One target: replay its corpus, then fuzz it. Its output goes to $work/$t.out and its status
# to $work/$t.status, so JOBS targets can run at once (each fuzzer is single-threaded).
run_one() {
  local t="$1" bin="$BUILD/fuzz/${1}_fuzzer" corpus="fuzz/corpus/$1"
  [ -d "$corpus" ] || { echo "fuzz.sh: $t has no corpus in $corpus"; return 1; }
  echo "== $t: replaying $(find "$corpus" -type f | wc -l) corpus files under ASan+UBSan"
  "$bin" -runs=0 "$corpus" >"$work/$t.replay.log" 2>&1 || { cat "$work/$t.replay.log"; echo "fuzz.sh: $t corpus replay FAILED"; return 1; }
  echo "== $t: fuzzing for ${SECONDS_EACH}s"
  # New inputs go to a scratch dir, so the checked-in corpus stays small and reviewed.
  mkdir -p "$work/$t"
  "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=$((1 << 20)) \
    -artifact_prefix="$work/$t-" "$work/$t" "$corpus" >"$work/$t.fuzz.log" 2>&1 || {
    tail -n 60 "$work/$t.fuzz.log"
    for a in "$work/$t-"*; do [ -e "$a" ] && cp "$a" . && echo "fuzz.sh: crashing input saved as ./$(basename "$a")"; done
    echo "fuzz.sh: $t FAILED"
    return 1
  }
  grep -E "^#[0-9]+.*DONE" "$work/$t.fuzz.log" | tail -n 1 || true
}
for t in "${targets[@]}"; do
  wait_for_slot "$JOBS"
  ( rc=0; run_one "$t" >"$work/$t.out" 2>&1 || rc=$?; echo "$rc" >"$work/$t.status" ) &
done
wait
failed=0
for t in "${targets[@]}"; do
  cat "$work/$t.out"
  [ "$(cat "$work/$t.status" 2>/dev/null)" = 0 ] || { echo "fuzz.sh: $t did not pass" >&2; failed=1; }
done
((failed == 0)) || exit 1
echo "fuzz.sh: ${#targets[@]} targets clean (${SECONDS_EACH}s each)"

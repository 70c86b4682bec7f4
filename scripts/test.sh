#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine: installs what it needs, builds, runs ctest.
# Tests labelled "opt-in" (e.g. the full image build) run only with CLOISTER_TEST_ALL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test
BUILD="${CLOISTER_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
exclude=(-LE opt-in)
[ "${CLOISTER_TEST_ALL:-0}" = 1 ] && exclude=()
cd "$BUILD"
ctest --output-on-failure --no-tests=error -j"$(nproc)" "${exclude[@]}"

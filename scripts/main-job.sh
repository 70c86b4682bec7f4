#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine: installs what it needs, builds cloister, makes the
# default image, creates a workspace and runs in it. It grows as the issues land.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh run
BUILD="${CLOISTER_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
CLOISTER="$PWD/$BUILD/src/cli/cloister"
"$CLOISTER" version

# Workspace store: create a workspace from a small raw image (the image module will swap in the
# real default image) and describe it. Re-runnable: an existing workspace is kept.
export CLOISTER_HOME="${CLOISTER_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/cloister}"
mkdir -p "$CLOISTER_HOME/images"
BASE="$CLOISTER_HOME/images/main-job-base.raw"
if [ ! -f "$BASE" ]; then
  truncate -s 1G "$BASE.part"
  mkfs.ext4 -q -F -L cloister-root "$BASE.part"
  mv "$BASE.part" "$BASE"
fi
"$CLOISTER" describe main >/dev/null 2>&1 || "$CLOISTER" create main --image "$BASE"
"$CLOISTER" describe main
# The default base image: built once (mmdebstrap, a few minutes), then reused while it verifies
# against the signed local catalog.
if "$CLOISTER" image verify debian-12 >/dev/null 2>&1; then
  echo "cloister: image debian-12 already built and verified"
else
  "$CLOISTER" image build
fi
"$CLOISTER" image ls

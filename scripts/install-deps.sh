#!/usr/bin/env bash
# Installs every package cloister needs to build, run and test on Debian 12.
# Usage: scripts/install-deps.sh [build|run|test]   (each level includes the previous)
set -euo pipefail
level="${1:-test}"
export DEBIAN_FRONTEND=noninteractive

build_pkgs=(build-essential cmake ninja-build pkg-config git
  libssl-dev libboost1.81-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
  libseccomp-dev libext2fs-dev)
run_pkgs=(qemu-system-x86 qemu-utils e2fsprogs mmdebstrap busybox-static cpio zstd
  xz-utils kmod fakeroot dosfstools mtools ca-certificates curl openssh-client)
test_pkgs=(clang libclang-rt-14-dev socat openssh-client openssh-server gh awscli
  mitmproxy python3 python3-botocore sqlite3 iproute2 tmux hyperfine xfsprogs)

pkgs=("${build_pkgs[@]}")
case "$level" in
  build) ;;
  run) pkgs+=("${run_pkgs[@]}") ;;
  test) pkgs+=("${run_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [build|run|test]" >&2; exit 2 ;;
esac

# Node.js may come from a vendor package that bundles npm; only ask Debian for it when absent.
if [ "$level" = test ] && ! command -v npm >/dev/null; then pkgs+=(nodejs npm); fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "cloister: installing ${#missing[@]} packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

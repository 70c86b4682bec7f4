#!/usr/bin/env bash
# Installs every package cloister needs to build, run and test on Debian 12.
# Usage: scripts/install-deps.sh [build|run|test]   (each level includes the previous)
set -euo pipefail
level="${1:-test}"
export DEBIAN_FRONTEND=noninteractive

build_pkgs=(build-essential cmake ninja-build mold pkg-config git
  libssl-dev libboost1.81-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
  libseccomp-dev libext2fs-dev libarchive-dev liblzma-dev libc-ares-dev)
run_pkgs=(qemu-system-x86 qemu-utils e2fsprogs mmdebstrap busybox-static cpio zstd libc-ares2
  xz-utils kmod fakeroot dosfstools mtools ca-certificates curl openssh-client)
test_pkgs=(clang libclang-rt-14-dev socat openssh-client openssh-server gh awscli
  mitmproxy python3 python3-pip-whl python3-botocore python3-jsonschema sqlite3 iproute2 tmux hyperfine wrk xfsprogs
  nftables rsync chromium docker-registry skopeo)  # docker-registry and skopeo: the `image build --from docker://` test's local registry and its push; chromium: the dashboard's browser test (headless, over CDP; src/ui/testdata/cdp.py)

pkgs=("${build_pkgs[@]}")
case "$level" in
  build) ;;
  run) pkgs+=("${run_pkgs[@]}") ;;
  test) pkgs+=("${run_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [build|run|test]" >&2; exit 2 ;;
esac

# npm (level run): `cloister image build --test` fetches the test image's pinned npm tarball with
# it on first use (src/image/npm_tarball.h). Node.js may come from a vendor package that bundles
# npm; only ask Debian for it when absent.
if [ "$level" != build ] && ! command -v npm >/dev/null; then pkgs+=(nodejs npm); fi

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

# npm tarballs for the tests (level test), fetched ahead of time so no test fetches: npm itself
# for the test image (an image build would fetch it on first use), and the coding agents'
# CLIs the VM tests install in a guest from a local fake registry (tests never reach a registry).
# `npm pack` fetches them from npm's default registry once; each is checked against its pinned
# integrity (npm's SRI "sha512-<base64>"). Keep in step with src/image/npm_tarball.h (npm) and
# src/base/agent_tools.h (the agents; a unit test compares npm's pin); playwright-core is for
# supervisor/browser_real_vm_test.cc (Playwright over CDP in a guest); npm 9.2.0 (Debian 12's npm)
# is the client of the real-install tests and bench/install_bench. Cache: $CLOISTER_NPM_CACHE, else
# $XDG_CACHE_HOME/cloister/npm, else ~/.cache/cloister/npm.
npm_pins=(
  "npm@10.9.9 npm-10.9.9.tgz sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg=="
  "npm@9.2.0 npm-9.2.0.tgz sha512-oypVdaWGHDuV79RXLvp+B9gh6gDyAmoHKrQ0/JBYTWWx5D8/+AAxFdZC84fSIiyDdyW4qfrSyYGKhekxDOaMXQ=="
  "@anthropic-ai/claude-code@2.1.332 anthropic-ai-claude-code-2.1.332.tgz sha512-tvSh6bLvEbd97APD31AnojOrRC3AmcRj5R8sF8QIQitu3x2ucOb1kKmTkGDw41kjva+CGJfpkt+wYouk6yv56Q=="
  "@anthropic-ai/claude-code-linux-x64@2.1.332 anthropic-ai-claude-code-linux-x64-2.1.332.tgz sha512-f4JWhzwYutJIHScC7/dYOPX6s28tt7ZADhsOi8zwOHq5fFPEuUeChh2NMfinSg0GrUckYxaeebC4h0DqiKzLcw=="
  "@openai/codex@0.171.0 openai-codex-0.171.0.tgz sha512-1IOFzL2Xg86tLdw6kDo3GoKbkQENgQi7TI6rlEvN132R7ngSw7SNOIQoTcnKzSZZ8kf9N9GynCweSoaFbqk2Eg=="
  "@openai/codex@0.171.0-linux-x64 openai-codex-0.171.0-linux-x64.tgz sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw=="
  "playwright-core@1.61.1 playwright-core-1.61.1.tgz sha512-h7Qlt6m4REp25qvIdvbDtVmD4LqVXfpRxhORv9L0jzETM05p4fuPJ3dKyuSXQxDSbXnmS79HAgi9589lGSpLkg=="
)
if [ "$level" = test ]; then
  npm_cache="${CLOISTER_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cloister/npm}"
  mkdir -p "$npm_cache"
  integrity() { echo "sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }
  for pin in "${npm_pins[@]}"; do
    read -r spec file want <<<"$pin"
    if [ -f "$npm_cache/$file" ] && [ "$(integrity "$npm_cache/$file")" = "$want" ]; then continue; fi
    echo "cloister: npm pack $spec into $npm_cache" >&2
    rm -f "$npm_cache/$file"
    (cd "$npm_cache" && npm pack --silent "$spec" >/dev/null)
    got="$(integrity "$npm_cache/$file")"
    if [ "$got" != "$want" ]; then
      echo "cloister: $spec: integrity $got is not the pinned $want" >&2
      rm -f "$npm_cache/$file"
      exit 1
    fi
  done
fi

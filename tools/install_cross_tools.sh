#!/usr/bin/env bash
# The ARM64 cross toolchain and user-mode emulator tests/test_neon_qemu.py runs
# the NEON paths with: Debian's g++-aarch64-linux-gnu and qemu-user. Installed
# with apt-get when missing (root only); otherwise one line says why not and
# the test skips with the same reason. Never fails the build.
set -uo pipefail
if command -v aarch64-linux-gnu-g++ >/dev/null && command -v qemu-aarch64 >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "cross-tools: skipped: the NEON tests need aarch64-linux-gnu-g++ and qemu-aarch64 (apt-get install g++-aarch64-linux-gnu qemu-user; needs root and apt)"
  exit 0
fi
echo "cross-tools: installing g++-aarch64-linux-gnu and qemu-user from Debian (the NEON tests run under qemu-aarch64)"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null; }; then
  echo "cross-tools: skipped: apt-get could not install g++-aarch64-linux-gnu and qemu-user"
fi
exit 0

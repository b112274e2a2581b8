#!/usr/bin/env bash
# The ARM64 cross toolchain and user-mode emulator tests/test_neon_qemu.py runs
# the NEON paths with: Debian's g++-aarch64-linux-gnu and qemu-user. Installed
# with apt-get when missing (root only). When they cannot be installed, a
# banner says why and the NEON tests skip (fail in CI: tests/test_neon_qemu.py).
# On an arm64 machine (an Apple-silicon Mac, Linux arm64) the NEON tests run
# natively with this machine's compiler: nothing to install.
# Never fails the build.
set -uo pipefail
cd "$(dirname "$0")/../.."
case "$(uname -m)" in
  arm64|aarch64)
    echo "cross-tools: this machine is $(uname -s) $(uname -m): the NEON tests (tests/test_neon_qemu.py) run natively, without qemu"
    exit 0 ;;
esac
have_tools() { command -v aarch64-linux-gnu-g++ >/dev/null && command -v qemu-aarch64 >/dev/null; }
if have_tools; then
  exit 0
fi
why=""
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  why="not root, or no apt-get"
else
  echo "cross-tools: installing g++-aarch64-linux-gnu and qemu-user from Debian (the NEON tests run under qemu-aarch64)"
  bash tools/build/apt_install.sh --no-install-recommends g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user ||
    why="apt-get could not install them"
  have_tools || why="${why:-installed, yet aarch64-linux-gnu-g++ or qemu-aarch64 is not on PATH}"
fi
[ -z "$why" ] && exit 0
echo "cross-tools: ******** the NEON tests (tests/test_neon_qemu.py) will NOT run: $why."
echo "cross-tools: ******** they need aarch64-linux-gnu-g++ and qemu-aarch64: apt-get install g++-aarch64-linux-gnu qemu-user (as root)."
exit 0

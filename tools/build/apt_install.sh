#!/usr/bin/env bash
# apt-get update, then apt-get install ARGS... (Debian packages and apt-get
# options), as root; exits with apt-get's status. Every tool that installs
# what it needs goes through here (tools/build/install_cross_tools.sh,
# tools/check/msl_check.py --ensure-clang, tools/check/metal_check.sh): `make test` runs
# two of them at once (make -j), and a second apt-get does not wait for apt's
# lock, it fails ("Could not get lock /var/lib/apt/lists/lock"). So the
# installs take turns: a flock on apt's lists folder (an existing root-owned
# folder, no lock file to create; apt locks a file inside it, not the folder).
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 [APT-GET OPTION|PACKAGE]..." >&2
  exit 2
fi
exec 9</var/lib/apt/lists || exit 1
flock 9 || exit 1
export DEBIAN_FRONTEND=noninteractive
# DPkg::Lock::Timeout: waits for dpkg's lock if something outside this project holds it.
apt-get update -qq && apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$@" >/dev/null

"""Checks, before `make` installs anything on a Mac, that the pinned macOS
stack can install and run here (the Makefile runs it on Darwin).

tensorflow-metal 1.2.0 (requirements-macos.txt) ships CPython 3.9-3.12 wheels
only, its dylib needs macOS 12.1 (the wheel is tagged 12_0), and
tensorflow 2.19.1 has no CPython 3.13 macOS wheel. Both have macOS wheels for
arm64 only (on x86_64 PyPI's newest are tensorflow 2.16.2 and
tensorflow-metal 1.0.0), so the interpreter must run as arm64: an x86_64
Python (an Intel Mac, or an x86_64 build under Rosetta on Apple silicon: old
Intel Homebrew in /usr/local, an x86_64-only installer) cannot install them.
The Metal kernels that use atomic_float (Metal Shading Language 3.0) need
macOS 13; on macOS 12 they report Unimplemented and those ops run on the CPU.

    python3 tools/check/check_macos_env.py [--python-version 3.13] [--macos-version 12.0] [--machine x86_64]

Without the options it checks the interpreter running it and this Mac.
Prints what to use instead and exits 1 when the stack cannot work; exits 0
(with a note for macOS 12) otherwise. Runs on any Python 3.
"""
import argparse
import platform
import subprocess
import sys

PYTHONS = ((3, 9), (3, 12))  # tensorflow-metal 1.2.0's CPython wheels
MIN_MACOS = (12, 1)          # libmetal_plugin.dylib's minimum
MSL3_MACOS = (13, 0)         # Metal Shading Language 3.0 (atomic_float)


def parse_version(text):
    parts = []
    for piece in text.strip().split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise ValueError("not a version: %r" % text)
    while len(parts) < 2:
        parts.append(0)
    return tuple(parts)


def show(version):
    return "%d.%d" % version


def apple_silicon():
    """True on Apple silicon (also for a process under Rosetta), False on an
    Intel Mac, None when sysctl cannot tell."""
    try:
        out = subprocess.run(["sysctl", "-n", "hw.optional.arm64"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:  # the key exists on Apple silicon only
        return False if "unknown oid" in out.stderr else None
    return out.stdout.strip() == "1"


def check(python, macos, machine="arm64", arm64_hardware=True):
    """(errors, notes) for a Python (major, minor), a macOS (major, minor) or
    None, the interpreter's architecture (platform.machine()) and whether the
    Mac is Apple silicon (True, False, or None when unknown)."""
    errors, notes = [], []
    if machine != "arm64":
        why = ("This Python runs as %s: tensorflow 2.19.1 and tensorflow-metal 1.2.0 have macOS wheels for arm64 only, "
               "so pip would find none. " % machine)
        if arm64_hardware is False:
            errors.append(why + "This is an Intel Mac: the pinned macOS stack (and the Metal backend) needs Apple "
                          "silicon.")
        else:
            errors.append(why + ("This Mac is Apple silicon, so this interpreter runs under Rosetta (an x86_64 build, "
                                 "e.g. Homebrew in /usr/local). " if arm64_hardware else "") +
                          "Use an arm64 Python 3.9-3.12 (Homebrew in /opt/homebrew: `/opt/homebrew/bin/brew install "
                          "python@3.12`, or python.org's universal2 installer), remove any .venv made with this one "
                          "(`rm -rf .venv`) and run `make VENV_PYTHON=/opt/homebrew/bin/python3.12`.")
    low, high = PYTHONS
    if not (low <= python <= high):
        errors.append(
            "Python %s cannot install the pinned macOS stack: tensorflow-metal 1.2.0 has wheels for CPython "
            "%s-%s only (and tensorflow 2.19.1 none for 3.13 on macOS). Install Python 3.12 (e.g. "
            "`brew install python@3.12`), remove any .venv made with this one (`rm -rf .venv`) and run "
            "`make VENV_PYTHON=python3.12`." % (show(python), show(low), show(high)))
    if macos is None:
        errors.append("cannot tell the macOS version (platform.mac_ver() is empty); pass --macos-version")
    elif macos < MIN_MACOS:
        errors.append(
            "macOS %s is too old: tensorflow-metal 1.2.0 needs macOS %s or newer (13 or newer for every Metal "
            "kernel). Update macOS." % (show(macos), show(MIN_MACOS)))
    elif macos < MSL3_MACOS:
        notes.append(
            "macOS %s: the Metal kernels that need Metal Shading Language 3.0 (HashEncode's and RobustLoss's: "
            "atomic_float) need macOS 13; here they report Unimplemented, so run those ops on "
            "the CPU (tf.device('/CPU:0')) or update macOS." % show(macos))
    return errors, notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", help="check this Python (X.Y) instead of the one running this")
    parser.add_argument("--macos-version", help="check this macOS (X.Y) instead of this Mac's")
    parser.add_argument("--machine", help="check an interpreter of this architecture (arm64, x86_64) instead of "
                        "the one running this")
    args = parser.parse_args(argv)
    python = parse_version(args.python_version) if args.python_version else tuple(sys.version_info[:2])
    mac = args.macos_version if args.macos_version else platform.mac_ver()[0]
    macos = parse_version(mac) if mac else None
    machine = args.machine or platform.machine()
    errors, notes = check(python, macos, machine, apple_silicon() if machine != "arm64" else True)
    for note in notes:
        print("check_macos_env: note: " + note)
    for error in errors:
        print("check_macos_env: " + error, file=sys.stderr)
    if not errors:
        print("check_macos_env: Python %s (%s), macOS %s: OK" % (show(python), machine, show(macos)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

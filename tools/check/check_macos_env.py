"""Checks, before `make` installs anything on a Mac, that the pinned macOS
stack MACOS_STACK names can install and run here (the Makefile runs it on Darwin).

Two stacks (python/metal_ops/_requirements.py MACOS_STACKS):
- cpu (requirements-macos.txt, the default): TensorFlow 2.21, which has macOS
  arm64 wheels for CPython 3.10-3.13 and macOS 12.0+. No tensorflow-metal loads
  with it: the library's own Metal path serves the GPU.
- metal (requirements-macos-metal.txt): TensorFlow 2.19.1 + tensorflow-metal
  1.2.0, CPython 3.9-3.12 only (tensorflow-metal has no 3.13 wheel, nor
  TensorFlow 2.19.1 a macOS one), macOS 12.1+ (the plugin's dylib; its wheel is
  tagged 12_0). On a Mac whose Python is 3.13 (Homebrew's and python.org's
  default): `brew install python@3.12`, then `make MACOS_STACK=metal VENV_PYTHON=python3.12`.
Both have macOS wheels for arm64 only (on x86_64 PyPI's newest are tensorflow
2.16.2 and tensorflow-metal 1.0.0), so the interpreter must run as arm64: an
x86_64 Python (an Intel Mac, or an x86_64 build under Rosetta on Apple silicon:
old Intel Homebrew in /usr/local, an x86_64-only installer) cannot install them.
The Metal kernels that use atomic_float (Metal Shading Language 3.0) need
macOS 13; on macOS 12 they report Unimplemented and those ops run on the CPU.

    python3 tools/check/check_macos_env.py [--stack cpu|metal] [--python-version 3.13] [--macos-version 12.0] [--machine x86_64]

Without the options it checks the cpu stack, the interpreter running it and this Mac.
Prints what to use instead and exits 1 when the stack cannot work; exits 0
(with a note for macOS 12) otherwise. Runs on any Python 3.
"""
import argparse
import importlib.util
import os
import platform
import subprocess
import sys


def _load_requirements():
    """python/metal_ops/_requirements.py, by path (standard library only)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "python", "metal_ops", "_requirements.py")
    spec = importlib.util.spec_from_file_location("metal_ops_requirements", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STACKS = _load_requirements().MACOS_STACKS
MSL3_MACOS = (13, 0)         # Metal Shading Language 3.0 (atomic_float)
STACK_NAMES = {"cpu": "TensorFlow 2.21 (no tensorflow-metal)",
               "metal": "TensorFlow 2.19.1 + tensorflow-metal 1.2.0"}


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


def check(python, macos, machine="arm64", arm64_hardware=True, stack="cpu"):
    """(errors, notes) for a Python (major, minor), a macOS (major, minor) or
    None, the interpreter's architecture (platform.machine()), whether the Mac
    is Apple silicon (True, False, or None when unknown) and the stack (cpu, metal)."""
    errors, notes = [], []
    low, high = STACKS[stack]["python"]
    min_macos = STACKS[stack]["min_macos"]
    name = STACK_NAMES[stack]
    make = "make" + (" MACOS_STACK=metal" if stack == "metal" else "")
    if machine != "arm64":
        why = ("This Python runs as %s: %s has macOS wheels for arm64 only, so pip would find none. "
               % (machine, name))
        if arm64_hardware is False:
            errors.append(why + "This is an Intel Mac: the macOS stacks (and the Metal backend) need Apple silicon.")
        else:
            errors.append(why + ("This Mac is Apple silicon, so this interpreter runs under Rosetta (an x86_64 build, "
                                 "e.g. Homebrew in /usr/local). " if arm64_hardware else "") +
                          "Use an arm64 Python %s-%s (Homebrew in /opt/homebrew: `/opt/homebrew/bin/brew install "
                          "python@%s`, or python.org's universal2 installer), remove any .venv made with this one "
                          "(`rm -rf .venv`) and run `%s VENV_PYTHON=/opt/homebrew/bin/python%s`."
                          % (show(low), show(high), show(high), make, show(high)))
    if not (low <= python <= high):
        if stack == "metal":
            errors.append(
                "Python %s cannot install the tensorflow-metal stack: tensorflow-metal 1.2.0 has wheels for CPython "
                "%s-%s only (and tensorflow 2.19.1 none for 3.13 on macOS). Install Python 3.12 with Homebrew "
                "(`brew install python@3.12`), remove any .venv made with this one (`rm -rf .venv`) and run "
                "`make MACOS_STACK=metal VENV_PYTHON=python3.12`; or keep this Python with the default stack, "
                "TensorFlow 2.21 (`make`), where the library's own Metal path runs the ops on the GPU."
                % (show(python), show(low), show(high)))
        else:
            errors.append(
                "Python %s cannot install TensorFlow 2.21: its macOS wheels are for CPython %s-%s. Install "
                "Python 3.13 (`brew install python@3.13`), remove any .venv made with this one (`rm -rf .venv`) "
                "and run `make VENV_PYTHON=python3.13`%s."
                % (show(python), show(low), show(high),
                   "; or, on this Python, the tensorflow-metal stack: `make MACOS_STACK=metal`"
                   if STACKS["metal"]["python"][0] <= python <= STACKS["metal"]["python"][1] else ""))
    if macos is None:
        errors.append("cannot tell the macOS version (platform.mac_ver() is empty); pass --macos-version")
    elif macos < min_macos:
        errors.append(
            "macOS %s is too old: %s needs macOS %s or newer (13 or newer for every Metal kernel). Update macOS."
            % (show(macos), "tensorflow-metal 1.2.0" if stack == "metal" else "TensorFlow 2.21", show(min_macos)))
    elif macos < MSL3_MACOS:
        notes.append(
            "macOS %s: the Metal kernels that need Metal Shading Language 3.0 (HashEncode's and RobustLoss's: "
            "atomic_float) need macOS 13; here they report Unimplemented, so run those ops on "
            "the CPU (tf.device('/CPU:0')) or update macOS." % show(macos))
    return errors, notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", choices=sorted(STACKS), default="cpu",
                        help="the macOS stack (the Makefile's MACOS_STACK): cpu (TensorFlow 2.21, the default) or "
                        "metal (TensorFlow 2.19.1 + tensorflow-metal 1.2.0)")
    parser.add_argument("--python-version", help="check this Python (X.Y) instead of the one running this")
    parser.add_argument("--macos-version", help="check this macOS (X.Y) instead of this Mac's")
    parser.add_argument("--machine", help="check an interpreter of this architecture (arm64, x86_64) instead of "
                        "the one running this")
    args = parser.parse_args(argv)
    python = parse_version(args.python_version) if args.python_version else tuple(sys.version_info[:2])
    mac = args.macos_version if args.macos_version else platform.mac_ver()[0]
    macos = parse_version(mac) if mac else None
    machine = args.machine or platform.machine()
    errors, notes = check(python, macos, machine, apple_silicon() if machine != "arm64" else True, args.stack)
    for note in notes:
        print("check_macos_env: note: " + note)
    for error in errors:
        print("check_macos_env: " + error, file=sys.stderr)
    if not errors:
        print("check_macos_env: Python %s (%s), macOS %s, %s: OK" % (show(python), machine, show(macos),
                                                                     STACK_NAMES[args.stack]))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

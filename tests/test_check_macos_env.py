"""tools/check/check_macos_env.py: `make` on a Mac checks Python and macOS before it
installs anything, for the stack MACOS_STACK names (cpu: TensorFlow 2.21 on
Python 3.10-3.13; metal: TensorFlow 2.19.1 + tensorflow-metal 1.2.0 on Python
3.9-3.12): the decision logic, with the versions passed in, and the Makefile's
use of it, through `make -n UNAME_S=Darwin`."""
import os
import shutil
import subprocess
import sys

import pytest

from tools.check import check_macos_env as env

pytestmark = pytest.mark.source_tree("tools/check/check_macos_env.py and the Makefile")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("python", [(3, 9), (3, 10), (3, 11), (3, 12)])
@pytest.mark.parametrize("macos", [(13, 0), (14, 5), (15, 1), (26, 0)])
def test_supported_metal_stack_passes(python, macos):
    assert env.check(python, macos, stack="metal") == ([], [])


@pytest.mark.parametrize("python", [(3, 10), (3, 11), (3, 12), (3, 13)])
@pytest.mark.parametrize("macos", [(13, 0), (15, 1), (26, 0)])
def test_supported_default_stack_passes_python_3_13(python, macos):
    # TensorFlow 2.21 has macOS arm64 wheels for CPython 3.10-3.13: a Mac's
    # default Python (3.13) installs the default stack.
    assert env.check(python, macos) == ([], [])
    assert env.check(python, macos, stack="cpu") == ([], [])


@pytest.mark.parametrize("python", [(3, 8), (3, 13), (3, 14), (2, 7)])
def test_unsupported_python_for_tensorflow_metal_says_what_to_use(python):
    errors, _ = env.check(python, (14, 0), stack="metal")
    assert len(errors) == 1
    assert "Python %d.%d" % python in errors[0]
    for part in ("3.9-3.12", "brew install python@3.12", "make MACOS_STACK=metal VENV_PYTHON=python3.12",
                 "TensorFlow 2.21"):
        assert part in errors[0], (part, errors[0])


@pytest.mark.parametrize("python", [(3, 9), (3, 14)])
def test_unsupported_python_for_tensorflow_2_21_says_what_to_use(python):
    errors, _ = env.check(python, (14, 0))
    assert len(errors) == 1 and "Python %d.%d" % python in errors[0] and "3.10-3.13" in errors[0]
    assert "make VENV_PYTHON=python3.13" in errors[0]
    # Python 3.9 has the other stack
    assert ("MACOS_STACK=metal" in errors[0]) == (python == (3, 9))


@pytest.mark.parametrize("macos", [(11, 7), (12, 0)])
def test_macos_below_12_1_fails_for_tensorflow_metal(macos):
    errors, _ = env.check((3, 11), macos, stack="metal")
    assert len(errors) == 1 and "12.1" in errors[0] and "%d.%d" % macos in errors[0]


def test_macos_12_0_runs_tensorflow_2_21():
    errors, notes = env.check((3, 13), (12, 0))
    assert errors == [] and len(notes) == 1
    assert env.check((3, 13), (11, 7))[0]


@pytest.mark.parametrize("macos", [(12, 1), (12, 7)])
@pytest.mark.parametrize("stack", ["cpu", "metal"])
def test_macos_12_works_with_a_note_about_msl_3(macos, stack):
    errors, notes = env.check((3, 12), macos, stack=stack)
    assert errors == [] and len(notes) == 1
    assert "macOS 13" in notes[0] and "HashEncode" in notes[0] and "RobustLoss" in notes[0]


def test_unknown_macos_fails():
    errors, _ = env.check((3, 11), None)
    assert errors and "--macos-version" in errors[0]


def test_stacks_match_the_requirements_files():
    # The Python ranges and requirements files named by _requirements.MACOS_STACKS
    # are the ones the Makefile installs: each file pins the TensorFlow of its stack.
    import re

    for stack, spec in env.STACKS.items():
        with open(os.path.join(ROOT, spec["requirements"]), encoding="utf-8") as f:
            text = f.read()
        tf = re.search(r"^tensorflow==(\d+\.\d+)\.\d+$", text, re.M).group(1)
        assert tf == {"cpu": "2.21", "metal": "2.19"}[stack]
        assert ("tensorflow-metal==1.2.0" in text) == (stack == "metal")


@pytest.mark.parametrize("text,version", [("3.12", (3, 12)), ("14.4.1", (14, 4)), ("13", (13, 0)),
                                          ("3.13.0rc1", (3, 13))])
def test_parse_version(text, version):
    assert env.parse_version(text) == version


def test_main_exit_status_and_messages(capsys):
    arm64 = ["--machine", "arm64"]
    assert env.main(["--stack", "metal", "--python-version", "3.13", "--macos-version", "15.2"] + arm64) == 1
    assert "VENV_PYTHON=python3.12" in capsys.readouterr().err
    assert env.main(["--python-version", "3.13", "--macos-version", "15.2"] + arm64) == 0
    assert "OK" in capsys.readouterr().out
    assert env.main(["--stack", "metal", "--python-version", "3.12", "--macos-version", "15.2"] + arm64) == 0
    assert "OK" in capsys.readouterr().out
    assert env.main(["--stack", "metal", "--python-version", "3.11", "--macos-version", "12.0"] + arm64) == 1


# ---- the interpreter's architecture: both stacks are arm64-only on macOS ----

@pytest.mark.parametrize("stack,make", [("cpu", "make VENV_PYTHON=/opt/homebrew/bin/python3.13"),
                                        ("metal", "make MACOS_STACK=metal VENV_PYTHON=/opt/homebrew/bin/python3.12")])
def test_x86_64_interpreter_on_apple_silicon_is_rosetta(stack, make):
    errors, _ = env.check((3, 12), (14, 5), "x86_64", True, stack=stack)
    assert len(errors) == 1
    for part in ("runs as x86_64", "arm64 only", "Rosetta", "/opt/homebrew", make):
        assert part in errors[0], (part, errors[0])


def test_x86_64_interpreter_on_an_intel_mac():
    errors, _ = env.check((3, 11), (13, 6), "x86_64", False)
    assert len(errors) == 1 and "Intel Mac" in errors[0] and "Apple silicon" in errors[0]
    assert "Rosetta" not in errors[0]


def test_x86_64_interpreter_on_an_unknown_mac():
    errors, _ = env.check((3, 11), (14, 0), "x86_64", None)
    assert len(errors) == 1 and "arm64 only" in errors[0] and "VENV_PYTHON=" in errors[0]
    assert "Rosetta" not in errors[0] and "Intel Mac" not in errors[0]


def test_main_fails_under_a_faked_x86_64_interpreter(capsys, monkeypatch):
    # What an x86_64 Python reports on an Apple-silicon Mac (Rosetta): every
    # version in range, the wrong architecture.
    monkeypatch.setattr(env.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(env.platform, "mac_ver", lambda: ("14.5", ("", "", ""), "x86_64"))
    monkeypatch.setattr(env, "apple_silicon", lambda: True)
    monkeypatch.setattr(env.sys, "version_info", (3, 12, 4, "final", 0))
    assert env.main([]) == 1
    err = capsys.readouterr().err
    assert "runs as x86_64" in err and "Rosetta" in err
    monkeypatch.setattr(env.platform, "machine", lambda: "arm64")
    assert env.main([]) == 0
    assert "Python 3.12 (arm64), macOS 14.5, TensorFlow 2.21 (no tensorflow-metal): OK" in capsys.readouterr().out


def test_script_checks_the_machine_option():
    script = os.path.join(ROOT, "tools", "check", "check_macos_env.py")
    args = [sys.executable, script, "--python-version", "3.12", "--macos-version", "14.0"]
    bad = subprocess.run(args + ["--machine", "x86_64"], capture_output=True, text=True)
    assert bad.returncode == 1 and "arm64 only" in bad.stderr
    good = subprocess.run(args + ["--machine", "arm64"], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr


def test_script_runs_standalone():
    script = os.path.join(ROOT, "tools", "check", "check_macos_env.py")
    result = subprocess.run([sys.executable, script, "--stack", "metal", "--python-version", "3.13",
                             "--macos-version", "14.0"], capture_output=True, text=True)
    assert result.returncode == 1 and "3.9-3.12" in result.stderr
    result = subprocess.run([sys.executable, script, "--python-version", "3.13", "--macos-version", "14.0",
                             "--machine", "arm64"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def make_dry_run(tmp_path, *args):
    """The venv recipe `make` would run, printed only: BUILD and VENV in tmp_path
    (absent), and -o keeps make from remaking the included tf_flags.mk (make
    runs the recipes that remake makefiles even under -n)."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    build, venv = tmp_path / "build", tmp_path / "venv"
    result = subprocess.run(["make", "-n", "-W", "setup.py", f"BUILD={build}", "-o", f"{build}/tf_flags.mk",
                             f"VENV={venv}", f"PYTHON={venv}/bin/python", *args, f"{venv}/.installed"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not build.exists() and not venv.exists()
    return result.stdout.splitlines()


@pytest.mark.parametrize("stack,requirements", [(None, "requirements-macos.txt"), ("cpu", "requirements-macos.txt"),
                                                ("metal", "requirements-macos-metal.txt")])
def test_makefile_checks_before_installing_on_a_mac(tmp_path, stack, requirements):
    lines = make_dry_run(tmp_path, "UNAME_S=Darwin", "VENV_PYTHON=python3.12",
                         *([f"MACOS_STACK={stack}"] if stack else []))
    check = next(i for i, line in enumerate(lines) if "tools/check/check_macos_env.py" in line)
    venv = next(i for i, line in enumerate(lines) if "-m venv" in line)
    pip = next(i for i, line in enumerate(lines) if "pip install" in line and " -r " in line)
    assert check < venv < pip
    assert lines[check].startswith("python3.12 ") and lines[venv].startswith("test -x")
    assert lines[check].endswith(f"--stack {stack or 'cpu'}")
    assert "python3.12 -m venv" in lines[venv]
    assert lines[pip].endswith(f"-r {requirements}")


@pytest.mark.parametrize("args", [("UNAME_S=Darwin",), ()])
def test_makefile_refuses_a_bare_interpreter_name_as_python(tmp_path, args):
    # `make PYTHON=python3.12` would make the venv with VENV_PYTHON and then run
    # pip under python3.12 itself: make stops first and names VENV_PYTHON.
    if shutil.which("make") is None:
        pytest.skip("no make")
    build, venv = tmp_path / "build", tmp_path / "venv"
    result = subprocess.run(["make", "-n", "-W", "setup.py", f"BUILD={build}", "-o", f"{build}/tf_flags.mk",
                             f"VENV={venv}", "PYTHON=python3.12", *args, f"{venv}/.installed"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0
    assert "PYTHON=python3.12" in result.stderr and "make VENV_PYTHON=python3.12" in result.stderr
    assert not any("pip" in line or "-m venv" in line for line in result.stdout.splitlines())


def test_makefile_accepts_an_existing_interpreter_as_python(tmp_path):
    lines = make_dry_run(tmp_path, f"PYTHON={sys.executable}")
    assert any(line.startswith(f"{sys.executable} -m pip install") for line in lines)


def test_docs_name_venv_python_for_the_interpreter():
    # The Makefile's variable for the Python that makes the venv is VENV_PYTHON.
    for path in [os.path.join(ROOT, "README.md")] + [os.path.join(ROOT, "docs", f) for f in
                                                      sorted(os.listdir(os.path.join(ROOT, "docs")))
                                                      if f.endswith(".md")]:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert "make PYTHON=python" not in text, path


@pytest.mark.parametrize("args", [(), ("UNAME_S=Darwin", "MACOS_CROSS=1")])
def test_makefile_skips_the_check_off_mac_and_in_the_cross_build(tmp_path, args):
    lines = make_dry_run(tmp_path, *args)
    assert any("-m venv" in line for line in lines)
    assert not any("check_macos_env" in line for line in lines)

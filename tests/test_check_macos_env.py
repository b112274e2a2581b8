"""tools/check_macos_env.py: `make` on a Mac checks Python and macOS before it
installs anything (the decision logic, with the versions passed in, and the
Makefile's use of it, through `make -n UNAME_S=Darwin`)."""
import os
import shutil
import subprocess
import sys

import pytest

from tools import check_macos_env as env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("python", [(3, 9), (3, 10), (3, 11), (3, 12)])
@pytest.mark.parametrize("macos", [(13, 0), (14, 5), (15, 1), (26, 0)])
def test_supported_stack_passes(python, macos):
    assert env.check(python, macos) == ([], [])


@pytest.mark.parametrize("python", [(3, 8), (3, 13), (3, 14), (2, 7)])
def test_unsupported_python_says_what_to_use(python):
    errors, _ = env.check(python, (14, 0))
    assert len(errors) == 1
    assert "Python %d.%d" % python in errors[0]
    assert "3.9-3.12" in errors[0] and "make VENV_PYTHON=python3.12" in errors[0]


@pytest.mark.parametrize("macos", [(11, 7), (12, 0)])
def test_macos_below_12_1_fails(macos):
    errors, _ = env.check((3, 11), macos)
    assert len(errors) == 1 and "12.1" in errors[0] and "%d.%d" % macos in errors[0]


@pytest.mark.parametrize("macos", [(12, 1), (12, 7)])
def test_macos_12_works_with_a_note_about_msl_3(macos):
    errors, notes = env.check((3, 12), macos)
    assert errors == [] and len(notes) == 1
    assert "macOS 13" in notes[0] and "HashEncode" in notes[0] and "RobustLoss" in notes[0]


def test_unknown_macos_fails():
    errors, _ = env.check((3, 11), None)
    assert errors and "--macos-version" in errors[0]


@pytest.mark.parametrize("text,version", [("3.12", (3, 12)), ("14.4.1", (14, 4)), ("13", (13, 0)),
                                          ("3.13.0rc1", (3, 13))])
def test_parse_version(text, version):
    assert env.parse_version(text) == version


def test_main_exit_status_and_messages(capsys):
    assert env.main(["--python-version", "3.13", "--macos-version", "15.2"]) == 1
    assert "VENV_PYTHON=python3.12" in capsys.readouterr().err
    assert env.main(["--python-version", "3.12", "--macos-version", "15.2"]) == 0
    assert "OK" in capsys.readouterr().out
    assert env.main(["--python-version", "3.11", "--macos-version", "12.0"]) == 1


def test_script_runs_standalone():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check_macos_env.py"),
                             "--python-version", "3.13", "--macos-version", "14.0"], capture_output=True, text=True)
    assert result.returncode == 1 and "3.9-3.12" in result.stderr


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


def test_makefile_checks_before_installing_on_a_mac(tmp_path):
    lines = make_dry_run(tmp_path, "UNAME_S=Darwin", "VENV_PYTHON=python3.12")
    check = next(i for i, line in enumerate(lines) if "tools/check_macos_env.py" in line)
    venv = next(i for i, line in enumerate(lines) if "-m venv" in line)
    pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert check < venv < pip
    assert lines[check].startswith("python3.12 ") and lines[venv].startswith("test -x")
    assert "python3.12 -m venv" in lines[venv]


@pytest.mark.parametrize("args", [(), ("UNAME_S=Darwin", "MACOS_CROSS=1")])
def test_makefile_skips_the_check_off_mac_and_in_the_cross_build(tmp_path, args):
    lines = make_dry_run(tmp_path, *args)
    assert any("-m venv" in line for line in lines)
    assert not any("check_macos_env" in line for line in lines)

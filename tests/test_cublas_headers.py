"""tools/build/cublas_headers.py (the Makefile's CUBLAS_HOME): cuBLAS's include/
unpacked alone from the pinned wheel, a wheel already downloaded reused, a
wheel without the headers refused. Synthetic wheels: no download here."""
import os
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "build"))
import cublas_headers  # noqa: E402

pytestmark = pytest.mark.source_tree("tools/build/cublas_headers.py")


def fake_wheel(folder, version, members):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"nvidia_cublas_cu12-{version}-py3-none-manylinux_2_27_x86_64.whl")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_unpacks_only_the_headers_of_a_downloaded_wheel(tmp_path, monkeypatch):
    dl = tmp_path / "dl"
    fake_wheel(str(dl), "12.9.3.13", {"nvidia/cublas/include/cublas_v2.h": "#define V2\n",
                                      "nvidia/cublas/include/cublas_api.h": "#define API\n",
                                      "nvidia/cublas/lib/libcublas.so.12": b"\x7fELF" * 1000,
                                      "nvidia_cublas_cu12-12.9.3.13.dist-info/METADATA": "x"})
    monkeypatch.setattr(cublas_headers, "download", lambda *a: pytest.fail("downloaded though the wheel is there"))
    out = tmp_path / "cublas"
    assert cublas_headers.main(["--version", "12.9.3.13", "--out", str(out), "--download-dir", str(dl)]) == 0
    assert sorted(os.listdir(out)) == ["include"]
    assert sorted(os.listdir(out / "include")) == ["cublas_api.h", "cublas_v2.h"]
    assert (out / "include" / "cublas_v2.h").read_text() == "#define V2\n"


def test_downloads_the_pinned_version_when_missing(tmp_path, monkeypatch):
    calls = []

    def download(python, version, folder):
        calls.append(version)
        return fake_wheel(folder, version, {"nvidia/cublas/include/cublas_v2.h": "v2"})

    monkeypatch.setattr(cublas_headers, "download", download)
    monkeypatch.setattr(cublas_headers, "installed", lambda python: None)
    fake_wheel(str(tmp_path / "dl"), "12.0.0.1", {"nvidia/cublas/include/cublas_v2.h": "old"})  # another version
    out = tmp_path / "cublas"
    cublas_headers.main(["--version", "12.9.3.13", "--out", str(out), "--download-dir", str(tmp_path / "dl")])
    assert calls == ["12.9.3.13"] and (out / "include" / "cublas_v2.h").read_text() == "v2"


def test_a_wheel_without_the_headers_is_refused(tmp_path):
    dl = tmp_path / "dl"
    fake_wheel(str(dl), "12.9.3.13", {"nvidia/cublas/lib/libcublas.so.12": "x"})
    with pytest.raises(SystemExit, match="no nvidia/cublas/include/cublas_v2.h"):
        cublas_headers.main(["--version", "12.9.3.13", "--out", str(tmp_path / "c"), "--download-dir", str(dl)])
    assert not os.path.exists(tmp_path / "c" / "include") and not os.path.exists(tmp_path / "c" / "include.tmp")


def installed_package(tmp_path, version):
    include = tmp_path / "site" / "nvidia" / "cublas" / "include"
    include.mkdir(parents=True)
    (include / "cublas_v2.h").write_text(f"installed {version}")
    return lambda python: (version, str(include))


def test_the_installed_package_at_the_pinned_version_needs_no_download(tmp_path, monkeypatch):
    monkeypatch.setattr(cublas_headers, "installed", installed_package(tmp_path, "12.9.3.13"))
    monkeypatch.setattr(cublas_headers, "download", lambda *a: pytest.fail("downloaded"))
    out = tmp_path / "c"
    cublas_headers.main(["--version", "12.9.3.13", "--out", str(out), "--download-dir", str(tmp_path / "dl")])
    assert (out / "include" / "cublas_v2.h").read_text() == "installed 12.9.3.13"


def test_offline_falls_back_to_any_installed_version(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cublas_headers, "installed", installed_package(tmp_path, "12.5.3.2"))
    monkeypatch.setattr(cublas_headers, "download", lambda *a: None)
    out = tmp_path / "c"
    cublas_headers.main(["--version", "12.9.3.13", "--out", str(out), "--download-dir", str(tmp_path / "dl")])
    assert (out / "include" / "cublas_v2.h").read_text() == "installed 12.5.3.2"
    assert "not the pinned 12.9.3.13" in capsys.readouterr().out


def test_offline_without_an_installed_package_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.setattr(cublas_headers, "installed", lambda python: None)
    monkeypatch.setattr(cublas_headers, "download", lambda *a: None)
    with pytest.raises(SystemExit, match="CUBLAS_HOME"):
        cublas_headers.main(["--version", "12.9.3.13", "--out", str(tmp_path / "c"), "--download-dir",
                             str(tmp_path / "dl")])


def test_installed_reads_this_python(tmp_path):
    """The query itself, against this interpreter (which may or may not have the package)."""
    found = cublas_headers.installed(sys.executable)
    assert found is None or os.path.exists(os.path.join(found[1], "cublas_v2.h"))

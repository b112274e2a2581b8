"""cuBLAS's headers for the CUDA build (`make cuda-check`, `make cuda-lib`,
`make cuda-harness`): the include/ folder of NVIDIA's nvidia-cublas-cu12 wheel
at a pinned version, fetched with pip and unpacked alone (the wheel's libraries,
about 850 MB, are not needed: kernels/cuda/cublas_gemm.cu.cc opens cuBLAS at run
time).

    python3 tools/build/cublas_headers.py --version 12.9.3.13 --out build/cublas-12.9.3.13 \\
        [--python .venv/bin/python] [--download-dir build/cublas-dl]

Writes OUT/include/*.h (atomically: OUT/include appears complete or not at all).
A wheel already in the download folder is used without a download; so are the
headers of an nvidia-cublas-cu12 that PYTHON has installed, at the pinned
version, or at any version when the download fails (a GPU machine without
network: TensorFlow's own nvidia-cublas-cu12 then gives them).
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import zipfile

PACKAGE = "nvidia-cublas-cu12"
PREFIX = "nvidia/cublas/include/"


def wheel_path(download_dir, version):
    found = sorted(glob.glob(os.path.join(download_dir, f"{PACKAGE.replace('-', '_')}-{version}-*.whl")))
    return found[0] if found else None


def installed(python):
    """(version, include folder) of the nvidia-cublas-cu12 that `python`
    imports, or None."""
    code = ("import importlib.metadata as m, os\n"
            "d = m.distribution('nvidia-cublas-cu12')\n"
            "print(d.version)\n"
            "print(os.path.abspath(d.locate_file('nvidia/cublas/include')))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) < 2 or not os.path.exists(os.path.join(lines[-1], "cublas_v2.h")):
        return None
    return lines[-2], lines[-1]


def copy_headers(include_dir, out):
    include = os.path.join(out, "include")
    tmp = include + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(include_dir, tmp)
    shutil.rmtree(include, ignore_errors=True)
    os.replace(tmp, include)


def download(python, version, download_dir):
    os.makedirs(download_dir, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "-q", "--retries", "2", "--timeout", "30", "--no-deps",
           "--only-binary=:all:", "--platform", "manylinux_2_27_x86_64", "-d", download_dir, f"{PACKAGE}=={version}"]
    print("cublas_headers: " + " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        return None
    path = wheel_path(download_dir, version)
    if path is None:
        sys.exit(f"cublas_headers: pip left no {PACKAGE} {version} wheel in {download_dir}")
    return path


def unpack_headers(wheel, out):
    include = os.path.join(out, "include")
    tmp = include + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith(PREFIX) and not n.endswith("/")]
        for name in names:
            target = os.path.join(tmp, name[len(PREFIX):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(z.read(name))
    if not os.path.exists(os.path.join(tmp, "cublas_v2.h")):
        shutil.rmtree(tmp)
        sys.exit(f"cublas_headers: {wheel} has no {PREFIX}cublas_v2.h")
    shutil.rmtree(include, ignore_errors=True)
    os.replace(tmp, include)
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--python", default=sys.executable, help="the Python whose pip downloads the wheel")
    parser.add_argument("--download-dir", default=None, help="default: OUT/../cublas-dl")
    args = parser.parse_args(argv)
    download_dir = args.download_dir or os.path.join(os.path.dirname(os.path.abspath(args.out)), "cublas-dl")
    wheel = wheel_path(download_dir, args.version)
    local = installed(args.python) if wheel is None else None
    if wheel is None and not (local and local[0] == args.version):
        wheel = download(args.python, args.version, download_dir)
    if wheel is not None:
        names = unpack_headers(wheel, args.out)
        print(f"cublas_headers: {len(names)} headers of {os.path.basename(wheel)} in {args.out}/include")
        return 0
    if local is None:
        sys.exit(f"cublas_headers: no {PACKAGE} {args.version} wheel (download failed) and no {PACKAGE} installed "
                 f"for {args.python}: set CUBLAS_HOME to a folder with cuBLAS's include/")
    copy_headers(local[1], args.out)
    note = "" if local[0] == args.version else f" (not the pinned {args.version}: the download failed)"
    print(f"cublas_headers: the headers of the installed {PACKAGE} {local[0]}{note} in {args.out}/include")
    return 0


if __name__ == "__main__":
    sys.exit(main())

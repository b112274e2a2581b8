"""A CUDA 12 toolkit for the wheel's CUDA library (`make cuda-lib`), assembled
from PyPI's CUDA 12 wheels and the CUDA 13 compiler driver (docs/BUILDING.md,
"CUDA kernels in the wheel").

    python3 tools/build/cuda12_toolkit.py setup --out build/cuda12 --cuda13 /usr/local/cuda
    build/cuda12/bin/nvcc ...                       # nvcc with CUDA 12's back end

`setup` installs requirements-cuda12.txt (`pip install --target OUT/pypi`)
and lays out OUT as a toolkit root that CUDA 13's nvcc runs from (its own
nvcc.profile):
- include/: CUDA 12's headers (cuda_runtime, the crt headers of
  nvidia-cuda-nvcc-cu12, cub/thrust/libcu++ of nvidia-cuda-cccl-cu12), but
  crt/host_runtime.h, the macros of cudafe++'s host stubs, from CUDA 13
  with its cudafe++ (the same runtime calls; a tile-kernel flag added);
- lib64/libcudart_static.a: CUDA 12's runtime, linked into the library;
- bin/ptxas: CUDA 12's assembler, through this script: every cubin is CUDA 12's;
- bin/nvcc, bin/cudafe++, nvvm/: CUDA 13's driver, host/device splitter and
  C++ front end (cicc), which PyPI's CUDA 12 wheels lack; bin/fatbinary:
  CUDA 13's fat-binary packer, through this script (no compression).
cicc 13 writes PTX ISA 9.0. The ptxas and fatbinary steps declare every PTX
file at PTX_ISA instead, and CUDA 12's ptxas assembles it: ptxas checks every
instruction against the declared ISA and target ("requires PTX ISA .version
8.3 or later"), so PTX that uses anything newer fails the build. The PTX that
is embedded (`compute_XY`) is that checked file.

    python3 tools/build/cuda12_toolkit.py ptxas --real PTXAS ARGS...       # bin/ptxas
    python3 tools/build/cuda12_toolkit.py fatbinary --real FATBINARY --ptxas PTXAS ARGS...
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

# PTX ISA 8.1 (CUDA 12.1): the oldest that holds every instruction of the
# kernels (red.global.add.v2.f32 on sm_90 needs 8.1). Drivers of CUDA 12.1
# (530) and newer compile it; only GPUs newer than the newest machine code
# (sm_90) use it, and their drivers are newer still (Blackwell: 570).
PTX_ISA = "8.1"
VERSION_LINE = re.compile(rb"^\.version (\d+)\.(\d+)[ \t]*$", re.M)
# `.pragma "used_bytes_mask M";` (PTX ISA 8.3): which bytes of the next load
# the code uses, a hint to ptxas alone; cicc 13 writes it before loads of a
# kernel's by-value parameters. Without it the load reads every byte it names,
# as LLVM's NVPTX back end emits for targets before 8.3.
USED_BYTES_MASK_ISA = (8, 3)
USED_BYTES_MASK = re.compile(rb'^[ \t]*\.pragma "used_bytes_mask \d+";[ \t]*\n', re.M)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIREMENTS = os.path.join(ROOT, "requirements-cuda12.txt")
HOST_STUB_HEADER = "crt/host_runtime.h"


def declare_isa(path, isa=PTX_ISA):
    """Rewrites the `.version` line of PTX file `path` to `isa` when it names a
    newer one, dropping the hints that `isa` lacks; returns the version the
    file had."""
    with open(path, "rb") as f:
        text = f.read()
    m = VERSION_LINE.search(text)
    if not m:
        raise SystemExit(f"cuda12_toolkit: {path} has no .version line")
    had = (int(m.group(1)), int(m.group(2)))
    target = tuple(int(x) for x in isa.split("."))
    if had > target:
        text = text[:m.start()] + b".version " + isa.encode() + text[m.end():]
        if target < USED_BYTES_MASK_ISA:
            text = USED_BYTES_MASK.sub(b"", text)
        with open(path, "wb") as f:
            f.write(text)
    return had


def ptxas(real, args):
    for a in args:
        if a.endswith(".ptx") and os.path.exists(a):
            declare_isa(a)
    os.execv(real, [real] + args)


def fatbinary(real, ptxas_path, args):
    images = [dict(kv.split("=", 1) for kv in a.split("=", 1)[1].split(","))
              for a in args if a.startswith("--image3=")]
    elf_sms = {im.get("sm") for im in images if im.get("kind") == "elf"}
    for im in images:
        if im.get("kind") == "ptx":
            declare_isa(im["file"])
            if im.get("sm") not in elf_sms:  # not assembled by the ptxas step: check it here
                subprocess.run([ptxas_path, f"-arch=sm_{im['sm']}", im["file"], "-o", os.devnull], check=True)
    # CUDA 13's fatbinary compresses with modes that older drivers may not
    # read; CUDA 12's drivers read uncompressed images.
    os.execv(real, [real, "--compress=false"] + args)


def link(src, dst):
    if not os.path.exists(src):
        raise SystemExit(f"cuda12_toolkit: {src} is missing")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.remove(dst)
    os.symlink(os.path.abspath(src), dst)


def wrapper(path, mode, *extra):
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec python3 "{os.path.abspath(__file__)}" {mode} {" ".join(extra)} "$@"\n')
    os.chmod(path, 0o755)


PROFILE = """\
TOP              = $(_HERE_)/..
CICC_PATH        = $(TOP)/nvvm/bin
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH            += $(CICC_PATH):$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""


def setup(out, cuda13, python):
    cuda13 = os.path.realpath(cuda13)
    pypi = os.path.join(out, "pypi")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:", "--target", pypi,
                    "-r", REQUIREMENTS], check=True)
    nv = os.path.join(pypi, "nvidia")
    include = os.path.join(out, "include")
    for part in ("cuda_runtime/include", "cuda_nvcc/include", "cuda_cccl/include"):
        src = os.path.join(nv, part)
        for root, _, files in os.walk(src):
            for name in files:
                if name != "__init__.py":
                    rel = os.path.relpath(os.path.join(root, name), src)
                    link(os.path.join(root, name), os.path.join(include, rel))
    # The header of the host stubs that cudafe++ writes comes with cudafe++:
    # CUDA 13's launch macro takes its tile-kernel flag (0 for these
    # kernels); the runtime calls it makes are CUDA 12's.
    link(os.path.join(cuda13, "include", HOST_STUB_HEADER), os.path.join(include, HOST_STUB_HEADER))
    link(os.path.join(nv, "cuda_runtime/lib/libcudart_static.a"), os.path.join(out, "lib64/libcudart_static.a"))
    real_ptxas = os.path.join(nv, "cuda_nvcc/bin/ptxas")
    os.chmod(real_ptxas, 0o755)
    bin_dir = os.path.join(out, "bin")
    for tool in ("nvcc", "cudafe++"):
        link(os.path.join(cuda13, "bin", tool), os.path.join(bin_dir, tool))
    link(os.path.join(cuda13, "nvvm/bin"), os.path.join(out, "nvvm/bin"))
    link(os.path.join(cuda13, "nvvm/libdevice"), os.path.join(out, "nvvm/libdevice"))
    with open(os.path.join(bin_dir, "nvcc.profile"), "w") as f:
        f.write(PROFILE)
    wrapper(os.path.join(bin_dir, "ptxas"), "ptxas", "--real", os.path.abspath(real_ptxas))
    wrapper(os.path.join(bin_dir, "fatbinary"), "fatbinary", "--real", os.path.join(cuda13, "bin/fatbinary"),
            "--ptxas", os.path.abspath(real_ptxas))
    version = subprocess.run([real_ptxas, "--version"], capture_output=True, text=True, check=True).stdout
    print(f"cuda12_toolkit: {out}: ptxas {version.strip().splitlines()[-1]}; nvcc, cicc from {cuda13}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # The wrappers' own calls (bin/ptxas, bin/fatbinary): fixed words first, nvcc's arguments after.
    if argv[:2] == ["ptxas", "--real"]:
        return ptxas(argv[2], argv[3:])
    if argv[:2] == ["fatbinary", "--real"] and argv[3:4] == ["--ptxas"]:
        return fatbinary(argv[2], argv[4], argv[5:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["setup"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cuda13", required=True, help="the CUDA 13 toolkit root (nvcc, cudafe++, nvvm, fatbinary)")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    setup(args.out, args.cuda13, args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())

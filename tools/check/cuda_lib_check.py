"""Checks of the CUDA kernels' library of the Linux wheel (`make cuda-lib`) and
of the op libraries beside it, in a package directory (build/wheel/linux/pkg).

    python3 tools/check/cuda_lib_check.py --pkg build/wheel/linux/pkg --tf-dir <site-packages>/tensorflow \\
        [--cuobjdump PATH]

The CUDA library (`_build_info.json`'s "cuda_library"):
- needs only TensorFlow's libraries and the C/C++ runtime: no libcudart (the
  runtime is linked in statically) and no libcuda (the runtime opens the
  driver when first used);
- every undefined dynamic symbol is defined by TensorFlow's
  libtensorflow_framework.so.2 / libtensorflow_cc.so.2 (of --tf-dir) or by the
  C/C++ runtime libraries it needs (as this machine has them; their symbol
  versions are auditwheel's check);
- exports no CUDA runtime symbol (kept inside, so it never binds to or
  interposes TensorFlow's own libcudart);
- holds GPU kernel registrations (Eigen::GpuDevice kernels) and no op
  registration (REGISTER_OP stays in the op library: no double registration);
- its GPU code is exactly what the build info records: `cuobjdump --list-elf`
  gives the "sass" architectures, `--list-ptx` the "ptx" ones;
- the toolkit of its GPU code and runtime is the build info's "cuda_version"
  (CUDA 12 for drivers 525 and newer): every embedded cubin (`cuobjdump
  -xelf all`) carries the ELF ABI of CUDA 12 and older (7; CUDA 13's ptxas
  writes 8, which drivers before 580 cannot load) and its toolkit version in
  e_version (129: CUDA 12.9); every embedded PTX (`-xptx all`) declares an ISA
  no newer than the drivers of that major version compile (PTX_ISA_LIMIT,
  tools/build/cuda12_toolkit.py's PTX_ISA for CUDA 12); and the CUDA runtime linked
  in reports that version (its own cudaRuntimeGetVersion, called through
  the library's symbol table in a process with TensorFlow's libraries).
The op libraries ("isa_libraries"): register the ops, hold no GPU kernel or
GPU code and use no CUDA symbol.

Exit status 0 when every check passes, 1 otherwise (each failure on stderr).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
from glibc_compat import library_path as runtime_library  # noqa: E402  (standard library only)
from check_report import check_main  # noqa: E402  (standard library only)

TF_LIBS = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2")
# The C/C++ runtime every manylinux policy allows.
RUNTIME = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
           "librt.so.1", "ld-linux-x86-64.so.2"}
CUDA_SYMBOL = re.compile(r"^(__)?cuda[A-Z_]|^cu[A-Z][a-z]")
OP_REGISTRATION = "OpDefBuilder"  # REGISTER_OP's builder (register_op::OpDefBuilderWrapper / Receiver)
GPU_KERNEL = "Eigen::GpuDevice"  # the device type of every GPU kernel class (kernels/cuda/tf_gpu.h)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def dynamic_symbols(path):
    """(defined names, undefined non-weak names) of the dynamic symbol table, versions stripped."""
    defined, undefined = set(), set()
    for line in run(["nm", "-D", path]).splitlines():
        parts = line.split()
        kind, name = (parts[0], parts[1]) if len(parts) == 2 else (parts[1], parts[2])
        name = name.split("@")[0]
        if kind == "U":
            undefined.add(name)
        elif kind not in ("w", "v"):
            defined.add(name)
    return defined, undefined


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run(["readelf", "-d", path]))


def demangled_symbols(path):
    """Every symbol name (static table when present, else the dynamic one), demangled."""
    out = subprocess.run(["nm", "-C", path], capture_output=True, text=True).stdout
    return out or run(["nm", "-C", "-D", path])


def find_cuobjdump(explicit=None):
    candidates = [explicit, shutil.which("cuobjdump")]
    candidates += sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "build", "wheel-tools", "lib",
                                                "python*", "site-packages", "nvidia", "cu*", "bin", "cuobjdump")))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def gpu_code(cuobjdump, path):
    """({sm_XY} of the embedded machine code, {compute_XY} of the embedded PTX)."""
    def listing(flag):
        out = subprocess.run([cuobjdump, flag, path], capture_output=True, text=True)
        if out.returncode != 0 and "does not contain device code" not in out.stderr + out.stdout:
            raise RuntimeError(f"{cuobjdump} {flag} {path} failed: {out.stderr.strip()}")
        return out.stdout
    elf = set(re.findall(r"\.(sm_\d+[a-z]?)\.cubin", listing("--list-elf")))
    ptx = set("compute_" + n for n in re.findall(r"\.sm_(\d+[a-z]?)\.ptx", listing("--list-ptx")))
    return elf, ptx


# The newest PTX ISA the drivers of each CUDA major version compile for the
# build's driver floor (CUDA 12: tools/build/cuda12_toolkit.py's PTX_ISA).
from cuda12_toolkit import PTX_ISA as CUDA12_PTX_ISA  # noqa: E402  (standard library only)

PTX_ISA_LIMIT = {"12": CUDA12_PTX_ISA, "13": "9.0"}
# EI_ABIVERSION of cubins: 7 up to CUDA 12.9, 8 from CUDA 13.0's ptxas.
CUBIN_ABI = {"12": 7, "13": 8}


def embedded_code(cuobjdump, path, workdir):
    """[{"file", "kind": "elf"|"ptx", "arch", ...}] of every cubin (ELF OS ABI
    version "abi", toolkit version "toolkit" from e_version: 129 -> "12.9")
    and PTX ("isa" of its .version line, "producer": its "Cuda compilation
    tools, release X" comment) that `cuobjdump -xelf all / -xptx all` extracts."""
    for flag in ("-xelf", "-xptx"):
        out = subprocess.run([cuobjdump, flag, "all", os.path.abspath(path)], cwd=workdir, capture_output=True,
                             text=True)
        if out.returncode != 0 and "does not contain device code" not in out.stderr + out.stdout:
            raise RuntimeError(f"{cuobjdump} {flag} all {path} failed: {out.stderr.strip()}")
    found = []
    for name in sorted(os.listdir(workdir)):
        full = os.path.join(workdir, name)
        arch = re.search(r"\.(sm_\d+[a-z]?)\.(cubin|ptx)$", name)
        if name.endswith(".cubin"):
            head = open(full, "rb").read(24)
            e_version = int.from_bytes(head[20:24], "little")
            found.append({"file": name, "kind": "elf", "arch": arch and arch.group(1), "abi": head[8],
                          "toolkit": f"{e_version // 10}.{e_version % 10}" if e_version > 1 else "unknown"})
        elif name.endswith(".ptx"):
            text = open(full, errors="replace").read(4096)
            isa = re.search(r"^\.version (\d+\.\d+)", text, re.M)
            producer = re.search(r"Cuda compilation tools, release (\d+\.\d+)", text)
            found.append({"file": name, "kind": "ptx", "arch": arch and arch.group(1),
                          "isa": isa.group(1) if isa else None, "producer": producer.group(1) if producer else None})
    return found


def version_tuple(text):
    return tuple(int(x) for x in text.split("."))


def check_toolkit(code, cuda_version):
    """Problems of the embedded code `code` (embedded_code) against the build's CUDA version."""
    major = (cuda_version or "").split(".")[0]
    problems = []
    if major not in PTX_ISA_LIMIT:
        return [f"the build info's cuda_version {cuda_version!r} is not one of CUDA {', '.join(PTX_ISA_LIMIT)}"]
    for c in code:
        if c["kind"] == "elf":
            if c["abi"] != CUBIN_ABI[major] or c["toolkit"].split(".")[0] != major:
                problems.append(f"cubin {c['file']}: ELF ABI {c['abi']}, toolkit {c['toolkit']}; a CUDA {major} "
                                f"build has ABI {CUBIN_ABI[major]} and toolkit {major}.x")
        elif c["isa"] is None or version_tuple(c["isa"]) > version_tuple(PTX_ISA_LIMIT[major]):
            problems.append(f"PTX {c['file']}: ISA {c['isa']}, newer than {PTX_ISA_LIMIT[major]}, the newest "
                            f"that the CUDA {major} drivers of the floor compile")
    if not code:
        problems.append("cuobjdump extracted no GPU code")
    return problems


RUNTIME_VERSION = r"""
import ctypes, os, sys
tf_dir, lib = sys.argv[1:3]
for name in ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2"):
    if os.path.exists(os.path.join(tf_dir, name)):
        ctypes.CDLL(os.path.join(tf_dir, name), mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(lib)
base = min(int(l.split("-")[0], 16) for l in open("/proc/self/maps") if l.rstrip().endswith(os.path.realpath(lib)))
fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(base + int(sys.argv[3], 16))
v = ctypes.c_int(0)
print(fn(ctypes.byref(v)), v.value)
"""


def linked_runtime_version(path, tf_dir):
    """The version the statically linked CUDA runtime reports (its
    cudaRuntimeGetVersion, a local symbol of the library, called at its
    address in a child process with TensorFlow's libraries), e.g. 12090;
    None when the symbol table lacks it (a stripped library)."""
    for line in run(["nm", path]).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "cudaRuntimeGetVersion":
            out = subprocess.run([sys.executable, "-c", RUNTIME_VERSION, tf_dir, path, parts[0]],
                                 capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise RuntimeError(f"calling {path}'s cudaRuntimeGetVersion failed: {out.stderr[-2000:]}")
            status, version = out.stdout.split()[-2:]
            return int(version) if status == "0" else None
    return None


def check_cuda_library(path, tf_dir, archs, cuobjdump=None, cuda_version=None):
    problems, notes = [], []
    name = os.path.basename(path)
    libs = needed(path)
    odd = [n for n in libs if n not in set(TF_LIBS) | RUNTIME]
    if odd:
        problems.append(f"{name} needs {odd}: neither TensorFlow nor the C/C++ runtime "
                        f"(libcudart must be linked in statically, libcuda is opened by the runtime)")
    defined, undefined = dynamic_symbols(path)
    providers = {}
    for lib in TF_LIBS:
        lib_path = os.path.join(tf_dir, lib)
        if lib in libs or lib == TF_LIBS[0]:
            if not os.path.exists(lib_path):
                problems.append(f"{lib_path} is missing: cannot resolve {name}'s symbols")
                continue
            providers[lib] = dynamic_symbols(lib_path)[0]
    for lib in libs:
        if lib in RUNTIME:
            where = runtime_library(lib)
            if where:
                providers[lib] = dynamic_symbols(where)[0]
    provided = set().union(*providers.values()) if providers else set()
    unresolved = sorted(undefined - provided)
    if unresolved:
        problems.append(f"{name}: {len(unresolved)} undefined symbols that neither TensorFlow "
                        f"({', '.join(TF_LIBS)}) nor the C/C++ runtime define: {unresolved[:8]}")
    from_tf = sum(1 for s in undefined if any(s in providers.get(lib, ()) for lib in TF_LIBS))
    exported = sorted(s for s in defined if CUDA_SYMBOL.match(s))
    if exported:
        problems.append(f"{name} exports CUDA runtime symbols {exported[:5]} (the static runtime must stay "
                        f"inside: -Wl,--exclude-libs,ALL)")
    if any(OP_REGISTRATION in s for s in defined | undefined):
        problems.append(f"{name} registers ops (REGISTER_OP): they belong to the op library only")
    if GPU_KERNEL not in demangled_symbols(path):
        problems.append(f"{name} holds no GPU kernel ({GPU_KERNEL} symbols)")
    notes.append(f"{name}: needs {', '.join(libs)}; {len(undefined)} undefined symbols, {from_tf} of them "
                 f"TensorFlow's, the rest the C/C++ runtime's; no CUDA symbol exported")
    if cuobjdump:
        elf, ptx = gpu_code(cuobjdump, path)
        want_elf, want_ptx = set((archs or {}).get("sass", [])), set((archs or {}).get("ptx", []))
        if elf != want_elf or ptx != want_ptx:
            problems.append(f"{name}: GPU code sass {sorted(elf)}, ptx {sorted(ptx)}; the build info says "
                            f"sass {sorted(want_elf)}, ptx {sorted(want_ptx)}")
        notes.append(f"{name}: cuobjdump: machine code for {', '.join(sorted(elf))}; PTX {', '.join(sorted(ptx))}")
        with tempfile.TemporaryDirectory() as workdir:
            code = embedded_code(cuobjdump, path, workdir)
        problems += check_toolkit(code, cuda_version)
        cubins = sorted({f"{c['arch']} (ptxas {c['toolkit']}, ELF ABI {c['abi']})" for c in code if c["kind"] == "elf"})
        ptxs = sorted({f"{c['arch']} (ISA {c['isa']}" + (f", from NVVM of CUDA {c['producer']})" if c["producer"]
                                                          else ")") for c in code if c["kind"] == "ptx"})
        notes.append(f"{name}: {len(code)} embedded images: cubins {', '.join(cubins)}; PTX {', '.join(ptxs) or 'none'}")
    else:
        problems.append("no cuobjdump (PATH, or build/wheel-tools: requirements-wheel-tools.txt): GPU code not checked")
    runtime = linked_runtime_version(path, tf_dir)
    if runtime is None:
        notes.append(f"{name}: no cudaRuntimeGetVersion in its symbol table: the linked runtime's version not checked")
    elif cuda_version and f"{runtime // 1000}.{runtime % 1000 // 10}" != cuda_version:
        problems.append(f"{name}: its CUDA runtime reports {runtime}; the build info says CUDA {cuda_version}")
    else:
        notes.append(f"{name}: the CUDA runtime linked in reports {runtime} (cudaRuntimeGetVersion)")
    return problems, notes


def check_op_library(path, cuobjdump=None):
    problems = []
    name = os.path.basename(path)
    defined, undefined = dynamic_symbols(path)
    cuda = sorted(s for s in undefined if CUDA_SYMBOL.match(s))
    if cuda or any("cuda" in n for n in needed(path)):
        problems.append(f"{name} uses CUDA ({cuda[:5]}): the GPU kernels belong to the CUDA library only")
    if GPU_KERNEL in demangled_symbols(path):
        problems.append(f"{name} holds GPU kernels ({GPU_KERNEL}): they belong to the CUDA library only")
    if not any(OP_REGISTRATION in s for s in defined | undefined):
        problems.append(f"{name} registers no op (no {OP_REGISTRATION} symbol)")
    if cuobjdump and any(gpu_code(cuobjdump, path)):
        problems.append(f"{name} holds GPU code (cuobjdump): it belongs to the CUDA library only")
    return problems


def check_pkg(pkg, tf_dir, cuobjdump=None):
    info = json.load(open(os.path.join(pkg, "_build_info.json")))
    if not info.get("cuda_library"):
        return [f"{pkg}/_build_info.json names no cuda_library"], []
    cuobjdump = find_cuobjdump(cuobjdump)
    problems, notes = check_cuda_library(os.path.join(pkg, info["cuda_library"]), tf_dir, info.get("cuda_archs"),
                                         cuobjdump, info.get("cuda_version"))
    op_libs = list((info.get("isa_libraries") or {}).values()) + ([info["library"]] if info.get("library") else [])
    for lib in op_libs:
        problems += check_op_library(os.path.join(pkg, lib), cuobjdump)
    notes.append(f"op libraries with the op registrations, without GPU kernels or CUDA symbols: {', '.join(op_libs)}")
    return problems, notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pkg", required=True)
    parser.add_argument("--tf-dir", required=True, help="site-packages/tensorflow of the TensorFlow built against")
    parser.add_argument("--cuobjdump")
    return check_main("cuda_lib_check", parser, lambda args: check_pkg(args.pkg, args.tf_dir, args.cuobjdump), "pkg",
                      argv)


if __name__ == "__main__":
    sys.exit(main())

"""The CUDA kernels' library of the Linux wheel as built (`make cuda-lib`, run
by `make wheels` where nvcc is): tools/check/cuda_lib_check.py's checks (static CUDA
runtime, every undefined symbol TensorFlow's or the C/C++ runtime's, GPU
kernels and no op registration, the architectures cuobjdump lists), that those
checks fail on a wrong library, the architecture plan, and that it loads in
this CPU TensorFlow after the op library and adds GPU kernels only. No GPU runs
here: nothing of this executes a kernel."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "build"))
sys.path.insert(0, os.path.join(ROOT, "tools", "check"))
import cuda_archs  # noqa: E402
import cuda12_toolkit  # noqa: E402,F401
import cuda_lib_check  # noqa: E402

pytestmark = pytest.mark.source_tree("tools/check/cuda_lib_check.py and the CUDA library's build")

TF_DIR = os.path.dirname(tf.__file__)
# METAL_OPS_CUDA_PKG: another package folder to check (e.g. one `make cuda-lib PKG=<dir>` wrote).
PKG_CANDIDATES = [p for p in (os.environ.get("METAL_OPS_CUDA_PKG"),) if p] + [
    os.path.join(ROOT, "build", "wheel", "linux", "pkg"), os.path.join(ROOT, "python", "metal_ops")]


def built_pkg():
    for pkg in PKG_CANDIDATES:
        path = os.path.join(pkg, "_build_info.json")
        if os.path.exists(path):
            info = json.load(open(path))
            if info.get("cuda_library") and os.path.exists(os.path.join(pkg, info["cuda_library"])):
                return pkg, info
    pytest.skip("no CUDA library built (`make wheels` or `make cuda-lib` with nvcc on PATH); looked in "
                + ", ".join(os.path.relpath(p, ROOT) for p in PKG_CANDIDATES))


def makefile_capabilities():
    text = open(os.path.join(ROOT, "Makefile")).read()
    return re.search(r"^TF_CUDA_CAPABILITIES := (.*)$", text, re.M).group(1).split()


def test_plan_keeps_what_nvcc_compiles():
    p = cuda_archs.plan(["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"], {"75", "80", "89", "90", "100"})
    assert p["sass"] == ["sm_80", "sm_89", "sm_90"] and p["ptx"] == ["compute_90"]
    assert p["dropped"] == ["sm_60", "sm_70"]
    assert cuda_archs.gencode(p).split(" -gencode ")[-1] == "arch=compute_90,code=compute_90"
    with pytest.raises(ValueError, match="not a CUDA capability"):
        cuda_archs.plan(["9.0"], {"90"})


def test_plan_refuses_gpus_older_than_the_kernels():
    """sm_60 and sm_70 are left out even where nvcc compiles them (a CUDA 12
    nvcc): the tensor-core kernels need sm_80; the loader names the reason on
    such GPUs."""
    p = cuda_archs.plan(["sm_60", "sm_70", "sm_80", "compute_90"], {"60", "70", "80", "90"})
    assert p["sass"] == ["sm_80", "sm_90"] and p["dropped"] == ["sm_60", "sm_70"]
    assert "8.0" in cuda_archs.MIN_SM_REASON and cuda_archs.MIN_SM == 80


def test_cuda_lib_builds_with_the_cuda12_toolkit():
    """`make cuda-lib` compiles with the CUDA 12 toolkit (CUDA_LIB_HOME, by
    default the one tools/build/cuda12_toolkit.py assembles), not cuda-check's nvcc."""
    text = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^CUDA_LIB_HOME \?= \$\(CUDA12_HOME\)$", text, re.M)
    assert "NVCC=$(CUDA_LIB_NVCC) CUDA_HOME=$(CUDA_LIB_HOME)" in text
    reqs = open(os.path.join(ROOT, "requirements-cuda12.txt")).read()
    pins = dict(re.findall(r"^(nvidia-[\w-]+-cu12)==([\d.]+)$", reqs, re.M))
    assert set(pins) == {"nvidia-cuda-nvcc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-cccl-cu12"}
    assert {v.split(".")[0] + "." + v.split(".")[1] for v in pins.values()} == {"12.9"}, pins


def test_ptx_is_declared_at_the_floors_isa(tmp_path):
    """tools/build/cuda12_toolkit.py's ptxas step: cicc 13's `.version 9.0` becomes
    PTX_ISA; an older declaration stays as it is."""
    import cuda12_toolkit
    ptx = tmp_path / "k.ptx"
    ptx.write_bytes(b"//\n// Cuda compilation tools, release 13.0\n//\n\n.version 9.0\n.target sm_90\n")
    assert cuda12_toolkit.declare_isa(str(ptx)) == (9, 0)
    assert b"\n.version " + cuda12_toolkit.PTX_ISA.encode() + b"\n" in ptx.read_bytes()
    ptx.write_bytes(b".version 7.8\n.target sm_80\n")
    assert cuda12_toolkit.declare_isa(str(ptx)) == (7, 8) and ptx.read_bytes().startswith(b".version 7.8\n")


def test_ptx_below_8_3_loses_the_used_bytes_hint(tmp_path):
    """cicc 13 writes `.pragma "used_bytes_mask M";` (PTX ISA 8.3) before loads
    of by-value kernel parameters; CUDA 12's ptxas refuses it in a file declared
    at 8.1, so the ptxas step drops it and keeps every instruction."""
    import cuda12_toolkit
    ptx = tmp_path / "k.ptx"
    body = (b"$L__BB0_2:\n\t.pragma \"used_bytes_mask 15\";\n"
            b"\tld.param.v2.u32 \t{%r41, %r42}, [%rd29+656];\n\t.pragma \"nounroll\";\n")
    ptx.write_bytes(b".version 9.0\n.target sm_90\n" + body)
    cuda12_toolkit.declare_isa(str(ptx))
    text = ptx.read_bytes()
    assert b"used_bytes_mask" not in text
    assert b"ld.param.v2.u32 \t{%r41, %r42}, [%rd29+656];" in text and b'.pragma "nounroll";' in text
    ptx.write_bytes(b".version 9.0\n.target sm_90\n" + body)
    cuda12_toolkit.declare_isa(str(ptx), isa="8.3")
    assert b'.pragma "used_bytes_mask 15";' in ptx.read_bytes()


def test_toolkit_check_names_cuda13_code():
    ok = [{"file": "a.sm_90.cubin", "kind": "elf", "arch": "sm_90", "abi": 7, "toolkit": "12.9"},
          {"file": "a.sm_90.ptx", "kind": "ptx", "arch": "sm_90", "isa": "8.1", "producer": "13.0"}]
    assert cuda_lib_check.check_toolkit(ok, "12.9") == []
    bad = [{"file": "b.sm_90.cubin", "kind": "elf", "arch": "sm_90", "abi": 8, "toolkit": "unknown"},
           {"file": "b.sm_90.ptx", "kind": "ptx", "arch": "sm_90", "isa": "9.0", "producer": "13.0"}]
    text = "\n".join(cuda_lib_check.check_toolkit(bad, "12.9"))
    assert "ELF ABI 8" in text and "ISA 9.0" in text
    assert cuda_lib_check.check_toolkit([], "12.9") == ["cuobjdump extracted no GPU code"]


def test_built_library_passes_the_checks():
    pkg, info = built_pkg()
    if not cuda_lib_check.find_cuobjdump():
        pytest.skip("no cuobjdump (the CUDA toolkit's, or build/wheel-tools from requirements-wheel-tools.txt)")
    problems, notes = cuda_lib_check.check_pkg(pkg, TF_DIR)
    assert problems == [], "\n".join(problems + notes)
    archs = info["cuda_archs"]
    if archs["requested"] == makefile_capabilities():
        assert archs["dropped"] == ["sm_60", "sm_70"] and archs["sass"] == ["sm_80", "sm_89", "sm_90"]
        assert "compute_90" in archs["ptx"]
    assert info["cuda_version"].startswith("12."), info["cuda_version"]


def test_checks_fail_on_a_wrong_library(tmp_path):
    pkg, info = built_pkg()
    op_lib = next(iter(info.get("isa_libraries", {}).values()), info.get("library"))
    # The op library posing as the CUDA library, and the CUDA library as an op library.
    shutil.copy(os.path.join(pkg, op_lib), tmp_path / "_metal_ops_cuda.so")
    shutil.copy(os.path.join(pkg, info["cuda_library"]), tmp_path / "_metal_ops.x86-64-v2.so")
    wrong = {"tensorflow_version": info["tensorflow_version"], "isa_libraries": {"x86-64-v2": "_metal_ops.x86-64-v2.so"},
             "cuda_library": "_metal_ops_cuda.so", "cuda_archs": {"sass": ["sm_75"], "ptx": []},
             "cuda_version": "12.9"}
    (tmp_path / "_build_info.json").write_text(json.dumps(wrong))
    problems, _ = cuda_lib_check.check_pkg(str(tmp_path), TF_DIR)
    text = "\n".join(problems)
    assert "registers ops (REGISTER_OP)" in text and "holds no GPU kernel" in text
    assert "holds GPU kernels" in text and "registers no op" in text
    if cuda_lib_check.find_cuobjdump():
        assert "GPU code sass" in text and "holds GPU code (cuobjdump)" in text


LOAD_IN_CPU_TF = r"""
import json, sys
import tensorflow as tf
from tensorflow.python.framework import kernels
import metal_ops
from metal_ops import _loader

def devices():
    return {op: sorted({k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel})
            for op in ops}

ops = sorted(n for n in dir(metal_ops.load_library()) if n.startswith("MetalOps"))
before = devices()
tf.load_library(sys.argv[1])
print(json.dumps({"before": before, "after": devices(), "cuda": _loader.cuda_info()["loaded"]}))
"""


def test_loads_in_cpu_tensorflow_and_adds_gpu_kernels_only():
    """In tensorflow-cpu (what the library is built against), loaded by hand after
    the op library: every symbol resolves (TensorFlow loads with RTLD_NOW), no op
    is registered twice, and the ops gain GPU kernels beside their CPU ones."""
    pkg, info = built_pkg()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", LOAD_IN_CPU_TF, os.path.join(pkg, info["cuda_library"])],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "already registered" not in out.stderr.lower(), out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    gpu_ops = [op for op, devs in result["after"].items() if "GPU" in devs]
    assert len(gpu_ops) >= 8, result["after"]
    for op, devs in result["before"].items():
        assert "GPU" not in devs, f"{op} had a GPU kernel before the CUDA library loaded"
        assert set(devs) <= set(result["after"][op]), op
    assert result["cuda"] is False  # the loader itself never loads it in CPU TensorFlow

"""The C++, Objective-C++, CUDA and Metal sources reach TensorFlow only
through its public headers and C API.

Any TensorFlow release may rename, remove or change a private symbol without
notice, so the sources under kernels/ and grappler/ must not

- look symbols up at run time (dlopen / dlsym), or name TensorFlow's mangled
  C++ symbols (_ZN10tensorflow..., _ZN3tsl...); the one exception,
  RUNTIME_LOOKUP_ALLOWED, opens a vendor library's public API, never
  TensorFlow's;
- declare anything inside TensorFlow's namespaces (`namespace tensorflow {`,
  `namespace tsl {`): a hand-written declaration of an internal function;
- declare TensorFlow's C functions (TF_*) by hand instead of including the
  header that declares them (a prototype at file scope; the definitions a
  plugin must export, such as TF_InitGraph, have a body and are allowed).
"""
import os
import re

import pytest

pytestmark = pytest.mark.source_tree("the sources")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_DIRS = ("kernels", "grappler")
EXTENSIONS = (".cc", ".h", ".mm", ".cu", ".metal")

_RUNTIME_LOOKUP = re.compile(r"\b(dlsym|dlopen|dlvsym|dladdr)\s*\(")
_MANGLED = re.compile(r"_ZN(10tensorflow|3tsl)")
_TF_NAMESPACE = re.compile(r"\bnamespace\s+(tensorflow|tsl)\b(\s*::\s*\w+)*\s*\{")
# `int TF_Foo(TF_Bar* b);` at file scope (column 0), optionally extern "C":
# a prototype, not a call (calls are indented) and not a definition (`{`).
_TF_C_PROTOTYPE = re.compile(
    r'^(?:extern\s+"C"\s+)?(?:(?:const|struct|unsigned|static|inline|TF_CAPI_EXPORT)\s+)*'
    r"[A-Za-z_][\w:]*[\s\*&]+\*?\s*TF_[A-Za-z]\w*\s*\([^;{}]*\)\s*;",
    re.M)


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def violations(text):
    """Every reach into TensorFlow's internals in one source's text: (rule, excerpt)."""
    code = _strip_comments(text)
    found = []
    for rule, pattern in (("run-time symbol lookup", _RUNTIME_LOOKUP),
                          ("mangled TensorFlow symbol", _MANGLED),
                          ("declaration inside TensorFlow's namespace", _TF_NAMESPACE),
                          ("hand-written TF_* C prototype", _TF_C_PROTOTYPE)):
        for m in pattern.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            found.append((rule, f"line {line}: {m.group(0).strip()[:120]}"))
    return found


def _sources():
    for d in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for name in sorted(files):
                if name.endswith(EXTENSIONS):
                    yield os.path.relpath(os.path.join(dirpath, name), ROOT)


SOURCES = sorted(_sources())


def test_sources_found():
    assert "kernels/fused_conv2d/fused_conv2d_cpu.cc" in SOURCES
    assert "grappler/fusion_plugin.cc" in SOURCES
    assert any(s.endswith(".mm") for s in SOURCES)


# Sources that open a library other than TensorFlow's at run time, and why;
# every other rule still applies to them.
RUNTIME_LOOKUP_ALLOWED = {
    "kernels/metal_plan/executor.cc": "the strict model of Metal (metal_ops_model_hooks), a test library that "
                                      "the test harness loads (tests/metal_shim/model.py) for METAL_OPS_METAL=shim "
                                      "or shim-stream",
    "kernels/cuda/cublas_gemm.cu.cc": "NVIDIA's cuBLAS (libcublas.so.N), its functions typed by cublas_v2.h: the "
                                      "CUDA library then loads without cuBLAS and uses the one TensorFlow loaded",
}


@pytest.mark.parametrize("path", SOURCES)
def test_no_tensorflow_internals(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    found = violations(text)
    if path in RUNTIME_LOOKUP_ALLOWED:
        assert "libtensorflow" not in _strip_comments(text), f"{path} may open a library at run time, never TF's"
        found = [v for v in found if v[0] != "run-time symbol lookup"]
    assert found == [], path


def test_runtime_lookup_exceptions_exist_and_look_up():
    for path in RUNTIME_LOOKUP_ALLOWED:
        assert path in SOURCES, path
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            assert any(rule == "run-time symbol lookup" for rule, _ in violations(f.read())), path


# What the check must catch: the reaches into TensorFlow's internals this
# project once had, and look-alikes it must let through.
CAUGHT = [
    'void* sym = dlsym(lib, "_ZN10tensorflow11MklMatMulOpIN5Eigen16ThreadPoolDeviceEfLb0EE11MklBlasGemmE");',
    'void* lib = dlopen("libtensorflow_cc.so.2", RTLD_NOW | RTLD_NOLOAD);',
    "namespace tensorflow {\nbool IsMKLEnabled();\n}",
    "namespace tsl {\nbool OpDeterminismRequired();\n}  // namespace tsl",
    "namespace tensorflow::grappler {\nint x;\n}",
    'extern "C" void TF_SetStatus(TF_Status* s, TF_Code code, const char* msg);',
    "TF_Tensor* TF_AllocateOutput(TF_OpKernelContext* context, int index);",
]
ALLOWED = [
    '#include "tensorflow/core/util/util.h"',
    "// dlsym(lib, name) is never used\n/* namespace tensorflow { */",
    "  TF_SetStatus(status, TF_OK, \"\");",
    'extern "C" void TF_InitGraph(TP_OptimizerRegistrationParams* params, TF_Status* status) {\n}',
    "using ::tensorflow::OpKernel;",
    "tsl::thread::ThreadPool* workers = nullptr;",
]


@pytest.mark.parametrize("text", CAUGHT)
def test_check_catches(text):
    assert violations(text), text


@pytest.mark.parametrize("text", ALLOWED)
def test_check_allows(text):
    assert violations(text) == [], text

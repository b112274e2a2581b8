import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Whether the tests run in a clone; tools/check/wheel_test.sh runs a copy of tests/
# against the installed wheel, without the tree.
SOURCE_TREE = os.path.isfile(os.path.join(ROOT, "Makefile")) and os.path.isdir(os.path.join(ROOT, "kernels"))
# Modules that test the tree itself (its sources, build files, the examples,
# the Metal shaders through the MSL shim, the macOS build), not the package:
# without the tree each is one skip with this reason.
NEEDS_SOURCE_TREE = {
    "test_build.py": "the build files (Makefile, Bazel, setup.py)",
    "test_sources.py": "the sources",
    "test_include_layers.py": "the sources' includes",
    "test_readme.py": "README.md",
    "test_performance_doc.py": "benchmarks/ and docs/PERFORMANCE.md",
    "test_gpu_benchmarks_quick.py": "benchmarks/",
    "test_docs_present.py": "the docs",
    "test_metal_glue.py": "the Objective-C++ glue and tools/check/metal_check.sh",
    "test_macos_binaries.py": "tools/check/macos_binaries.py, tools/check/macos_checks and kernels/metal",
    "test_check_macos_env.py": "tools/check/check_macos_env.py and the Makefile",
    "test_fused_mlp_metal_shim.py": "the Metal shaders (MSL shim)",
    "test_hash_encode_metal_shim.py": "the Metal shaders (MSL shim)",
    "test_sh_encode_metal_shim.py": "the Metal shaders (MSL shim)",
    "test_metal_plans.py": "the Metal shaders (the strict model of Metal)",
    "test_nerf_datasets.py": "examples/nerf",
    "test_nerf_distributed.py": "examples/nerf",
    "test_nerf_sample.py": "examples/nerf",
    "test_nerf_jit.py": "examples/nerf",
    "test_fused_mlp_isa.py": "kernels/ and a compiler",
    "test_neon_qemu.py": "kernels/ and the ARM64 cross tools",
    "test_sanitizer_build.py": "the ASan build (make asan-test)",
    "test_fuzz_raw_ops.py": "tools/check/check_op_library.py",
    "test_fuzz_sh_encode.py": "examples/nerf (the TF composite)",
    "test_cuda_lib_build.py": "tools/check/cuda_lib_check.py and the CUDA library's build",
    "test_x86_intrinsics.py": "kernels/ and a compiler",
    "test_cublas_headers.py": "tools/build/cublas_headers.py",
    "test_architecture.py": "docs/ARCHITECTURE.md and the sources",
    "test_nerf_scenes.py": "examples/nerf",
    "test_portable_symbols.py": "runtime/libstdcxx_compat.cc and the in-tree library",
    "test_scene_contract_metal_shim.py": "the Metal shaders (MSL shim)",
}
# Single tests of package modules that read the tree: <file>::<test function>.
NEEDS_SOURCE_TREE_TESTS = {
    "test_sh_encode.py::test_matches_the_tf_composite": "examples/nerf (the TF composite)",
    "test_sh_encode.py::test_non_unit_special_directions_behave_like_the_tf_composite": "examples/nerf",
    "test_fused_conv2d_gemm.py::test_openblas_pinned_alike_everywhere": "the requirements files",
    "test_fused_conv2d_gemm.py::test_setup_requires_the_openblas_it_links": "setup.py",
    "test_macos_tensorflow_builds.py::test_add_build_collects_both_builds_newest_first": "tools/build",
    "test_macos_tensorflow_builds.py::test_make_records_the_grappler_plugins_name": "tools/build",
    "test_macos_tensorflow_builds.py::test_setup_py_gives_the_macos_wheel_the_stack_extras": "setup.py",
    "test_macos_tensorflow_builds.py::test_wheel_check_wants_one_checked_tensorflow_per_build": "tools/check",
}


class _NeedsSourceTree(pytest.File):
    def collect(self):
        pytest.skip(f"needs the source tree ({NEEDS_SOURCE_TREE[self.path.name]}); "
                    "this suite runs against an installed package")


def pytest_collection_modifyitems(config, items):
    if SOURCE_TREE:
        return
    for item in items:
        what = NEEDS_SOURCE_TREE_TESTS.get(f"{item.path.name}::{getattr(item, 'originalname', item.name)}")
        if what:
            item.add_marker(pytest.mark.skip(
                reason=f"needs the source tree ({what}); this suite runs against an installed package"))


def pytest_pycollect_makemodule(module_path, parent):
    if not SOURCE_TREE and module_path.name in NEEDS_SOURCE_TREE:
        return _NeedsSourceTree.from_parent(parent, path=module_path)
    return None


def pytest_generate_tests(metafunc):
    """Every test of a module marked every_device runs on each device of
    tests/devices.py; a test marked cpu_semantics runs on /CPU:0 alone."""
    if "tf_device" not in metafunc.fixturenames:
        return
    from tests import devices

    if metafunc.definition.get_closest_marker("cpu_semantics"):
        names = ["/CPU:0"]
    elif metafunc.definition.get_closest_marker("every_device"):
        names = devices.device_names()
    else:
        return
    params = []
    not_on_metal = metafunc.definition.get_closest_marker("not_on_metal")
    for n in names:
        marks = []
        if not_on_metal and n != "/CPU:0" and devices.gpu_is_metal():
            marks = [pytest.mark.skip(reason=f"Metal GPU: {not_on_metal.args[0]}")]
        params.append(pytest.param(n, id=devices.device_id(n), marks=marks))
    metafunc.parametrize("tf_device", params, indirect=True)


@pytest.fixture(autouse=True)
def tf_device(request):
    """The device a test's ops are placed on (None: TensorFlow's default)."""
    name = getattr(request, "param", None)
    if name is None:
        yield None
        return
    import tensorflow as tf

    with tf.device(name):
        yield name


def pytest_configure(config):
    # TensorFlow's own matmuls and convolutions on an NVIDIA GPU use TF32 by
    # default (10-bit mantissa); the tests compare this library's float32
    # kernels with them as references, so those run in full float32 here
    # (children inherit it).
    os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
    # Python processes that tests start (sys.executable) import what the tests
    # import: the folders of pytest.ini's `pythonpath`.
    paths = [str(p) for p in config.getini("pythonpath")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)

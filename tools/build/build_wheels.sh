#!/usr/bin/env bash
# `make wheels`: the binary wheels, into dist/ (docs/BUILDING.md, "Wheels").
#
#   Linux x86_64: the op library once per x86-64 level (`make isa-libs`, runtime
#     dispatch in metal_ops/_loader.py) + the Grappler plugin, packaged by
#     setup.py (METAL_OPS_PREBUILT), tagged by `auditwheel repair` for
#     TensorFlow's own manylinux policy with TensorFlow's and OpenBLAS's
#     libraries left external, then checked by tools/check/wheel_check.py.
#   With nvcc on PATH, also the GPU kernels' library (`make cuda-lib`:
#     _metal_ops_cuda.so, built with CUDA 12 for drivers 525+ (the toolkit
#     tools/build/cuda12_toolkit.py assembles from PyPI and this nvcc), static CUDA
#     runtime, the architectures of TensorFlow's CUDA wheel from sm_80,
#     CUDA_LIB_CAPABILITIES to choose others), checked by
#     tools/check/cuda_lib_check.py; without nvcc one line says it is left out.
#   macOS arm64: the libraries `make metal-check` cross-builds and checks
#     (the Makefile's Darwin build, once per macOS stack: TensorFlow 2.21, and
#     TensorFlow 2.19.1 + tensorflow-metal 1.2.0), packaged the same way into
#     one wheel, checked by `tools/check/macos_binaries.py wheel` against both
#     TensorFlow wheels. Without a macOS SDK: one line, skipped.
#
# Environment: PYTHON (the venv with the pinned TensorFlow), MACOS_SDK,
# MACOS_MIN, WHEEL_PLATFORMS ("linux macos" by default), NVCC (default nvcc),
# CUDA_LIB_CAPABILITIES (the Makefile's).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-.venv/bin/python}"
MACOS_SDK="${MACOS_SDK:-/opt/macos-sdk/root}"
MACOS_MIN="${MACOS_MIN:-12.0}"
WHEEL_PLATFORMS="${WHEEL_PLATFORMS:-linux macos}"
# TensorFlow's own Linux wheel (tensorflow-cpu 2.21.0) is manylinux_2_27_x86_64.
MANYLINUX="${MANYLINUX:-manylinux_2_27_x86_64}"
DIST=dist
TOOLS=build/wheel-tools
mkdir -p "$DIST"

tools_venv() {  # auditwheel, pinned, in a venv of its own
  if [ ! -f "$TOOLS/.installed" ] || [ requirements-wheel-tools.txt -nt "$TOOLS/.installed" ]; then
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q -r requirements-wheel-tools.txt
    touch "$TOOLS/.installed"
  fi
}

package() {  # package <prebuilt dir> <platform tag> <raw wheel dir>: setup.py's wheel of that dir
  rm -rf "$3" && mkdir -p "$3"
  METAL_OPS_PREBUILT="$1" METAL_OPS_WHEEL_PLATFORM="$2" \
    "$PYTHON" -m pip wheel -q --no-build-isolation --no-deps -w "$3" .
  ls "$3"/*.whl
}

linux_wheel() {
  if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "wheels: Linux x86_64 wheel skipped: this is $(uname -s)-$(uname -m)"
    return
  fi
  local out=build/wheel/linux
  echo "wheels: Linux x86_64: the op library per x86-64 level (make isa-libs) into $out/pkg"
  # Objects in build/isa-<level> (shared with an in-tree `make isa-libs`); the
  # package folder anew, so that nothing of an earlier build (a CUDA library
  # built when nvcc was there) reaches this wheel.
  rm -rf "$out/pkg"
  make --no-print-directory isa-libs WHEEL=1 PYTHON="$PYTHON" PKG="$out/pkg"
  tools_venv
  if command -v "${NVCC:-nvcc}" >/dev/null 2>&1; then
    echo "wheels: the GPU kernels' library (make cuda-lib) into $out/pkg"
    local start=$SECONDS
    make --no-print-directory cuda-lib WHEEL=1 PYTHON="$PYTHON" PKG="$out/pkg"
    echo "wheels: make cuda-lib: $((SECONDS - start)) s"
    python3 tools/check/cuda_lib_check.py --pkg "$out/pkg" \
      --tf-dir "$("$PYTHON" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("tensorflow").origin))')"
  else
    echo "wheels: the Linux wheel without CUDA kernels: ${NVCC:-nvcc} not found (the CUDA toolkit's compiler)"
  fi
  local raw
  raw="$(package "$out/pkg" linux_x86_64 "$out/raw")"
  rm -f "$DIST"/tf_metal_ops-*-linux_x86_64.whl "$DIST"/tf_metal_ops-*manylinux*.whl
  # TensorFlow's libraries and OpenBLAS are the user's (site-packages/tensorflow,
  # site-packages/scipy_openblas32): excluded, never grafted. The per-level
  # libraries above the baseline are loaded only on CPUs that run them (the
  # loader checks), hence no ISA-extension check.
  PATH="$PWD/$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat "$MANYLINUX" --only-plat --disable-isa-ext-check \
    --exclude libtensorflow_framework.so.2 --exclude libtensorflow_cc.so.2 --exclude libscipy_openblas.so \
    -w "$DIST" "$raw"
  local wheel
  wheel="$(ls "$DIST"/tf_metal_ops-*-py3-none-"$MANYLINUX".whl)"
  "$TOOLS/bin/python" tools/check/wheel_check.py linux --wheel "$wheel" --policy "$MANYLINUX" \
    --auditwheel "$TOOLS/bin/auditwheel"
  echo "wheels: $wheel"
}

macos_wheel() {
  if [ ! -f "$MACOS_SDK/SDKSettings.json" ] && [ ! -f "$MACOS_SDK/SDKSettings.plist" ]; then
    echo "wheels: macOS arm64 wheel skipped: no macOS SDK at MACOS_SDK=$MACOS_SDK (as make metal-check)"
    return
  fi
  echo "wheels: macOS arm64: make metal-check (the Makefile's Darwin build, cross-compiled and checked)"
  make --no-print-directory metal-check WHEEL=1 PYTHON="$PYTHON" MACOS_SDK="$MACOS_SDK" MACOS_MIN="$MACOS_MIN"
  local tag="macosx_${MACOS_MIN//./_}_arm64" raw wheel sites=() version
  raw="$(package build/macos/pkg-wheel "$tag" build/wheel/macos/raw)"
  rm -f "$DIST"/tf_metal_ops-*-macosx_*.whl
  cp "$raw" "$DIST/"
  wheel="$DIST/$(basename "$raw")"
  # The unpacked TensorFlow wheel of each build the wheel holds.
  for version in $(python3 -c 'import json, sys; print(" ".join(b["tensorflow_version"] for b in
      json.load(open(sys.argv[1]))["tensorflow_builds"]))' build/macos/pkg-wheel/_build_info.json); do
    sites+=(--site-packages "$(ls -d build/macos/tf-"$version"-openblas-*/ | head -1)")
  done
  python3 tools/check/macos_binaries.py wheel --wheel "$wheel" "${sites[@]}" --sdk "$MACOS_SDK" --macos-min "$MACOS_MIN"
  echo "wheels: $wheel"
}

for platform in $WHEEL_PLATFORMS; do
  case "$platform" in
    linux) linux_wheel ;;
    macos) macos_wheel ;;
    *) echo "wheels: unknown platform '$platform' (linux, macos)" >&2; exit 2 ;;
  esac
done

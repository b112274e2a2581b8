#!/usr/bin/env bash
# `make metal-check`: the macOS (Apple silicon) build of the library, checked on
# Linux without a Mac. Compiles every source `make` compiles on Darwin (ops, CPU
# kernels, the Objective-C++ Metal glue with -Werror, the embedded shader
# sources, the Grappler plugin) with the Makefile's own Darwin flags, once per
# macOS stack (TensorFlow 2.21 alone; TensorFlow 2.19.1 + tensorflow-metal),
# links each with ld64.lld against that TensorFlow's macOS wheel's dylibs and
# the SDK's stubs (undefined symbols are errors), then checks the linked
# libraries and the pinned tensorflow-metal binary. Nothing here runs Metal code.
#
# Needs a macOS SDK folder (Xcode's MacOSX.sdk, 12.0 or newer) in MACOS_SDK;
# never vendor or commit one (Apple's licence). Without it: one line, exit 0.
set -euo pipefail
cd "$(dirname "$0")/../.."

SDK="${MACOS_SDK:-/opt/macos-sdk/root}"
MACOS_MIN="${MACOS_MIN:-12.0}"
PYTHON="${PYTHON:-.venv/bin/python}"
OUT=build/macos
if [ ! -f "$SDK/SDKSettings.json" ] && [ ! -f "$SDK/SDKSettings.plist" ]; then
  echo "metal-check: skipped: no macOS SDK at MACOS_SDK=$SDK (set MACOS_SDK to a MacOSX.sdk folder, 12.0 or newer, e.g. the root/ folder of the public repository hexops-graveyard/sdk-macos-12.0; never commit it)"
  exit 0
fi

# ---- tools: Debian's clang, lld (ld64.lld) and llvm (llvm-objdump, llvm-nm)
find_ld64() {  # Debian names it ld64.lld-<version>
  command -v ld64.lld && return 0
  local found
  found="$(compgen -c ld64.lld- | sort -V | tail -1)"
  [ -n "$found" ] && command -v "$found"
}
need_tools() {
  command -v clang++ >/dev/null && command -v llvm-objdump >/dev/null && command -v llvm-nm >/dev/null &&
    find_ld64 >/dev/null
}
if ! need_tools; then
  echo "metal-check: installing clang, lld and llvm from Debian"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    bash tools/build/apt_install.sh clang lld llvm
  else
    echo "metal-check: needs clang, lld and llvm (apt-get install clang lld llvm)" >&2
    exit 1
  fi
fi
LD64="$(find_ld64)"

# ---- one build per macOS stack (python/metal_ops/_requirements.py MACOS_STACKS):
#   cpu:   requirements-macos.txt's TensorFlow (2.21) alone
#   metal: requirements-macos-metal.txt's TensorFlow (2.19.1) + tensorflow-metal
# each compiled and linked against its own TensorFlow's macOS wheel into
# PKG_DIR as _metal_ops.tf<major.minor>.so and _metal_ops_grappler.tf<major.minor>.so;
# PKG_DIR/_build_info.json lists both ("tensorflow_builds"), and metal_ops'
# loader picks the one of the running TensorFlow. MACOS_STACKS="cpu" (or
# "metal") checks one.
pin() { sed -n "s/^$2==\([0-9.]*\).*/\1/p" "$1"; }
WHEELS="$OUT/wheels"
mkdir -p "$WHEELS"
# WHEEL=1 (make wheels): the libraries linked for the wheel (no rpath into
# this machine), beside the objects of the plain check.
PKG_DIR="$OUT/pkg"
[ "${WHEEL:-}" = 1 ] && PKG_DIR="$OUT/pkg-wheel"
rm -rf "$PKG_DIR" && mkdir -p "$PKG_DIR"
fail() { echo "metal-check: FAILED: $*" >&2; exit 1; }
SUMMARY=()

check_stack() {  # check_stack <cpu|metal> <requirements file>
  local stack="$1" reqs="$2"
  local tf_version metal_version="" blas_version
  tf_version="$(pin "$reqs" tensorflow)"
  blas_version="$(pin "$reqs" scipy-openblas32)"
  [ "$stack" = metal ] && metal_version="$(pin "$reqs" tensorflow-metal)"
  if [ -z "$tf_version" ] || [ -z "$blas_version" ] || { [ "$stack" = metal ] && [ -z "$metal_version" ]; }; then
    fail "$reqs must pin tensorflow==X and scipy-openblas32==Z$([ "$stack" = metal ] && echo ' and tensorflow-metal==Y')"
  fi
  local tf_wheel metal_wheel="" blas_wheel
  find_wheels() {
    tf_wheel="$(ls "$WHEELS"/tensorflow-"$tf_version"-*macosx*arm64.whl 2>/dev/null | head -1)"
    blas_wheel="$(ls "$WHEELS"/scipy_openblas32-"$blas_version"-*macosx*arm64.whl 2>/dev/null | head -1)"
    [ -n "$metal_version" ] && metal_wheel="$(ls "$WHEELS"/tensorflow_metal-"$metal_version"-*arm64.whl 2>/dev/null | head -1)"
    [ -n "$tf_wheel" ] && [ -n "$blas_wheel" ] && { [ -z "$metal_version" ] || [ -n "$metal_wheel" ]; }
  }
  if ! find_wheels; then
    # Python 3.12: a version both stacks have wheels for (the libraries call no Python C API).
    echo "metal-check: downloading tensorflow==$tf_version${metal_version:+, tensorflow-metal==$metal_version} and scipy-openblas32==$blas_version (macOS arm64 wheels) into $WHEELS"
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform macosx_12_0_arm64 \
      --python-version 3.12 -d "$WHEELS" "tensorflow==$tf_version" ${metal_version:+"tensorflow-metal==$metal_version"} \
      "scipy-openblas32==$blas_version"
    find_wheels || fail "pip download gave no macOS arm64 wheel of tensorflow==$tf_version${metal_version:+ or tensorflow-metal==$metal_version}"
  fi
  # The wheels unpacked side by side, as in site-packages (the rpaths of an
  # installed package point from metal_ops/ to ../tensorflow and ../scipy_openblas32/lib),
  # with the wheel's METADATA (its version; 2.20+ headers do not define it).
  local tf_dir="$OUT/tf-$tf_version-openblas-$blas_version"
  if [ ! -f "$tf_dir/.unpacked" ] || [ ! -f "$tf_dir/tensorflow-$tf_version.dist-info/METADATA" ] ||
     { [ -n "$metal_version" ] && [ ! -d "$tf_dir/tensorflow-plugins" ]; }; then
    rm -rf "$tf_dir" && mkdir -p "$tf_dir"
    unzip -q -o "$tf_wheel" 'tensorflow/include/*' 'tensorflow/libtensorflow_framework.2.dylib' \
      'tensorflow/libtensorflow_cc.2.dylib' 'tensorflow/python/_pywrap_tensorflow_internal.so' \
      "tensorflow-$tf_version.dist-info/METADATA" -d "$tf_dir"
    [ -n "$metal_wheel" ] && unzip -q -o "$metal_wheel" 'tensorflow-plugins/*' -d "$tf_dir"
    unzip -q -o "$blas_wheel" 'scipy_openblas32/include/*' 'scipy_openblas32/lib/libscipy_openblas.dylib' -d "$tf_dir"
    touch "$tf_dir/.unpacked"
  fi

  # ---- the Darwin build, with the Makefile's Darwin flags
  local build_dir="$OUT/build-$tf_version" tag
  tag="tf$(echo "$tf_version" | cut -d. -f1,2)"
  echo "metal-check: [$stack] building for arm64-apple-macos against TensorFlow $tf_version (macOS wheel) and $SDK"
  # -j on the command line: a make whose makefile forces -j hands no jobserver to
  # this one, which would otherwise compile serially.
  make -j"$JOBS" --no-print-directory UNAME_S=Darwin MACOS_CROSS=1 MACOS_SDK="$SDK" MACOS_MIN="$MACOS_MIN" \
    MACOS_TF_DIR="$tf_dir" LD64_LLD="$LD64" BUILD="$build_dir" PKG="$PKG_DIR" WHEEL="${WHEEL:-}" \
    LIB="$PKG_DIR/_metal_ops.$tag.so" PLUGIN_LIB="$PKG_DIR/_metal_ops_grappler.$tag.so" \
    BUILD_INFO="$build_dir/_build_info.json" METAL_WERROR=-Werror metal-check-build
  python3 tools/build/write_build_info.py --add-build "$build_dir/_build_info.json" --out "$PKG_DIR/_build_info.json" \
    ${metal_version:+--tensorflow-metal "$metal_version"}

  # ---- checks of what was linked
  local lib path
  for lib in "_metal_ops.$tag.so" "_metal_ops_grappler.$tag.so"; do
    path="$PKG_DIR/$lib"
    llvm-objdump --macho --private-headers "$path" >"$build_dir/$lib.headers"
    grep -Eq "^ *MH_MAGIC_64 +ARM64 .* DYLIB .*NOUNDEFS" "$build_dir/$lib.headers" ||
      fail "$lib is not an arm64 Mach-O dylib without undefined symbols"
    grep -A2 "cmd LC_ID_DYLIB" "$build_dir/$lib.headers" | grep -q "name @rpath/$lib" ||
      fail "$lib: install name is not @rpath/$lib"
    grep -A2 "cmd LC_RPATH" "$build_dir/$lib.headers" | grep -q "path @loader_path/../tensorflow" ||
      fail "$lib: no rpath @loader_path/../tensorflow (an installed package would not find TensorFlow)"
    grep -A2 "cmd LC_LOAD_DYLIB" "$build_dir/$lib.headers" | grep -q "@rpath/libtensorflow_framework.2.dylib" ||
      fail "$lib does not link libtensorflow_framework.2.dylib"
    grep -A4 "cmd LC_BUILD_VERSION" "$build_dir/$lib.headers" | grep -q "minos $MACOS_MIN" ||
      fail "$lib: minimum macOS is not $MACOS_MIN"
  done
  local ops_headers="$build_dir/_metal_ops.$tag.so.headers"
  grep -A2 "cmd LC_LOAD_DYLIB" "$ops_headers" | grep -q "@rpath/libscipy_openblas.dylib" ||
    fail "_metal_ops.$tag.so does not link scipy-openblas32's libscipy_openblas.dylib"
  grep -A2 "cmd LC_RPATH" "$ops_headers" | grep -q "path @loader_path/../scipy_openblas32/lib" ||
    fail "_metal_ops.$tag.so: no rpath @loader_path/../scipy_openblas32/lib (an installed package would not find OpenBLAS)"
  # (grep reads whole listings: `grep -q` on a pipe would fail the pipeline under pipefail)
  local plugin_exports ops_symbols
  plugin_exports="$(llvm-nm -gU "$PKG_DIR/_metal_ops_grappler.$tag.so")"
  ops_symbols="$(llvm-nm "$PKG_DIR/_metal_ops.$tag.so")"
  grep -q " T _TF_InitGraph$" <<<"$plugin_exports" || fail "_metal_ops_grappler.$tag.so does not export TF_InitGraph"
  grep -q " T _TF_InitGraph$" <<<"$ops_symbols" &&
    fail "_metal_ops.$tag.so exports TF_InitGraph (the optimizer must stay in its own library)"
  grep -A2 "cmd LC_LOAD_DYLIB" "$ops_headers" | grep -q "Metal.framework" ||
    fail "_metal_ops.$tag.so does not link Metal.framework"
  grep -q "kEmbeddedMetalSources" <<<"$ops_symbols" || fail "_metal_ops.$tag.so holds no embedded Metal sources"
  local name
  for path in kernels/*/*.metal; do
    name="$(basename "$path" .metal)"
    grep -q "{\"$name\", R\"mo_msl(" "$build_dir/gen/metal_sources.cc" || fail "shader source '$name' is not embedded"
  done
  echo "metal-check: [$stack] _metal_ops.$tag.so, _metal_ops_grappler.$tag.so: linked with no undefined symbol; install names, rpaths, minimum macOS and exports OK"

  # ---- the real tensorflow-metal: its stream class implements our TF_MetalStream,
  # and its binds resolve against this stack's TensorFlow
  if [ -n "$metal_version" ]; then
    local plugin="$tf_dir/tensorflow-plugins/libmetal_plugin.dylib"
    python3 tools/check/macos_binaries.py stream-protocol --plugin "$plugin" --header kernels/metal/tf_metal_stream.h
    python3 tools/check/macos_binaries.py plugin-compat --plugin "$plugin" --tf-dir "$tf_dir/tensorflow"
  fi
  SUMMARY+=("[$stack] TensorFlow $tf_version${metal_version:+ + tensorflow-metal $metal_version}: _metal_ops.$tag.so")
}

JOBS="$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)"
for stack in ${MACOS_STACKS:-cpu metal}; do
  case "$stack" in
    cpu) check_stack cpu requirements-macos.txt ;;
    metal) check_stack metal requirements-macos-metal.txt ;;
    *) fail "unknown stack '$stack' in MACOS_STACKS (cpu, metal)" ;;
  esac
done
echo "metal-check: OK (SDK $(basename "$SDK"); $PKG_DIR/_build_info.json lists $(printf '%s; ' "${SUMMARY[@]}"))"

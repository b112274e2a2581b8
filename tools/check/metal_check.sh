#!/usr/bin/env bash
# `make metal-check`: the macOS (Apple silicon) build of the library, checked on
# Linux without a Mac. Compiles every source `make` compiles on Darwin (ops, CPU
# kernels, the Objective-C++ Metal glue with -Werror, the embedded shader
# sources, the Grappler plugin) with the Makefile's own Darwin flags, links
# them with ld64.lld against the pinned macOS TensorFlow wheel's dylibs and the
# SDK's stubs (undefined symbols are errors), then checks the linked libraries
# and the pinned tensorflow-metal binary. Nothing here runs Metal code.
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

# ---- the pinned macOS wheels (requirements-macos.txt), cached under build/macos
pin() { sed -n "s/^$1==\([0-9.]*\).*/\1/p" requirements-macos.txt; }
TF_VERSION="$(pin tensorflow)"
METAL_VERSION="$(pin tensorflow-metal)"
BLAS_VERSION="$(pin scipy-openblas32)"
if [ -z "$TF_VERSION" ] || [ -z "$METAL_VERSION" ] || [ -z "$BLAS_VERSION" ]; then
  echo "metal-check: requirements-macos.txt must pin tensorflow==X, tensorflow-metal==Y and scipy-openblas32==Z" >&2
  exit 1
fi
WHEELS="$OUT/wheels"
mkdir -p "$WHEELS"
tf_wheel() { ls "$WHEELS"/tensorflow-"$TF_VERSION"-*macosx*arm64.whl 2>/dev/null | head -1; }
metal_wheel() { ls "$WHEELS"/tensorflow_metal-"$METAL_VERSION"-*arm64.whl 2>/dev/null | head -1; }
blas_wheel() { ls "$WHEELS"/scipy_openblas32-"$BLAS_VERSION"-*macosx*arm64.whl 2>/dev/null | head -1; }
if [ -z "$(tf_wheel)" ] || [ -z "$(metal_wheel)" ] || [ -z "$(blas_wheel)" ]; then
  echo "metal-check: downloading tensorflow==$TF_VERSION, tensorflow-metal==$METAL_VERSION and scipy-openblas32==$BLAS_VERSION (macOS arm64 wheels) into $WHEELS"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform macosx_12_0_arm64 \
    --python-version 3.11 -d "$WHEELS" "tensorflow==$TF_VERSION" "tensorflow-metal==$METAL_VERSION" \
    "scipy-openblas32==$BLAS_VERSION"
fi
# The wheels unpacked side by side, as in site-packages (the rpaths of an
# installed package point from metal_ops/ to ../tensorflow and ../scipy_openblas32/lib).
TF_DIR="$OUT/tf-$TF_VERSION-openblas-$BLAS_VERSION"
# The wheel's METADATA too: the reports name the version it gives.
if [ ! -f "$TF_DIR/.unpacked" ] || [ ! -f "$TF_DIR/tensorflow-$TF_VERSION.dist-info/METADATA" ]; then
  rm -rf "$TF_DIR" && mkdir -p "$TF_DIR"
  unzip -q -o "$(tf_wheel)" 'tensorflow/include/*' 'tensorflow/libtensorflow_framework.2.dylib' \
    'tensorflow/libtensorflow_cc.2.dylib' 'tensorflow/python/_pywrap_tensorflow_internal.so' \
    "tensorflow-$TF_VERSION.dist-info/METADATA" -d "$TF_DIR"
  unzip -q -o "$(metal_wheel)" 'tensorflow-plugins/*' -d "$TF_DIR"
  unzip -q -o "$(blas_wheel)" 'scipy_openblas32/include/*' 'scipy_openblas32/lib/libscipy_openblas.dylib' -d "$TF_DIR"
  touch "$TF_DIR/.unpacked"
fi
PLUGIN="$TF_DIR/tensorflow-plugins/libmetal_plugin.dylib"

# ---- the Darwin build, with the Makefile's Darwin flags
BUILD_DIR="$OUT/build-$TF_VERSION"
# WHEEL=1 (make wheels): the libraries linked for the wheel (no rpath into
# this machine), beside the objects of the plain check.
PKG_DIR="$OUT/pkg"
[ "${WHEEL:-}" = 1 ] && PKG_DIR="$OUT/pkg-wheel"
mkdir -p "$PKG_DIR"
echo "metal-check: building for arm64-apple-macos against TensorFlow $TF_VERSION (macOS wheel) and $SDK"
# -j on the command line: a make whose makefile forces -j hands no jobserver to
# this one, which would otherwise compile serially.
make -j"$(nproc 2>/dev/null || echo 2)" --no-print-directory UNAME_S=Darwin MACOS_CROSS=1 MACOS_SDK="$SDK" MACOS_MIN="$MACOS_MIN" MACOS_TF_DIR="$TF_DIR" \
  LD64_LLD="$LD64" BUILD="$BUILD_DIR" PKG="$PKG_DIR" WHEEL="${WHEEL:-}" METAL_WERROR=-Werror metal-check-build

# ---- checks of what was linked
fail() { echo "metal-check: FAILED: $*" >&2; exit 1; }
for lib in _metal_ops.so _metal_ops_grappler.so; do
  path="$PKG_DIR/$lib"
  llvm-objdump --macho --private-headers "$path" >"$BUILD_DIR/$lib.headers"
  grep -Eq "^ *MH_MAGIC_64 +ARM64 .* DYLIB .*NOUNDEFS" "$BUILD_DIR/$lib.headers" ||
    fail "$lib is not an arm64 Mach-O dylib without undefined symbols"
  grep -A2 "cmd LC_ID_DYLIB" "$BUILD_DIR/$lib.headers" | grep -q "name @rpath/$lib" ||
    fail "$lib: install name is not @rpath/$lib"
  grep -A2 "cmd LC_RPATH" "$BUILD_DIR/$lib.headers" | grep -q "path @loader_path/../tensorflow" ||
    fail "$lib: no rpath @loader_path/../tensorflow (an installed package would not find TensorFlow)"
  grep -A2 "cmd LC_LOAD_DYLIB" "$BUILD_DIR/$lib.headers" | grep -q "@rpath/libtensorflow_framework.2.dylib" ||
    fail "$lib does not link libtensorflow_framework.2.dylib"
  grep -A4 "cmd LC_BUILD_VERSION" "$BUILD_DIR/$lib.headers" | grep -q "minos $MACOS_MIN" ||
    fail "$lib: minimum macOS is not $MACOS_MIN"
done
grep -A2 "cmd LC_LOAD_DYLIB" "$BUILD_DIR/_metal_ops.so.headers" | grep -q "@rpath/libscipy_openblas.dylib" ||
  fail "_metal_ops.so does not link scipy-openblas32's libscipy_openblas.dylib"
grep -A2 "cmd LC_RPATH" "$BUILD_DIR/_metal_ops.so.headers" | grep -q "path @loader_path/../scipy_openblas32/lib" ||
  fail "_metal_ops.so: no rpath @loader_path/../scipy_openblas32/lib (an installed package would not find OpenBLAS)"
# (grep reads whole listings: `grep -q` on a pipe would fail the pipeline under pipefail)
plugin_exports="$(llvm-nm -gU "$PKG_DIR/_metal_ops_grappler.so")"
ops_symbols="$(llvm-nm "$PKG_DIR/_metal_ops.so")"
grep -q " T _TF_InitGraph$" <<<"$plugin_exports" || fail "_metal_ops_grappler.so does not export TF_InitGraph"
grep -q " T _TF_InitGraph$" <<<"$ops_symbols" &&
  fail "_metal_ops.so exports TF_InitGraph (the optimizer must stay in its own library)"
grep -A2 "cmd LC_LOAD_DYLIB" "$BUILD_DIR/_metal_ops.so.headers" | grep -q "Metal.framework" ||
  fail "_metal_ops.so does not link Metal.framework"
grep -q "kEmbeddedMetalSources" <<<"$ops_symbols" || fail "_metal_ops.so holds no embedded Metal sources"
for path in kernels/metal/*.metal; do
  name="$(basename "$path" .metal)"
  grep -q "{\"$name\", R\"mo_msl(" "$BUILD_DIR/gen/metal_sources.cc" || fail "shader source '$name' is not embedded"
done
echo "metal-check: linked with no undefined symbol; install names, rpaths, minimum macOS and exports OK"

# ---- the real tensorflow-metal: its stream class implements our TF_MetalStream,
# and its binds resolve against the pinned TensorFlow
python3 tools/check/macos_binaries.py stream-protocol --plugin "$PLUGIN" --header kernels/metal/tf_metal_stream.h
python3 tools/check/macos_binaries.py plugin-compat --plugin "$PLUGIN" --tf-dir "$TF_DIR/tensorflow"
echo "metal-check: OK (TensorFlow $TF_VERSION, tensorflow-metal $METAL_VERSION, SDK $(basename "$SDK"))"

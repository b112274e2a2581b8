#!/bin/sh
# Builds a C-ABI shim over tiny-cuda-nn for the side-by-side benchmarks, from a
# checkout of https://github.com/NVlabs/tiny-cuda-nn in TCNN_DIR with its
# submodules dependencies/fmt and (for the MLP) dependencies/cutlass. Nothing of
# tiny-cuda-nn is part of this repository.
#   TCNN_DIR=/path/to/tiny-cuda-nn sh benchmarks/cuda/build_tcnn_shim.sh [mlp|grid]
# mlp (default): FullyFusedMLP -> build/libtcnn_mlp_shim.so (benchmarks/cuda/tcnn_mlp_shim.cu)
# grid: GridEncodingTemplated -> build/libtcnn_grid_shim.so (benchmarks/cuda/tcnn_grid_shim.cu)
set -e
: "${TCNN_DIR:?set TCNN_DIR to a tiny-cuda-nn checkout}"
WHAT=${1:-mlp}
case "$WHAT" in
  # network.cu (Network base) pulls in cutlass_mlp.cu and rtc_kernel.cu (JIT off).
  mlp) SRCS="fully_fused_mlp common_host object network cutlass_mlp rtc_kernel" ;;
  grid) SRCS="common_host object rtc_kernel" ;;
  *) echo "build_tcnn_shim: unknown target $WHAT (mlp or grid)" >&2; exit 2 ;;
esac
OUT_SO=${OUT_SO:-build/libtcnn_${WHAT}_shim.so}
OBJ=${OBJ_DIR:-build/tcnn_obj_$WHAT}
mkdir -p "$OBJ" "$(dirname "$OUT_SO")"
HERE=$(cd "$(dirname "$0")" && pwd)
# --use_fast_math: tiny-cuda-nn's CMake default (TCNN_BUILD_USE_FAST_MATH=ON).
FLAGS="-O3 --use_fast_math -std=c++17 -gencode arch=compute_90,code=sm_90 -Xcompiler=-fPIC --extended-lambda \
 --expt-relaxed-constexpr -DTCNN_MIN_GPU_ARCH=90 -DTCNN_HALF_PRECISION=1 -DFMT_UNICODE=0 \
 -Xcompiler=-fno-strict-aliasing -Xcudafe=--diag_suppress=unrecognized_gcc_pragma -w \
 -I$TCNN_DIR/include -I$TCNN_DIR/dependencies -I$TCNN_DIR/dependencies/cutlass/include \
 -I$TCNN_DIR/dependencies/cutlass/tools/util/include -I$TCNN_DIR/dependencies/fmt/include"
# Compiles run in parallel; every job's status is collected so a failed (or
# killed) compile stops the build instead of linking a library with undefined
# symbols.
pids=""
for f in $SRCS; do
  nvcc $FLAGS -c "$TCNN_DIR/src/$f.cu" -o "$OBJ/$f.cu.o" &
  pids="$pids $!"
done
nvcc $FLAGS -c "$HERE/tcnn_${WHAT}_shim.cu" -o "$OBJ/tcnn_${WHAT}_shim.cu.o" &
pids="$pids $!"
g++ -O2 -fPIC -c -I"$TCNN_DIR/dependencies/fmt/include" -DFMT_UNICODE=0 "$TCNN_DIR/dependencies/fmt/src/format.cc" -o "$OBJ/format.o" &
pids="$pids $!"
g++ -O2 -fPIC -c -I"$TCNN_DIR/dependencies/fmt/include" -DFMT_UNICODE=0 "$TCNN_DIR/dependencies/fmt/src/os.cc" -o "$OBJ/os.o" &
pids="$pids $!"
failed=0
for p in $pids; do
  wait "$p" || failed=$((failed + 1))
done
if [ "$failed" -ne 0 ]; then
  echo "build_tcnn_shim: $failed compile job(s) failed; nothing linked" >&2
  exit 1
fi
# libcuda is not linked (build machines may lack it): the benchmark loads the
# driver's libcuda.so.1 with RTLD_GLOBAL before the shim.
nvcc -shared -gencode arch=compute_90,code=sm_90 -o "$OUT_SO" "$OBJ"/*.o -lcudart
echo "built $OUT_SO"

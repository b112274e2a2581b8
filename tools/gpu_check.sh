#!/usr/bin/env bash
# The GPU checks through TensorFlow (`make gpu-check`; docs/BUILDING.md,
# "TensorFlow's CUDA build"): on a machine with an NVIDIA GPU and TensorFlow's
# CUDA build importable by PYTHON (installed offline by tools/tf_cuda_offline.sh,
# or `pip install tensorflow[and-cuda]`). Each step can run on its own:
#
#   tools/gpu_check.sh [build] [status] [selftest] [tests] [nerf] [sanitize] [keras] [cuda12-ab] [all]
#
# build     the op library in place with its CUDA kernels (make ENV=existing)
# status    `python -m metal_ops`: which kernels loaded and why
# selftest  `python -m metal_ops.selftest` on every GPU, report to RESULTS/selftest_cuda.json
# tests     the test suite on the CPU and the GPU (tests/devices.py), junit XML
#           and a summary in RESULTS/tests_cuda.{xml,txt}
# nerf      the NeRF sample's procedural demo, timed (RESULTS/nerf_demo_cuda.json)
# sanitize  compute-sanitizer memcheck over the self-test process, racecheck
#           over its cases of each op with shared memory (RACECHECK_OPS)
# keras     FusedMLP against a Keras Dense stack in TensorFlow (tf.function and
#           XLA), TF32 and strict float32: benchmarks/bench_fused_mlp_gpu.py,
#           RESULTS/fused_mlp_keras_gpu{,_strict}.{json,txt}
# cuda12-ab the CUDA harness built with the wheel's CUDA 12 toolkit (`make
#           cuda12-harness`, built where PyPI is reachable and carried:
#           CUDA12_HARNESS, default build/cuda12-harness/libmetal_ops_cuda.so)
#           against this machine's CUDA 13 build (`make cuda-harness`:
#           build/libmetal_ops_cuda.so): tests/cuda with it, then every op
#           with a benchmark, both libraries in one process
#           (RESULTS/ab_cuda12_<op>.json)
#
# RESULTS (default benchmarks/results) is where the reports go; PYTEST_WORKERS
# (default 8) the pytest-xdist workers; each shares the GPU
# (TF_FORCE_GPU_ALLOW_GROWTH, set here).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
RESULTS=${RESULTS:-benchmarks/results}
WORKERS=${PYTEST_WORKERS:-8}
# The tree's package and test helpers, as pytest.ini gives them to pytest.
export PYTHONPATH="$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2} TF_FORCE_GPU_ALLOW_GROWTH=true PYTHONUNBUFFERED=1
mkdir -p "$RESULTS"
rc=0

gpu_listed() {
  "$PYTHON" -c "import tensorflow as tf, sys; sys.exit(0 if tf.config.list_physical_devices('GPU') else 1)"
}

step() {
  local name=$1
  local start=$SECONDS
  echo "== gpu-check $name"
  case $name in
    build)
      make --no-print-directory ENV=existing PYTHON="$PYTHON" -j"$(nproc)" all metal-shim || return 1 ;;
    status)
      "$PYTHON" -m metal_ops || return 1
      gpu_listed || { echo "gpu-check: TensorFlow lists no GPU (see TensorFlow's log above)"; return 1; } ;;
    selftest)
      "$PYTHON" -m metal_ops.selftest --json "$RESULTS/selftest_cuda.json" || return 1 ;;
    tests)
      "$PYTHON" -m pytest tests -q -p no:cacheprovider -n "$WORKERS" -m "not slow" \
        --junitxml="$RESULTS/tests_cuda.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$RESULTS/tests_cuda.txt"
      return "${PIPESTATUS[0]}" ;;
    nerf)
      "$PYTHON" -m examples.nerf.train --name gpu-demo --out-dir "${NERF_OUT:-runs}" --quiet --no-outputs \
        ${NERF_ARGS:-} || return 1
      cp "${NERF_OUT:-runs}/gpu-demo/metrics.json" "$RESULTS/nerf_demo_cuda.json" ;;
    sanitize)
      compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
        "$PYTHON" -m metal_ops.selftest --repeat 1 ${SANITIZE_ARGS:-} \
        2>&1 | tee "$RESULTS/sanitize_memcheck_cuda.txt" | tail -n 25
      [ "${PIPESTATUS[0]}" = 0 ] || return 1
      # racecheck (shared-memory hazards) is slow: one process per op whose
      # CUDA kernels use shared memory.
      : > "$RESULTS/sanitize_racecheck_cuda.txt"
      for op in ${RACECHECK_OPS:-hash_encode robust_loss sh_encode fused_mlp}; do
        echo "== compute-sanitizer --tool racecheck python -m metal_ops.selftest --repeat 1 --ops $op" \
          >> "$RESULTS/sanitize_racecheck_cuda.txt"
        compute-sanitizer --tool racecheck --error-exitcode 3 --print-limit 20 \
          "$PYTHON" -m metal_ops.selftest --repeat 1 --ops "$op" \
          2>&1 | tee -a "$RESULTS/sanitize_racecheck_cuda.txt" | tail -n 3
        [ "${PIPESTATUS[0]}" = 0 ] || return 1
      done ;;
    keras)
      local strict
      for strict in "" _strict; do
        "$PYTHON" -m benchmarks.bench_fused_mlp_gpu ${strict:+--no-tf32} \
          --json "$RESULTS/fused_mlp_keras_gpu$strict.json" 2>&1 | tee "$RESULTS/fused_mlp_keras_gpu$strict.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || return 1
      done ;;
    cuda12-ab)
      local base=build/libmetal_ops_cuda.so new=${CUDA12_HARNESS:-build/cuda12-harness/libmetal_ops_cuda.so}
      [ -f "$new" ] || { echo "gpu-check: $new missing: make cuda12-harness (where PyPI is reachable) and bring it"; return 1; }
      make --no-print-directory -j"$(nproc)" cuda-harness || return 1
      METAL_OPS_CUDA_HARNESS="$new" "$PYTHON" -m pytest tests/cuda -q -p no:cacheprovider || return 1
      "$PYTHON" -m benchmarks.cuda.bench_fused_mlp_cuda --lib "$new" --base-lib "$base" --no-torch \
        --json "$RESULTS/ab_cuda12_fused_mlp.json" || return 1
      "$PYTHON" -m benchmarks.cuda.ab_hash_encode_libs "base=$base" "new=$new" --out "$RESULTS/ab_cuda12_hash_encode.json" || return 1
      "$PYTHON" -m benchmarks.cuda.ab_volume_render_libs "base=$base" "new=$new" \
        --out "$RESULTS/ab_cuda12_volume_render.json" || return 1
      "$PYTHON" -m benchmarks.cuda.ab_torch_harness_libs --base "$base" --new "$new" \
        --out "$RESULTS/ab_cuda12_robust_distortion_sh.json" || return 1 ;;
    *) echo "gpu-check: unknown step $name" >&2; return 2 ;;
  esac
  echo "== gpu-check $name: $((SECONDS - start)) s"
}

steps=("$@")
[ ${#steps[@]} = 0 ] || [ "${steps[0]}" = all ] && steps=(build status selftest tests nerf)
for s in "${steps[@]}"; do
  step "$s" || { echo "== gpu-check $s: FAILED"; rc=1; }
done
exit $rc

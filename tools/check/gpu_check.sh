#!/usr/bin/env bash
# The GPU checks through TensorFlow (`make gpu-check`; docs/BUILDING.md,
# "TensorFlow's CUDA build"): on a machine with an NVIDIA GPU and TensorFlow's
# CUDA build importable by PYTHON (installed offline by tools/build/tf_cuda_offline.sh,
# or `pip install tensorflow[and-cuda]`). Each step can run on its own:
#
#   tools/check/gpu_check.sh [build] [status] [selftest] [tests] [nerf] [sanitize] [keras] [xla] [cuda12-ab] [all]
#
# build     the op library in place with its CUDA kernels (make ENV=existing)
# status    `python -m metal_ops`: which kernels loaded and why
# selftest  `python -m metal_ops.selftest` on every GPU, report to RESULTS/selftest.<gpu>.json
# tests     the test suite on the CPU and the GPU (tests/devices.py), junit XML
#           and its counts in RESULTS/tests.<gpu>.json
# nerf      the NeRF sample's procedural demo, timed (RESULTS/nerf_demo.<gpu>.json;
#           NERF_ARGS adds options, NERF_RESULT names the result: e.g.
#           NERF_ARGS=--jit NERF_RESULT=nerf_demo_jit)
# sanitize  compute-sanitizer memcheck over the self-test process, racecheck
#           over its cases of each op with shared memory (RACECHECK_OPS)
# keras     FusedMLP against a Keras Dense stack in TensorFlow (tf.function and
#           XLA), TF32 and strict float32: benchmarks/bench_fused_mlp_gpu.py,
#           benchmarks/results/fused_mlp_gpu{,_strict}.<gpu>.json
# xla       the XLA kernels' CUDA handlers (docs/XLA.md, "On a GPU"), after
#           `build`: which ops have them, the self-test's cases of those ops
#           under jit_compile=True on the GPU (cases labelled "[xla]",
#           RESULTS/selftest_xla.<gpu>.json), tests/test_xla_cuda.py (invalid
#           rays as errors, RayMarchStatic against the CUDA RayMarch),
#           tests/test_xla_keras.py, and the
#           Keras train step of FusedMLP against Dense layers, both under XLA
#           (benchmarks/bench_xla_gpu.py, RESULTS/xla_keras_train_step.<gpu>.json)
# cuda12-ab the CUDA harness built with the wheel's CUDA 12 toolkit (`make
#           cuda12-harness`, built where PyPI is reachable and carried:
#           CUDA12_HARNESS, default build/cuda12-harness/libmetal_ops_cuda.so)
#           against this machine's CUDA 13 build (`make cuda-harness`:
#           build/libmetal_ops_cuda.so): tests/cuda with it, then every op
#           with a benchmark, both libraries in one process
#           (RESULTS/cuda12_ab_<op>.<gpu>.json)
#
# <gpu> is the GPU's model ('h100': benchmarks/timing.py device_label). RESULTS
# (default benchmarks/results) is where the reports go, SCRATCH (default a new
# temporary folder) the logs and raw reports they come from; PYTEST_WORKERS
# (default 8) the pytest-xdist workers; each shares the GPU
# (TF_FORCE_GPU_ALLOW_GROWTH, set here).
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
RESULTS=${RESULTS:-benchmarks/results}
WORKERS=${PYTEST_WORKERS:-8}
# The tree's package and test helpers, as pytest.ini gives them to pytest.
export PYTHONPATH="$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2} TF_FORCE_GPU_ALLOW_GROWTH=true PYTHONUNBUFFERED=1
SCRATCH=${SCRATCH:-$(mktemp -d)}
mkdir -p "$RESULTS" "$SCRATCH"
echo "gpu-check: logs and raw reports in $SCRATCH"
rc=0

# record BENCHMARK FILE COMMAND: FILE (a JSON report or junit XML) as RESULTS/BENCHMARK.<gpu>.json.
record() {
  [ -f "$2" ] && "$PYTHON" -m benchmarks.timing record "$1" "$2" --command "$3" --results "$RESULTS"
}

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
      "$PYTHON" -m metal_ops.selftest --json "$SCRATCH/selftest.json"; local st=$?
      record selftest "$SCRATCH/selftest.json" "python -m metal_ops.selftest"
      return $st ;;
    tests)
      "$PYTHON" -m pytest tests -q -p no:cacheprovider -n "$WORKERS" -m "not slow" \
        --junitxml="$SCRATCH/tests.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$SCRATCH/tests.txt"
      local pt=${PIPESTATUS[0]}
      record tests "$SCRATCH/tests.xml" "python -m pytest tests -q -n $WORKERS -m 'not slow' ${PYTEST_ARGS:-}"
      return "$pt" ;;
    nerf)
      local run=${NERF_RESULT:-nerf_demo}
      "$PYTHON" -m examples.nerf.train --name "$run" --out-dir "${NERF_OUT:-runs}" --quiet --no-outputs \
        ${NERF_ARGS:-} || return 1
      record "$run" "${NERF_OUT:-runs}/$run/metrics.json" \
        "python -m examples.nerf.train --quiet --no-outputs ${NERF_ARGS:-}" ;;
    sanitize)
      compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
        "$PYTHON" -m metal_ops.selftest --repeat 1 ${SANITIZE_ARGS:-} \
        2>&1 | tee "$SCRATCH/sanitize_memcheck.txt" | tail -n 25
      [ "${PIPESTATUS[0]}" = 0 ] || return 1
      # racecheck (shared-memory hazards) is slow: one process per op whose
      # CUDA kernels use shared memory.
      : > "$SCRATCH/sanitize_racecheck.txt"
      for op in ${RACECHECK_OPS:-hash_encode robust_loss sh_encode fused_mlp}; do
        echo "== compute-sanitizer --tool racecheck python -m metal_ops.selftest --repeat 1 --ops $op" \
          >> "$SCRATCH/sanitize_racecheck.txt"
        compute-sanitizer --tool racecheck --error-exitcode 3 --print-limit 20 \
          "$PYTHON" -m metal_ops.selftest --repeat 1 --ops "$op" \
          2>&1 | tee -a "$SCRATCH/sanitize_racecheck.txt" | tail -n 3
        [ "${PIPESTATUS[0]}" = 0 ] || return 1
      done ;;
    keras)
      local strict
      for strict in "" _strict; do
        "$PYTHON" -m benchmarks.bench_fused_mlp_gpu ${strict:+--no-tf32} 2>&1 | tee "$SCRATCH/fused_mlp_gpu$strict.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || return 1
      done ;;
    xla)
      local ops
      ops=$("$PYTHON" -c "
import sys, metal_ops
from metal_ops import _loader, selftest
metal_ops.load_library()
registered, reason = _loader.xla_status()
cuda = sorted(_loader.xla_cuda_ops())
print('XLA kernels:', registered, reason or '', '| CUDA handlers:', ', '.join(cuda) or 'none', file=sys.stderr)
print(','.join(op for op, names in selftest.xla_ops().items() if all(n in cuda for n in names)))") || return 1
      [ -n "$ops" ] || { echo "gpu-check: no op has CUDA handlers registered (see above)"; return 1; }
      "$PYTHON" -m metal_ops.selftest --ops "$ops" --json "$SCRATCH/selftest_xla.json"; local st=$?
      record selftest_xla "$SCRATCH/selftest_xla.json" "python -m metal_ops.selftest --ops $ops"
      [ "$st" = 0 ] || return 1
      "$PYTHON" -m pytest tests/test_xla_cuda.py tests/test_xla_keras.py -q -p no:cacheprovider || return 1
      "$PYTHON" -m benchmarks.bench_xla_gpu --results "$RESULTS" || return 1 ;;
    cuda12-ab)
      local base=build/libmetal_ops_cuda.so new=${CUDA12_HARNESS:-build/cuda12-harness/libmetal_ops_cuda.so}
      [ -f "$new" ] || { echo "gpu-check: $new missing: make cuda12-harness (where PyPI is reachable) and bring it"; return 1; }
      make --no-print-directory -j"$(nproc)" cuda-harness || return 1
      # tests/cuda is long: the PYTEST_WORKERS share the GPU
      METAL_OPS_CUDA_HARNESS="$new" "$PYTHON" -m pytest tests/cuda -q -p no:cacheprovider -n "$WORKERS" || return 1
      "$PYTHON" -m benchmarks.cuda.bench_fused_mlp_cuda --lib "$new" --base-lib "$base" --no-torch \
        --json "$SCRATCH/ab_fused_mlp.json" || return 1
      "$PYTHON" -m benchmarks.cuda.ab_hash_encode_libs "base=$base" "new=$new" --out "$SCRATCH/ab_hash_encode.json" || return 1
      # These two hold their buffers in PyTorch, whose CUDA libraries TensorFlow's (tf_cuda_offline.sh's
      # LD_LIBRARY_PATH) would shadow: "undefined symbol ... libcusparse.so.12" at import torch.
      env -u LD_LIBRARY_PATH "$PYTHON" -m benchmarks.cuda.ab_volume_render_libs "base=$base" "new=$new" \
        --out "$SCRATCH/ab_volume_render.json" || return 1
      env -u LD_LIBRARY_PATH "$PYTHON" -m benchmarks.cuda.ab_torch_harness_libs --base "$base" --new "$new" \
        --out "$SCRATCH/ab_robust_distortion_sh.json" || return 1
      local op
      for op in fused_mlp hash_encode volume_render robust_distortion_sh; do
        record "cuda12_ab_$op" "$SCRATCH/ab_$op.json" "tools/check/gpu_check.sh cuda12-ab"
      done ;;
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

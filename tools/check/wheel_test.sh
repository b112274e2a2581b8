#!/usr/bin/env bash
# `make wheel-test`: the Linux wheel of dist/, tested as a user gets it.
#
# A new venv gets the wheel from dist/ alone (with its `cpu` extra: the pinned
# tensorflow-cpu; test tools pinned by requirements.txt), then the test suite
# runs from a copy of tests/ outside the source tree: nothing of the tree on
# sys.path (metal_ops comes from site-packages) and no compiler on PATH (tests
# that need the tree or a compiler skip and say so). Then `python -m metal_ops`
# (and `python -m metal_ops.selftest` where the package has one).
#
# The automatic choice is checked to be the highest x86-64 level this CPU runs;
# the suite runs there, then once per other level, forced with METAL_OPS_ISA.
# WHEEL_TEST_ARGS: pytest arguments of the full run (default `tests -q`); WHEEL_TEST_LEVEL_ARGS:
# those of the forced-level runs (default: the same). CI keeps it lean with a
# subset there (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=build/wheel-test
WHEEL="$(ls dist/tf_metal_ops-*-py3-none-manylinux_*_x86_64.whl 2>/dev/null | head -1 || true)"
if [ -z "$WHEEL" ]; then
  echo "wheel-test: no Linux wheel in dist/ (make wheels)" >&2
  exit 1
fi
WHEEL_TEST_ARGS="${WHEEL_TEST_ARGS:-tests -q -p no:cacheprovider}"
WHEEL_TEST_LEVEL_ARGS="${WHEEL_TEST_LEVEL_ARGS:-$WHEEL_TEST_ARGS}"

echo "wheel-test: a new venv in $OUT/venv with $(basename "$WHEEL")[cpu]"
rm -rf "$OUT" && mkdir -p "$OUT/suite" "$OUT/bin"
python3 -m venv "$OUT/venv"
"$OUT/venv/bin/python" -m pip install -q --upgrade pip
"$OUT/venv/bin/python" -m pip install -q -c requirements.txt "$(realpath "$WHEEL")[cpu]" \
  pytest pytest-xdist hypothesis mpmath imageio matplotlib pillow

# The tests, outside the tree (their own package and data; pytest.ini without
# the tree's python/ folder).
cp -r tests "$OUT/suite/tests"
find "$OUT/suite" -name __pycache__ -prune -exec rm -rf {} +
sed -e 's/^pythonpath = .*/pythonpath = ./' pytest.ini > "$OUT/suite/pytest.ini"

# PATH: the venv and a few tools, no compiler (g++, c++, cc, clang, nvcc).
for tool in sh bash env uname cat ls grep readelf nproc basename rm; do
  path="$(command -v "$tool" || true)"
  [ -n "$path" ] && ln -sf "$path" "$OUT/bin/$tool"
done
export PATH="$PWD/$OUT/venv/bin:$PWD/$OUT/bin"
unset PYTHONPATH
PY="$PWD/$OUT/venv/bin/python"
for cc in g++ c++ cc gcc clang++ nvcc; do
  if command -v "$cc" >/dev/null; then echo "wheel-test: $cc is on PATH" >&2; exit 1; fi
done

REPO="$PWD"
WHEEL_ABS="$REPO/$WHEEL"
cd "$OUT/suite"
"$PY" -c "import metal_ops, os; assert 'site-packages' in metal_ops.__file__, metal_ops.__file__; print('wheel-test: metal_ops from', os.path.dirname(metal_ops.__file__))"
"$PY" -m metal_ops >/dev/null

# A split install: the wheel in one folder and its OpenBLAS in another (`pip
# install --target`, PYTHONPATH naming both): the op library finds OpenBLAS
# where scipy_openblas32 says it is, not beside itself.
echo "wheel-test: split install (pip install --target: the wheel and scipy-openblas32 in two folders)"
split="$PWD/split"
rm -rf "$split"
"$PY" -m pip install -q --no-deps --target "$split/pkg" "$WHEEL_ABS"
"$PY" -m pip install -q --no-deps --target "$split/blas" -c "$REPO/requirements.txt" scipy-openblas32
PYTHONPATH="$split/pkg:$split/blas" TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c '
import os, sys
import numpy as np, tensorflow as tf
import metal_ops
from metal_ops import _loader
pkg, blas = sys.argv[1:3]
assert metal_ops.__file__.startswith(pkg), metal_ops.__file__
x, w = tf.random.normal([2, 9, 9, 8], seed=1), tf.random.normal([3, 3, 8, 16], seed=2)
y = metal_ops.fused_conv2d(x, w, tf.zeros([16]), activation="relu")
np.testing.assert_allclose(y.numpy(), tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME")).numpy(), rtol=1e-4, atol=1e-4)
mapped = [p for p in _loader.loaded_libraries() if os.path.basename(p) == "libscipy_openblas.so"]
assert mapped and all(p.startswith(blas) for p in mapped), mapped
import scipy_openblas32  # (its import loads OpenBLAS too: only after the op library)
assert scipy_openblas32.__file__.startswith(blas), scipy_openblas32.__file__
print("wheel-test: split install: OpenBLAS from", mapped[0])
' "$split/pkg" "$split/blas"
levels="$("$PY" -c "from metal_ops import _loader; print(' '.join(l for l in _loader.cpu_isa_levels() if l in _loader.read_build_info()['isa_libraries']))")"
auto="$("$PY" -c "from metal_ops import _loader; print(_loader.select_library(_loader.read_build_info())[0])")"
highest="${levels##* }"
echo "wheel-test: this CPU runs: $levels; automatic choice: $auto"
[ "$auto" = "$highest" ] || { echo "wheel-test: FAILED: automatic choice $auto is not the highest level $highest" >&2; exit 1; }
if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('metal_ops.selftest') is None)"; then
  "$PY" -m metal_ops.selftest
fi

echo "wheel-test: the test suite at the automatic level ($auto)"
start=$SECONDS
# (shell words: quotes in the variables group, e.g. -m 'not slow')
eval "full_args=($WHEEL_TEST_ARGS)"
eval "level_args=($WHEEL_TEST_LEVEL_ARGS)"
"$PY" -m pytest "${full_args[@]}"
echo "wheel-test: automatic level: $((SECONDS - start)) s"
for level in $levels; do
  [ "$level" = "$auto" ] && continue  # the full run above was this level's
  echo "wheel-test: the test suite with METAL_OPS_ISA=$level"
  start=$SECONDS
  # (captured first: grep -q stopping early must not break python's later lines)
  report="$(METAL_OPS_ISA="$level" "$PY" -m metal_ops 2>/dev/null)"
  grep -q "CPU kernels: $level (forced" <<<"$report" ||
    { echo "wheel-test: FAILED: METAL_OPS_ISA=$level is not what runs: $report" >&2; exit 1; }
  METAL_OPS_ISA="$level" "$PY" -m pytest "${level_args[@]}"
  echo "wheel-test: METAL_OPS_ISA=$level: $((SECONDS - start)) s"
done
echo "wheel-test: OK ($(basename "$WHEEL"); levels $levels)"

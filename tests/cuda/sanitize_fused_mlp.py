"""A small FusedMLP workload for compute-sanitizer (memcheck, racecheck), run from the
repository root:

    compute-sanitizer --tool memcheck python3 -m tests.cuda.sanitize_fused_mlp
    compute-sanitizer --tool racecheck python3 -m tests.cuda.sanitize_fused_mlp

Forward (inference and training) and backward for float32 (exact and on TF32
tensor cores, the TF32 layer path also with its staged backward kernels'
32-row chunks and without them) and float16, every width, odd input/output widths, N not a
multiple of the 128-row tile, each result checked against the NumPy
reference. Exits non-zero on a mismatch.
"""

import numpy as np

from tests.cuda import harness
from tests.cuda import test_fused_mlp_cuda as t


def main():
    cupy, lib = harness.require_gpu()
    rng = np.random.default_rng(5)
    cases = 0
    for dtype in t.FLOAT32_DTYPES + [t.TF32_LAYERS32, t.TF32_UNSTAGED, np.float16]:
        for width, in_dim, out_dim, hidden in ((16, 3, 1, 1), (32, 31, 3, 2), (64, 33, 17, 3), (64, 16, 24, 2),
                                               (128, 5, 128, 2), (128, 128, 128, 8)):
            t.check_case(cupy, lib, rng, 301, in_dim, width, hidden, out_dim, "relu", "sigmoid",
                         dtype)
            cases += 1
    print(f"sanitize workload OK: {cases} forward+backward cases checked against NumPy")


if __name__ == "__main__":
    main()

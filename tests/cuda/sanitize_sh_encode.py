"""A small SHEncode workload for compute-sanitizer (memcheck, racecheck).

    compute-sanitizer --tool memcheck python3 tests/cuda/sanitize_sh_encode.py
    compute-sanitizer --tool racecheck python3 tests/cuda/sanitize_sh_encode.py

Forward and backward for float32 and float16, every degree, N not a multiple
of the 256-direction tile, each result checked against the NumPy reference.
Exits non-zero on a mismatch.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.cuda import harness  # noqa: E402
from tests.cuda import test_sh_encode_cuda as t  # noqa: E402


def main():
    cupy, lib = harness.require_gpu()
    rng = np.random.default_rng(3)
    cases = 0
    for dtype in (np.float32, np.float16):
        for degree in (1, 2, 3, 4):
            t.check_case(cupy, lib, rng, 1000, degree, dtype)
            cases += 1
    print(f"sanitize workload OK: {cases} forward+backward cases checked against NumPy")


if __name__ == "__main__":
    main()

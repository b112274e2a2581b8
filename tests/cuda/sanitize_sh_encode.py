"""A small SHEncode workload for compute-sanitizer (memcheck, racecheck), run from the
repository root:

    compute-sanitizer --tool memcheck python3 -m tests.cuda.sanitize_sh_encode
    compute-sanitizer --tool racecheck python3 -m tests.cuda.sanitize_sh_encode

Forward and backward for float32 and float16, every degree, N not a multiple
of the 256-direction tile, each result checked against the NumPy reference.
Exits non-zero on a mismatch.
"""

import numpy as np

from tests.cuda import harness
from tests.cuda import test_sh_encode_cuda as t


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

"""A small HashEncode workload for compute-sanitizer (memcheck, racecheck), run from the
repository root:

    compute-sanitizer --tool memcheck python3 -m tests.cuda.sanitize_hash_encode
    compute-sanitizer --tool racecheck python3 -m tests.cuda.sanitize_hash_encode

Covers forward, backward and second order (float32 / float16 tables, atomic
and deterministic paths, input gradient on, coarse-level shared-memory
aggregation on and off, N not a multiple of the block) on small grids, and
checks every result against the NumPy reference so a run that "passes" the
sanitizer also computed the right thing. Exits non-zero on a mismatch.
"""

import numpy as np

from tests.cuda import test_hash_encode_cuda as t
from tests.reference import hash_encode as ref


def main():
    cupy, lib = t.gpu()
    rng = np.random.default_rng(5)
    cases = second_order = 0
    for dims, features in ((3, 2), (2, 8), (4, 1)):
        grid = t.small_grid(dims)
        rows = ref.table_rows(dims, **grid)
        for dtype in (np.float32, np.float16):
            x = t.make_inputs(rng, 3001, dims, out_of_range_fraction=0.2, nan_rows=6)
            table = t.make_table(rng, rows, features, dtype)
            dy = rng.standard_normal((3001, 8 * features)).astype(dtype)
            got = t.run_forward(cupy, lib, x, table, grid, "smoothstep", "clamp")
            want = ref.encode(x, table, interpolation="smoothstep", out_of_range="clamp", **grid)
            tol = 1e-5 if dtype == np.float32 else 1e-3
            t.assert_close(got, want if dtype == np.float32 else want.astype(np.float16).astype(np.float64),
                           tol, tol, "encoded")
            for deterministic in (False, True):
                for aggregate in (-1, 0):
                    gt, gi = t.run_backward(cupy, lib, dy, x, table, grid, "linear", "wrap",
                                            deterministic=deterministic, aggregate=aggregate)
                    t._check_backward(gt, gi, x, dy, table, grid, "linear", "wrap")
                    cases += 1
            x, table, dy, gg = t.second_order_case(rng, 3001, dims, features, dtype, grid, "clamp")
            for deterministic in (False, True):
                gt, gdy = t.run_grad_grad(cupy, lib, gg, dy, x, table, grid, "smoothstep", "clamp",
                                          deterministic=deterministic)
                t.check_second_order(gt, gdy, x, table, dy, gg, grid, "smoothstep", "clamp")
                second_order += 1
    print(f"sanitize workload OK: {cases} backward and {second_order} second-order cases + forwards checked "
          "against NumPy")


if __name__ == "__main__":
    main()

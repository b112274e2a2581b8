"""FusedMLP in float64 NumPy, and the error bound of its float16 kernels.

The activations and the Dense stack are written from their definitions, not
from kernels/common/activations.h, so they can judge the kernels. NumPy only
(no TensorFlow): the self-test uses it from an installed package, the TF
tests and the CUDA harness tests (without TensorFlow) through tests/reference.

`float16_bound` is derived in docs/FUSED_MLP_GPU.md ("float16 error bound"),
`tf32_bound` (the same model with TF32's roundings) in "TF32 error bound".
"""
import numpy as np

ALPHA = 0.2  # the op's default leaky_relu slope
TRUNC_EXP_LIMIT = np.exp(15.0)  # trunc_exp's gradient is exp(clip(z, -15, 15))

U16 = 2.0 ** -11  # float16 unit roundoff
HALF_TINY = 2.0 ** -25  # the largest rounding error of a float16 subnormal
U32 = 2.0 ** -23  # float32 accumulation, rounded or truncated (tensor cores truncate)
LAMBDA = 8.0  # Hoeffding: a sum leaves lambda * S with probability below 2 exp(-lambda^2 / 2) = 3e-14
# A relu side flip is one error, not a sum of many: S propagates it through the
# layers below as if its paths were independent, which can understate it.
FLIP_ALLOWANCE = 2.0
MAX_SPLITS, SPLIT_ROWS = 256, 4096  # batch sums: at most 256 partial sums of at least 4096 rows
U_TF32 = 2.0 ** -11  # TF32 (10-bit mantissa) unit roundoff, round to nearest
# TF32 by truncation: how cuBLAS converts float32 operands is not documented,
# so its TF32 products (FusedMLP's layer path) get this, the worst case.
U_TF32_TRUNCATED = 2.0 ** -10
FLOAT_TINY = 2.0 ** -126  # a subnormal float32 operand flushed to zero, at most
# float32 activation functions (exp, log1p, division): within a few ulp
FLOAT_FN = 4 * U32


def tf32_round(a):
    """float32 -> the nearest TF32 value (10-bit mantissa; ties away from zero),
    as float32: what cvt.rna.tf32.f32 gives (finite inputs)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def act(z, name, alpha=ALPHA):
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "leaky_relu":
        return np.where(z > 0, z, alpha * z)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "softplus":
        return np.logaddexp(0.0, z)
    if name == "trunc_exp":
        return np.exp(z)
    if name == "none":
        return z
    raise ValueError(name)


def dact(z, name, alpha=ALPHA):
    """d act / d z at the pre-activation z."""
    if name == "relu":
        return (z > 0).astype(np.float64)
    if name == "leaky_relu":
        return np.where(z > 0, 1.0, alpha)
    if name == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-z))
        return s * (1.0 - s)
    if name == "softplus":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "trunc_exp":
        return np.exp(np.clip(z, -15.0, 15.0))
    if name == "none":
        return np.ones_like(z)
    raise ValueError(name)


def dact_from_output(y, name, alpha=ALPHA):
    """d act / d z from the output y = act(z) (how the kernels take it)."""
    if name in ("relu", "leaky_relu"):
        return np.where(y > 0, 1.0, 0.0 if name == "relu" else alpha)
    if name == "sigmoid":
        return y * (1 - y)
    if name == "softplus":
        return -np.expm1(-y)
    if name == "trunc_exp":
        return np.clip(y, 1.0 / TRUNC_EXP_LIMIT, TRUNC_EXP_LIMIT)
    if name == "none":
        return np.ones_like(y)
    raise ValueError(name)


def _forward(x, ws, bs, act_name, out_act, alpha):
    """Pre-activations and outputs of every layer, float64."""
    h = [np.asarray(x, np.float64)]
    zs = []
    for i, (w, b) in enumerate(zip(ws, bs)):
        z = h[-1] @ np.asarray(w, np.float64) + np.asarray(b, np.float64)
        zs.append(z)
        h.append(act(z, out_act if i == len(ws) - 1 else act_name, alpha))
    return zs, h


def forward_backward(x, ws, bs, dy, act_name, out_act, outs=None, alpha=ALPHA):
    """float64 forward and backward of the Dense stack: (y, dx, dws, dbs,
    hidden). With `outs` (a kernel's layer outputs: its hidden layers, then
    y), derivatives are taken at those outputs: at a relu kink (z within
    rounding of 0) the gradient then follows the side the kernel's forward
    landed on. Without, at the exact pre-activations (what `float16_bound`
    is measured against)."""
    zs, h = _forward(x, ws, bs, act_name, out_act, alpha)
    g = np.asarray(dy, np.float64)
    dws, dbs = [None] * len(ws), [None] * len(ws)
    for i in reversed(range(len(ws))):
        name = out_act if i == len(ws) - 1 else act_name
        g = g * (dact(zs[i], name, alpha) if outs is None
                 else dact_from_output(np.asarray(outs[i], np.float64), name, alpha))
        dws[i] = h[i].T @ g
        dbs[i] = g.sum(0)
        g = g @ np.asarray(ws[i], np.float64).T
    return h[-1], g, dws, dbs, h[1:-1]


def selftest(inputs, attrs):
    """The self-test's adapter (metal_ops._reference): x, the weights, then the
    biases; the activations in `attrs`, leaky_relu's default slope."""
    layers = (len(inputs) - 1) // 2
    x, ws, bs = inputs[0], inputs[1:1 + layers], inputs[1 + layers:]
    act_name, out_act = attrs["activation"], attrs["output_activation"]

    def grads(cots):
        _, dx, dws, dbs, _ = forward_backward(x, ws, bs, cots[0], act_name, out_act)
        return [dx] + dws + dbs

    return [_forward(x, ws, bs, act_name, out_act, ALPHA)[1][-1]], grads


# ---- the float16 error bound ------------------------------------------------------------------

def _slope(z, s, name, alpha):
    """The largest |act'| on [z - s, z + s] (every activation is monotone)."""
    if name == "relu":
        return (z + s > 0).astype(np.float64)
    if name == "leaky_relu":
        return np.where(z + s > 0, 1.0, alpha)
    if name == "sigmoid":
        m = np.where(np.abs(z) <= s, 0.0, np.abs(z) - s)
        e = np.exp(-m)
        return e / (1.0 + e) ** 2
    if name == "softplus":
        return 1.0 / (1.0 + np.exp(-(z + s)))
    if name == "trunc_exp":
        return np.exp(np.minimum(z + s, 700.0))
    return np.ones_like(z)


def _dslope(a, s, name):
    """The largest |d act'(y) / dy| on [a - s, a + s] (act' from the output y)."""
    if name == "sigmoid":
        return np.maximum(np.abs(1.0 - 2.0 * (a - s)), np.abs(1.0 - 2.0 * (a + s)))
    if name == "softplus":
        return np.exp(-np.maximum(0.0, a - s))
    if name == "trunc_exp":
        return np.ones_like(a)
    return np.zeros_like(a)  # none; relu and leaky_relu jump (see deriv in float16_bound)


def _rss(*terms):
    return np.sqrt(sum(np.square(t) for t in terms))


def _chain(n):
    """The longest chain of float32 additions into one batch-sum accumulator:
    a partial sum of at most max(4096, n / 256 + 32) consecutive rows, then the
    partials (CUDA: row splits; Metal: partitions of row tiles)."""
    return min(n, max(SPLIT_ROWS, n // MAX_SPLITS + 32)) + MAX_SPLITS


def _prefix_max(a, g, block=1024):
    """An upper bound of max_k |sum_{n < k} a[n]^T g[n]|, elementwise: every
    partial sum of consecutive rows is at most twice it."""
    total = np.zeros((a.shape[1], g.shape[1]))
    best = np.zeros_like(total)
    for r in range(0, a.shape[0], block):
        ab, gb = a[r:r + block], g[r:r + block]
        best = np.maximum(best, np.abs(total) + np.abs(ab).T @ np.abs(gb))
        total += ab.T @ gb
    return best


class Float16Bound:
    """Reference values (float64, derivatives at the exact pre-activations)
    and their bounds: y, dx, hidden [L], dws [L+1], dbs [L+1]."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def ratios(self, y=None, hidden=None, dx=None, dws=None, dbs=None):
        """[(name, worst |got - want| / bound)] for the kernel results given
        (names: y, hidden l, dx, dW l, db l)."""
        out = []
        if y is not None:
            out.append(("y", worst_ratio(y, self.y, self.y_bound)))
        for l, h in enumerate(hidden if hidden is not None else []):
            out.append((f"hidden {l}", worst_ratio(h, self.hidden[l], self.hidden_bound[l])))
        if dx is not None:
            out.append(("dx", worst_ratio(dx, self.dx, self.dx_bound)))
        for l, w in enumerate(dws if dws is not None else []):
            out.append((f"dW{l}", worst_ratio(w, self.dws[l], self.dws_bound[l])))
        for l, b in enumerate(dbs if dbs is not None else []):
            out.append((f"db{l}", worst_ratio(b, self.dbs[l], self.dbs_bound[l])))
        return out


def float16_bound(x, ws, bs, dy, act_name, out_act, alpha=ALPHA, lam=LAMBDA):
    """The float16 kernels' results (y, hidden, dx, dW, db) lie within
    `bound` of the float64 reference `forward_backward(x, ws, bs, dy, ...)`
    on the same float16 values, elementwise (docs/FUSED_MLP_GPU.md)."""
    return _bound(x, ws, bs, dy, act_name, out_act, alpha, lam, u_in=0.0, u_act=U16, u_y=U16, u_out=U16,
                  tiny=HALF_TINY)


def tf32_bound(x, ws, bs, dy, act_name, out_act, alpha=ALPHA, lam=LAMBDA, truncated=False):
    """The same for float32 on TF32 tensor cores (docs/FUSED_MLP_GPU.md, "TF32
    error bound"): x and the weights rounded to TF32 where the products read
    them, every hidden output and every dL/dz rounded to TF32 (stored so, or
    as the next product reads it), float32 accumulation; y, dx, dW, db float32.
    truncated: operands truncated to TF32 rather than rounded to nearest (the
    layer path's cuBLAS products)."""
    u = U_TF32_TRUNCATED if truncated else U_TF32
    return _bound(x, ws, bs, dy, act_name, out_act, alpha, lam, u_in=u, u_act=u, u_y=FLOAT_FN,
                  u_out=U32, tiny=FLOAT_TINY)


def _bound(x, ws, bs, dy, act_name, out_act, alpha, lam, u_in, u_act, u_y, u_out, tiny):
    """The error bound of a kernel with these roundings: u_in of x and the
    weights as the products read them (relative), u_act of every hidden
    output and every dL/dz (stored or as read by the next product), u_y of y,
    u_out of dx, dW and db; tiny: the largest absolute error of a tiny value.

    Model of the kernels (float16; TF32 reads u_in, u_act, u_y, u_out for
    the roundings): float16 inputs, weights, biases and dy; products
    summed in float32; every layer's output and every dL/dz rounded to float16,
    derivatives taken from the float16 outputs; dx, dW, db rounded to float16.
    bound = D + lam * S: S propagates each rounding error's largest size as a
    root sum of squares (independent, mean-zero errors), D the float32
    accumulation and the last rounding of each result, taken at their worst.
    A relu / leaky_relu unit whose pre-activation is within lam * S of 0 may
    land on the other side: its whole gradient term counts.
    """
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    ws = [np.asarray(w, np.float64) for w in ws]
    bs = [np.asarray(b, np.float64) for b in bs]
    n, depth = x.shape[0], len(ws)
    names = [act_name] * (depth - 1) + [out_act]
    zs, h = _forward(x, ws, bs, act_name, out_act, alpha)

    # Forward: S of every layer's pre-activation (s_z) and stored output (s_a).
    # A weight's rounding (u_in |w|) enters every row's sum as an independent term.
    s_a, s_z = [u_in * np.abs(x)], []
    for l in range(depth):
        w2, k = ws[l] ** 2, ws[l].shape[0] + 1
        mag = (np.abs(h[l]) + lam * s_a[l]) @ np.abs(ws[l]) + np.abs(bs[l])
        sz = np.sqrt(s_a[l] ** 2 @ w2 + u_in ** 2 * (h[l] ** 2 @ w2) + (k * U32 * mag) ** 2)
        slope = _slope(zs[l], lam * sz, names[l], alpha)
        s_z.append(sz)
        u = u_y if l == depth - 1 else u_act
        s_a.append(_rss(slope * sz, u * np.abs(h[l + 1]), tiny))

    def deriv(l):
        """act'(z_l), the largest |kernel's act'| and S of its error."""
        name, z, a = names[l], zs[l], h[l + 1]
        d = dact(z, name, alpha)
        if name in ("relu", "leaky_relu"):
            jump = 1.0 if name == "relu" else 1.0 - alpha
            # The kernel lands on the other side of 0 with probability at most
            # p = 2 exp(-z^2 / (2 S^2)) (Hoeffding); the jump then counts whole.
            # A z within 2^-24 of 0 may round to 0 in float16.
            sz2 = s_z[l] ** 2 + 2.0 ** -48
            p = np.minimum(1.0, 2.0 * np.exp(-0.5 * z * z / sz2))
            dmax = np.where(np.abs(z) <= lam * np.sqrt(sz2), 1.0, d)
            return d, dmax, FLIP_ALLOWANCE * jump * np.sqrt(p)
        sd = _dslope(a, lam * s_a[l + 1], name) * s_a[l + 1]
        return d, np.abs(d) + lam * sd, sd

    # Backward: S of every dL/dz (s_g) and of dx.
    g = [None] * depth
    s_g = [None] * depth
    d, dmax, sd = deriv(depth - 1)
    g[-1] = dy * d
    s_g[-1] = _rss(np.abs(dy) * sd, u_act * np.abs(g[-1]), tiny)
    for l in range(depth - 1, -1, -1):
        t = g[l] @ ws[l].T
        mag = (np.abs(g[l]) + lam * s_g[l]) @ np.abs(ws[l]).T
        k = ws[l].shape[1]
        w2t = (ws[l] ** 2).T
        if l == 0:
            dx = t
            s_dx = np.sqrt(s_g[l] ** 2 @ w2t + u_in ** 2 * (g[l] ** 2 @ w2t))
            dx_bound = lam * s_dx + k * U32 * mag + u_out * (np.abs(dx) + lam * s_dx) + tiny
            break
        st = np.sqrt(s_g[l] ** 2 @ w2t + u_in ** 2 * (g[l] ** 2 @ w2t) + (k * U32 * mag) ** 2)
        d, dmax, sd = deriv(l - 1)
        g[l - 1] = t * d
        s_g[l - 1] = _rss(dmax * st, np.abs(t) * sd, u_act * np.abs(g[l - 1]), tiny)

    # Batch sums: rows are independent, so their errors add as squares; the
    # float32 accumulation at its worst along the longest chain of additions.
    dws, dbs, dws_bound, dbs_bound = [], [], [], []
    chain = _chain(n)
    ones = np.ones((n, 1))
    for l in range(depth):
        a, sa, gl, sg = h[l], s_a[l], g[l], s_g[l]
        dw, db = a.T @ gl, gl.sum(0)
        # a row's error: sa |g| + |a + da| sg (the second factor covers da dg).
        abs_a, abs_g = np.abs(a) + lam * sa, np.abs(gl) + lam * sg
        s_dw = np.sqrt((sa ** 2).T @ gl ** 2 + (abs_a ** 2).T @ sg ** 2 + 2 * (sa * abs_a).T @ (np.abs(gl) * sg))
        s_db = np.sqrt((sg ** 2).sum(0))
        # Each addition: at most U32 (|partial sum| + |terms added|).
        acc_w = U32 * (2 * chain * _prefix_max(a, gl) + abs_a.T @ abs_g)
        acc_b = U32 * (2 * chain * _prefix_max(ones, gl)[0] + abs_g.sum(0))
        dws.append(dw)
        dbs.append(db)
        dws_bound.append(lam * s_dw + acc_w + u_out * (np.abs(dw) + lam * s_dw + acc_w) + tiny)
        dbs_bound.append(lam * s_db + acc_b + u_out * (np.abs(db) + lam * s_db + acc_b) + tiny)

    y = h[-1]
    # y, hidden: the last rounding is already in s_a; lam * s_a covers it.
    return Float16Bound(y=y, y_bound=lam * s_a[-1], hidden=h[1:-1], hidden_bound=[lam * s for s in s_a[1:-1]],
                        dx=dx, dx_bound=dx_bound, dws=dws, dws_bound=dws_bound, dbs=dbs, dbs_bound=dbs_bound)


def worst_ratio(got, want, bound):
    """max |got - want| / bound (inf for a shape mismatch or a NaN/inf that
    the reference does not have; 0 for empty arrays)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        return np.inf
    if got.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        ratio = np.abs(got - want) / bound
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    return float(ratio.max())

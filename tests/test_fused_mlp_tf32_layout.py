"""FusedMLP float32 on TF32 tensor cores (kernels/fused_mlp/fused_mlp_mma.cu.cc; Tf32Mma
in kernels/fused_mlp/fused_mlp_mma.h), checked without a GPU:

* a NumPy model of the kernels' fragment index arithmetic (per lane, per
  register; each function mirrors the C++ function of the same name) driven
  through mma.m16n8k8 as the PTX ISA defines its fragments: forward (x staged
  in shared memory, hidden layers from the registers, output chunks),
  backward (dL/dz through W^T, dx chunks) and the weight gradient, all equal
  to the float64 products exactly (small integers);
* every fragment load and store of those layouts free of shared-memory bank
  conflicts, and inside the shared memory the plan allots;
* TF32 rounding (cvt.rna) as tests and the bound emulate it;
* the TF32 error bound (tf32_bound, docs/FUSED_MLP_GPU.md "TF32 error bound")
  against a NumPy model of the TF32 kernels, and not vacuous.

The kernels themselves run in tests/cuda/test_fused_mlp_cuda.py (GPU).
"""
import numpy as np
import pytest

from tests.cuda.test_fused_mlp_cuda import make_net
from tests.reference import fused_mlp as ref

LANE = np.arange(32)
G, T = LANE >> 2, LANE & 3
SKEW = 8  # Tf32Mma::kSkew


# ---- mma.m16n8k8 .tf32 as the PTX ISA defines its fragments ------------------------------------

def ptx_mma(a, b, c):
    """d = A B + C for per-lane registers a [32, 4], b [32, 2], c [32, 4]
    (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32: A row groupID for
    a0, a2 and groupID + 8 for a1, a3, column threadID_in_group for a0, a1 and
    + 4 for a2, a3; B row threadID_in_group for b0 and + 4 for b1, column
    groupID; C/D row groupID for c0, c1 and + 8 for c2, c3, column
    threadID_in_group * 2 + (i & 1))."""
    A, B, C = np.full((16, 8), np.nan), np.full((8, 8), np.nan), np.full((16, 8), np.nan)
    for i, (r, k) in enumerate([(G, T), (G + 8, T), (G, T + 4), (G + 8, T + 4)]):
        A[r, k] = a[:, i]
    B[T, G], B[T + 4, G] = b[:, 0], b[:, 1]
    cpos = [(G, 2 * T), (G, 2 * T + 1), (G + 8, 2 * T), (G + 8, 2 * T + 1)]
    for i, (r, n) in enumerate(cpos):
        C[r, n] = c[:, i]
    assert not np.isnan(A).any() and not np.isnan(B).any() and not np.isnan(C).any()
    D = A @ B + C
    return np.stack([D[r, n] for r, n in cpos], axis=1)


# ---- Tf32Mma's index arithmetic (one function per C++ function) --------------------------------

def Ld(np_, trans):
    return np_ + 4 if trans else np_ + SKEW


def WIdx(r, c, ld, trans):
    return ((r >> 1) * ld + c) * 2 + (r & 1) if trans else r * ld + c


def ColOff(c, trans):
    return 2 * c if trans else c


def LoadMatrix(W, kp, np_, trans, size):
    """W [k, nn] zero-padded to [kp, np] into a flat shared-memory array."""
    smem = np.full(size, np.nan)
    ld = Ld(np_, trans)
    for r in range(kp):
        for c in range(np_):
            smem[WIdx(r, c, ld, trans)] = W[r, c] if r < W.shape[0] and c < W.shape[1] else 0.0
    return smem


def LoadB_addr(ldw, kk, j, trans, h):
    """Word address of the float2 that LoadB reads for n-tile 2j + h."""
    n = j * 16 + h * 8 + G
    return ((kk * 4 + T) * ldw + n) * 2 if trans else n * ldw + kk * 8 + 2 * T


def LoadB(w, base, ldw, kk, j, trans):
    b = np.empty((32, 4))
    for h in range(2):
        addr = base + LoadB_addr(ldw, kk, j, trans, h)
        b[:, 2 * h], b[:, 2 * h + 1] = w[addr], w[addr + 1]
    return b


def LoadA_addr(ld, kk):
    return G * ld + kk * 8 + 2 * T, (G + 8) * ld + kk * 8 + 2 * T


def LoadA(s, base, ld, kk):
    lo, hi = (base + a for a in LoadA_addr(ld, kk))
    return np.stack([s[lo], s[hi], s[lo + 1], s[hi + 1]], axis=1)


def MakeA(c):
    return c[:, [0, 2, 1, 3]]


LoadC_addr = LoadA_addr


def LoadC(s, base, ld, kk):
    lo, hi = (base + a for a in LoadC_addr(ld, kk))
    return np.stack([s[lo], s[lo + 1], s[hi], s[hi + 1]], axis=1)


def StoreA_addr(ld, kk):
    """The four 32-bit stores in program order; lanes 16-31 (g >= 4) take
    their two columns in the opposite order."""
    h = (LANE >> 4) & 1
    p = G * ld + kk * 8 + 2 * T
    return [p + h, p + 1 - h, p + 8 * ld + h, p + 8 * ld + 1 - h]


def StoreA(s, base, ld, a, kk):
    h = ((LANE >> 4) & 1).astype(bool)
    vals = [np.where(h, a[:, 2], a[:, 0]), np.where(h, a[:, 0], a[:, 2]),
            np.where(h, a[:, 3], a[:, 1]), np.where(h, a[:, 1], a[:, 3])]
    for addr, v in zip(StoreA_addr(ld, kk), vals):
        s[base + addr] = v


def StorePairs(s, base, ld, col0, o):
    """StoreChunk without the activation: o [2][32, 4] -> staging."""
    for h in range(2):
        p = base + G * ld + col0 + 8 * h + 2 * T
        s[p], s[p + 1] = o[h][:, 0], o[h][:, 1]
        s[p + 8 * ld], s[p + 8 * ld + 1] = o[h][:, 2], o[h][:, 3]


def WgradA_addr(lda, m0, kk):
    """Two 64-bit loads (a0, a1) and (a2, a3): A's row g is column m0 + 2g of
    X, row g + 8 column m0 + 2g + 1."""
    a0 = (kk * 8 + T) * lda + m0 + 2 * G
    return [a0, a0 + 4 * lda]


def WgradB_addr(ldb, n0, kk):
    b0 = (kk * 8 + T) * ldb + n0 + G
    return [b0, b0 + 4 * ldb, b0 + 8, b0 + 4 * ldb + 8]


def WgradRow(g, h):
    return 2 * g + h


def WgradFrags(sa, lda, sb, ldb, m0, n0, kk):
    lo, hi = WgradA_addr(lda, m0, kk)
    af = np.stack([sa[lo], sa[lo + 1], sa[hi], sa[hi + 1]], axis=1)
    return af, np.stack([sb[i] for i in WgradB_addr(ldb, n0, kk)], axis=1)


def ColSum(b0, b1):
    return b0 + b1


def WgradDbLane(v):
    """Column g's sum over the lanes t of group g, in the kernel's order."""
    v = v + v[LANE ^ 1]
    return v + v[LANE ^ 2]


def wgrad_matrix(acc):
    """Weight-gradient C fragments [2] of one 16 x 16 tile -> the [16, 16]
    tile (rows through WgradRow)."""
    out = np.zeros((16, 16))
    for q, c in enumerate(acc):
        for i in range(4):
            out[WgradRow(G, i >> 1), q * 8 + 2 * T + (i & 1)] = c[:, i]
    return out


def MmaKStep(acc, a_of, w, base, ldw, kk, trans):
    for j in range(len(acc[0]) // 2):
        b = LoadB(w, base, ldw, kk, j, trans)
        for mt in range(len(acc)):
            acc[mt][2 * j] = ptx_mma(a_of(mt), b[:, 0:2], acc[mt][2 * j])
            acc[mt][2 * j + 1] = ptx_mma(a_of(mt), b[:, 2:4], acc[mt][2 * j + 1])


def MmaSmemA(acc, s, ld, ksteps, w, base, ldw, trans):
    for kk in range(ksteps):
        af = [LoadA(s, mt * 16 * ld, ld, kk) for mt in range(len(acc))]
        MmaKStep(acc, lambda mt: af[mt], w, base, ldw, kk, trans)


def MmaRegA(acc, af, w, base, ldw, trans):
    for kk in range(len(af[0])):
        MmaKStep(acc, lambda mt: af[mt][kk], w, base, ldw, kk, trans)


def zeros_acc(mt, nt):
    return [[np.zeros((32, 4)) for _ in range(nt)] for _ in range(mt)]


def acc_matrix(acc):
    """C fragments [MT][NT] -> the [16 MT, 8 NT] matrix."""
    out = np.zeros((16 * len(acc), 8 * len(acc[0])))
    for mt, row in enumerate(acc):
        for j, c in enumerate(row):
            for i, (r, n) in enumerate([(G, 2 * T), (G, 2 * T + 1), (G + 8, 2 * T), (G + 8, 2 * T + 1)]):
                out[mt * 16 + r, j * 8 + n] = c[:, i]
    return out


def pad16(v):
    return (v + 15) // 16 * 16


def staging(rows, d):
    return np.zeros(rows * (d + SKEW)), d + SKEW


def matrix_size(kp, np_):
    return kp * (np_ + SKEW)  # MakeMmaPlan's allotment (elements)


def ints(rng, shape):
    return rng.integers(-3, 4, shape).astype(np.float64)


# ---- the kernels' dataflow on the model ------------------------------------------------------

SHAPES = [  # in_dim, width, hidden layers, out_dim, m-tiles per warp (Tf32Mma::MTiles)
    (3, 16, 2, 1, 4), (31, 32, 2, 17, 2), (64, 64, 3, 64, 1), (40, 128, 2, 24, 1), (128, 16, 1, 128, 4),
]


@pytest.mark.parametrize("in_dim,width,hidden,out_dim,mt", SHAPES)
def test_forward_fragments_give_the_products(in_dim, width, hidden, out_dim, mt):
    """MmaForwardKernel's path: x from staging (MmaSmemA), then each layer's
    C fragments as the next layer's A (MakeA, relu in between), saved
    activations through StoreA, output in 16-column chunks at ColOff."""
    rng = np.random.default_rng(width + in_dim)
    rows, in_p, out_p = 16 * mt, pad16(in_dim), pad16(out_dim)
    d = max(width, in_p, out_p)
    dims = [in_dim] + [width] * hidden + [out_dim]
    Ws = [ints(rng, (a, b)) for a, b in zip(dims[:-1], dims[1:])]
    x = ints(rng, (rows, in_dim))
    xs, ld = staging(rows, d)
    for r in range(rows):
        xs[r * ld:r * ld + in_dim] = x[r]
    nt = width // 8
    w0 = LoadMatrix(Ws[0], in_p, width, True, matrix_size(in_p, width))
    acc = zeros_acc(mt, nt)
    MmaSmemA(acc, xs, ld, in_p // 8, w0, 0, Ld(width, True), True)
    want = x @ Ws[0]
    assert np.array_equal(acc_matrix(acc), want)
    for l in range(1, hidden + 1):
        af = [[MakeA(np.maximum(acc[m][kk], 0.0)) for kk in range(nt)] for m in range(mt)]
        want = np.maximum(want, 0.0)
        st, _ = staging(rows, d)
        for m in range(mt):
            for kk in range(nt):
                StoreA(st, m * 16 * ld, ld, af[m][kk], kk)
        assert np.array_equal(st.reshape(rows, ld)[:, :width], want), "saved activations"
        np_ = out_p if l == hidden else width
        w = LoadMatrix(Ws[l], width, np_, True, matrix_size(width, np_))
        if l < hidden:
            acc = zeros_acc(mt, nt)
            MmaRegA(acc, af, w, 0, Ld(width, True), True)
            want = want @ Ws[l]
            assert np.array_equal(acc_matrix(acc), want)
        else:
            out, _ = staging(rows, d)
            for c in range(0, out_p, 16):
                o = zeros_acc(mt, 2)
                MmaRegA(o, af, w, ColOff(c, True), Ld(out_p, True), True)
                for m in range(mt):
                    StorePairs(out, m * 16 * ld, ld, c, o[m])
            assert np.array_equal(out.reshape(rows, ld)[:, :out_dim], want @ Ws[l])


@pytest.mark.parametrize("in_dim,width,hidden,out_dim,mt", SHAPES)
def test_backward_fragments_give_the_products(in_dim, width, hidden, out_dim, mt):
    """MmaBackwardKernel's path: dL/dz of the output from staging through W^T
    (MmaSmemA), DerivPack (saved h read at the C positions by LoadC), hidden
    layers from the registers, dx in 16-column chunks of W^T rows."""
    rng = np.random.default_rng(7 * width + out_dim)
    rows, in_p, out_p = 16 * mt, pad16(in_dim), pad16(out_dim)
    d = max(width, in_p, out_p)
    dims = [in_dim] + [width] * hidden + [out_dim]
    Ws = [ints(rng, (a, b)) for a, b in zip(dims[:-1], dims[1:])]
    hs = [ints(rng, (rows, width)) for _ in range(hidden)]  # saved activations; relu' = h > 0
    g = ints(rng, (rows, out_dim))
    ds, ld = staging(rows, d)
    for r in range(rows):
        ds[r * ld:r * ld + out_dim] = g[r]
    nt = width // 8
    wL = LoadMatrix(Ws[-1], width, out_p, False, matrix_size(width, out_p))
    acc = zeros_acc(mt, nt)
    MmaSmemA(acc, ds, ld, out_p // 8, wL, 0, Ld(out_p, False), False)
    want = g @ Ws[-1].T
    assert np.array_equal(acc_matrix(acc), want)
    for l in range(hidden, 0, -1):
        hsm, _ = staging(rows, d)
        for r in range(rows):
            hsm[r * ld:r * ld + width] = hs[l - 1][r]
        dz = [[MakeA(acc[m][kk] * (LoadC(hsm, m * 16 * ld, ld, kk) > 0)) for kk in range(nt)] for m in range(mt)]
        want = want * (hs[l - 1] > 0)
        if l > 1:
            w = LoadMatrix(Ws[l - 1], width, width, False, matrix_size(width, width))
            acc = zeros_acc(mt, nt)
            MmaRegA(acc, dz, w, 0, Ld(width, False), False)
            want = want @ Ws[l - 1].T
            assert np.array_equal(acc_matrix(acc), want)
    w0 = LoadMatrix(Ws[0], in_p, width, False, matrix_size(in_p, width))
    ldw = Ld(width, False)
    out, _ = staging(rows, d)
    for c in range(0, in_p, 16):
        o = zeros_acc(mt, 2)
        MmaRegA(o, dz, w0, c * ldw, ldw, False)
        for m in range(mt):
            StorePairs(out, m * 16 * ld, ld, c, o[m])
    assert np.array_equal(out.reshape(rows, ld)[:, :in_dim], want @ Ws[0].T)


@pytest.mark.parametrize("k,np_,rows", [(3, 16, 32), (40, 24, 64), (128, 128, 32), (64, 16, 96)])
def test_weight_gradient_fragments_give_the_products(k, np_, rows):
    """MmaWgradKernel (and BlockWgrad): X^T dz per 16x16 tile over chunks of
    kWgChunk = 32 rows (WgradFrags: the PTX k order, A's rows permuted), and
    db as fp32 sums of the B fragments (ColSum, WgradDbLane)."""
    rng = np.random.default_rng(k + np_)
    kp, npp, chunk = pad16(k), pad16(np_), 32
    X, dz = ints(rng, (rows, k)), ints(rng, (rows, np_))
    lda, ldb = kp + SKEW, npp + SKEW
    dw, db = np.zeros((kp, npp)), np.zeros(npp)
    for r0 in range(0, rows, chunk):
        sa, sb = np.zeros(chunk * lda), np.zeros(chunk * ldb)
        for r in range(min(chunk, rows - r0)):
            sa[r * lda:r * lda + k] = X[r0 + r]
            sb[r * ldb:r * ldb + np_] = dz[r0 + r]
        for m0 in range(0, kp, 16):
            for n0 in range(0, npp, 16):
                acc = zeros_acc(1, 2)[0]
                dbacc = [np.zeros(32), np.zeros(32)]
                for kk in range(chunk // 8):
                    af, b = WgradFrags(sa, lda, sb, ldb, m0, n0, kk)
                    acc[0] = ptx_mma(af, b[:, 0:2], acc[0])
                    acc[1] = ptx_mma(af, b[:, 2:4], acc[1])
                    dbacc[0] = dbacc[0] + ColSum(b[:, 0], b[:, 1])
                    dbacc[1] = dbacc[1] + ColSum(b[:, 2], b[:, 3])
                dw[m0:m0 + 16, n0:n0 + 16] += wgrad_matrix(acc)
                if m0 == 0:
                    for q in range(2):
                        v = WgradDbLane(dbacc[q])
                        db[n0 + 8 * q + G[T == 0]] += v[T == 0]
    assert np.array_equal(dw[:k, :np_], X.T @ dz)
    assert np.array_equal(db[:np_], dz.sum(0))


# ---- shared memory: no bank conflicts, inside the allotment -----------------------------------

def conflict_free(words, width):
    """A warp's accesses (word addresses, 32 lanes) of `width` 32-bit words
    each: within each phase (32 lanes for 32-bit, half-warps for 64-bit), no
    bank serves two different words."""
    words = np.asarray(words)
    phases = [LANE] if width == 1 else [LANE[:16], LANE[16:]]
    for ph in phases:
        banks = {}
        for lane in ph:
            for e in range(width):
                w = int(words[lane]) + e
                if banks.setdefault(w % 32, w) != w:
                    return False
    return True


@pytest.mark.parametrize("np_", [16, 32, 48, 64, 128])
def test_fragment_loads_are_conflict_free(np_):
    for kk in range(2):
        for j in range(np_ // 16):
            for h in range(2):
                assert conflict_free(LoadB_addr(Ld(np_, True), kk, j, True, h), 2), "forward B"
                assert conflict_free(LoadB_addr(Ld(np_, False), kk, j, False, h), 2), "backward B"
    ld = np_ + SKEW  # staging rows (d + kSkew) and the weight gradient's
    for kk in range(np_ // 8):
        for addr in LoadA_addr(ld, kk):  # also LoadC, StorePairs
            assert conflict_free(addr, 2), "staging"
        for addr in StoreA_addr(ld, kk):
            assert conflict_free(addr, 1), "StoreA"
        assert not conflict_free(G * ld + kk * 8 + 2 * T, 1), "rows g, g + 4 share banks unswizzled"
    for kk in range(4):
        for m0 in range(0, np_, 16):
            for addr in WgradA_addr(ld, m0, kk):
                assert conflict_free(addr, 2), "weight gradient A"
            for addr in WgradB_addr(ld, m0, kk):
                assert conflict_free(addr, 1), "weight gradient B"


@pytest.mark.parametrize("kp,np_", [(16, 16), (32, 128), (128, 16), (128, 128)])
def test_weight_layouts_fit_the_plan(kp, np_):
    for trans in (True, False):
        ld = Ld(np_, trans)
        idx = {WIdx(r, c, ld, trans) for r in range(kp) for c in range(np_)}
        assert len(idx) == kp * np_ and max(idx) < matrix_size(kp, np_)
    # float2 loads: 8-byte aligned words
    assert all(a % 2 == 0 for a in LoadB_addr(Ld(np_, True), 1, 0, True, 1))
    assert all(a % 2 == 0 for a in LoadB_addr(Ld(np_, False), 1, 0, False, 1))


# ---- TF32 rounding ---------------------------------------------------------------------------

def test_tf32_round():
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -10)
    # ties away from zero, below a tie, carry into the exponent, signed zero
    v = np.array([1 + 2.0 ** -11, -(1 + 2.0 ** -11), 1 + 2.0 ** -11 - 2.0 ** -23, 1 + 3 * 2.0 ** -11,
                  2 - 2.0 ** -23, 0.0, -0.0], np.float32)
    want = np.array([one + ulp, -(one + ulp), one, one + 2 * ulp, 2.0, 0.0, -0.0], np.float32)
    got = ref.tf32_round(v)
    assert np.array_equal(got, want) and np.signbit(got[6])
    rng = np.random.default_rng(0)
    r = rng.standard_normal(100000).astype(np.float32)
    rel = np.abs(ref.tf32_round(r).astype(np.float64) / r - 1)
    assert rel.max() <= 2.0 ** -11 and rel.max() > 2.0 ** -12


# ---- the TF32 error bound against a model of the kernels -------------------------------------

F32 = np.float32


def simulate_tf32(x, ws, bs, dy, act, out_act, alpha=ref.ALPHA):
    """The TF32 kernels in NumPy (float32): every product's operands rounded
    to TF32 (x, W, hidden outputs, dL/dz), float32 sums, hidden outputs stored
    as TF32, y, dx, dW, db float32."""
    q = ref.tf32_round
    depth = len(ws)
    names = [act] * (depth - 1) + [out_act]
    wq = [q(w) for w in ws]
    h = [np.asarray(x, F32)]
    for l in range(depth):
        z = q(h[l]) @ wq[l] + bs[l]
        a = ref.act(z, names[l], alpha).astype(F32)
        h.append(a if l == depth - 1 else q(a))
    g = (dy * ref.dact_from_output(h[-1], names[-1], alpha)).astype(F32)
    dws, dbs = [None] * depth, [None] * depth
    for l in range(depth - 1, -1, -1):
        gq = q(g)
        dws[l] = q(h[l]).T @ gq
        dbs[l] = gq.sum(0, dtype=F32)
        t = gq @ wq[l].T
        if l == 0:
            dx = t
        else:
            g = q((t * ref.dact_from_output(h[l], names[l - 1], alpha)).astype(F32))
    return h[-1], np.stack(h[1:-1]), dx, dws, dbs


def _net(rng, n, in_dim, width, hidden, out_dim):
    ws, bs = make_net(rng, in_dim, width, hidden, out_dim, F32)  # the GPU tests' networks
    x = rng.uniform(-1, 1, (n, in_dim)).astype(F32)
    dy = rng.standard_normal((n, out_dim)).astype(F32)
    return x, ws, bs, dy


HIDDEN = ("none", "relu", "leaky_relu", "sigmoid", "softplus")
OUTPUT = HIDDEN + ("trunc_exp",)
NETS = [(i, (0, 1, 17, 300)[i % 4], (1, 7, 33, 64, 128)[i % 5], (16, 32, 64, 128)[i % 4], 1 + (3 * i) % 8,
         (1, 3, 16, 17, 128)[(i + 2) % 5], HIDDEN[i % 5], OUTPUT[(i // 5) % 6]) for i in range(30)]


@pytest.mark.parametrize("net", NETS, ids=[f"{n[0]}-n{n[1]}-{n[2]}-{n[3]}x{n[4]}-{n[5]}-{n[6]}-{n[7]}" for n in NETS])
def test_simulated_tf32_kernel_within_bound(net):
    seed, n, in_dim, width, hidden, out_dim, act, out_act = net
    x, ws, bs, dy = _net(np.random.default_rng(seed), n, in_dim, width, hidden, out_dim)
    bound = ref.tf32_bound(x, ws, bs, dy, act, out_act)
    y, hs, dx, dws, dbs = simulate_tf32(x, ws, bs, dy, act, out_act)
    bad = [(name, r) for name, r in bound.ratios(y=y, hidden=hs, dx=dx, dws=dws, dbs=dbs) if not r <= 1.0]
    assert not bad, bad


def test_tf32_bound_is_tight():
    """Errors of the modelled TF32 kernel reach a sizeable fraction of the
    bound, and a float16-sized rounding (2^-8 of dx) exceeds it."""
    x, ws, bs, dy = _net(np.random.default_rng(99), 500, 32, 64, 3, 16)
    bound = ref.tf32_bound(x, ws, bs, dy, "relu", "none")
    y, hs, dx, dws, dbs = simulate_tf32(x, ws, bs, dy, "relu", "none")
    ratios = dict(bound.ratios(y=y, hidden=hs, dx=dx, dws=dws, dbs=dbs))
    assert ratios["y"] > 0.05 and ratios["dx"] > 0.05 and ratios["dW0"] > 0.05, ratios
    coarse = dx * (1 + 2.0 ** -8 * np.sign(np.random.default_rng(1).standard_normal(dx.shape)))
    assert dict(bound.ratios(dx=coarse))["dx"] > 1.0

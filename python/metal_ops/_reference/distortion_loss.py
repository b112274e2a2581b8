"""DistortionLoss (mip-NeRF 360) from its O(S^2) double sum, in float64."""
import numpy as np


def reference(w, t):
    """Returns (loss [R], dL/dw [R, S], dL/dt [R, S+1]) from the double sum.

    Gradients are differentiated from the double sum by hand:
    dL/dw_i = 2 sum_j w_j |m_i - m_j| + 2/3 w_i d_i,
    dL/dm_i = 2 w_i sum_j w_j sign(m_i - m_j), dL/dd_i = w_i^2 / 3,
    then the chain rule through m = (t_i + t_{i+1})/2, d = t_{i+1} - t_i.
    """
    w = np.asarray(w, np.float64)
    t = np.asarray(t, np.float64)
    m = 0.5 * (t[:, 1:] + t[:, :-1])
    d = t[:, 1:] - t[:, :-1]
    diff = m[:, :, None] - m[:, None, :]
    loss = np.einsum("ri,rj,rij->r", w, w, np.abs(diff)) + (w * w * d).sum(-1) / 3
    dw = 2 * np.einsum("rj,rij->ri", w, np.abs(diff)) + 2 / 3 * w * d
    dm = 2 * w * np.einsum("rj,rij->ri", w, np.sign(diff))
    dd = w * w / 3
    dt = np.zeros_like(t)
    dt[:, :-1] += 0.5 * dm - dd
    dt[:, 1:] += 0.5 * dm + dd
    return loss, dw, dt


def packed_reference(w, t_starts, t_ends, offsets, counts):
    """Packed samples: (loss [R], dL/dw [N], dL/dt_starts [N], dL/dt_ends [N])
    from the same double sum ray by ray, with m_i = (t_start_i + t_end_i) / 2
    and d_i = t_end_i - t_start_i."""
    w = np.asarray(w, np.float64)
    t0 = np.asarray(t_starts, np.float64)
    t1 = np.asarray(t_ends, np.float64)
    loss = np.zeros(len(counts))
    dw, d0, d1 = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for r, (o, c) in enumerate(zip(offsets, counts)):
        s = slice(int(o), int(o) + int(c))
        m, d, wr = 0.5 * (t0[s] + t1[s]), t1[s] - t0[s], w[s]
        diff = m[:, None] - m[None, :]
        loss[r] = wr @ np.abs(diff) @ wr + (wr * wr * d).sum() / 3
        dw[s] = 2 * np.abs(diff) @ wr + 2 / 3 * wr * d
        dm = 2 * wr * (np.sign(diff) @ wr)
        dd = wr * wr / 3
        d0[s] = 0.5 * dm - dd
        d1[s] = 0.5 * dm + dd
    return loss, dw, d0, d1


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest) from its inputs and attributes: the
    outputs, and the gradients of sum(cotangent * output) as a function of the
    cotangents."""
    loss, dw, dt = reference(inputs[0], inputs[1])
    return [loss], lambda cots: [cots[0][:, None] * dw, cots[0][:, None] * dt]

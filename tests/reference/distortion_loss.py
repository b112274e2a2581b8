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

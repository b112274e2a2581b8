// TF-independent bodies of the CPU RobustLoss kernels (kernels/robust_loss/robust_loss_kernels.cc
// runs them on TF's thread pool): a block path with Eigen's SIMD log / exp
// (AVX-512, AVX, SSE or NEON, whatever the build targets). Free of TensorFlow
// headers so tests/test_neon_qemu.py can build them for arm64 and run them
// under qemu. The arithmetic is kernels/robust_loss/robust_loss.h.
#ifndef MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_CPU_H_
#define MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_CPU_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "kernels/robust_loss/robust_loss.h"

namespace mo {
namespace robust_loss_cpu {

// ---- Vectorised block path ---------------------------------------------------------
// The formula's stages from kernels/robust_loss/robust_loss.h over blocks of
// kBlock elements, with the two transcendental functions done by Eigen's SIMD
// log / exp over each block; the stage loops are branch-free and vectorise.
// Per-element coefficients come from a CoeffTile, so scalar and per-channel
// parameters take the same path. Elements outside the common case
// (rl_general_*_ok false: huge |x|, large exponents, underflowing exp(t),
// alpha = 2 or +-inf in a per-channel layout, NaN) are redone with the scalar
// functions, so results equal the scalar path's up to log / exp rounding.
constexpr int64_t kBlock = 512;

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// The coefficients used by the block path, one array per field (SoA) of
// length channels + kBlock, entry i holding channel i % channels: a block that
// starts in column col0 reads its element j at [col0 + j], contiguously.
class CoeffTile {
 public:
  explicit CoeffTile(const std::vector<mo::RobustLossCoeffs>& coeffs)
      : channels_(static_cast<int64_t>(coeffs.size())),
        len_(channels_ == 0 ? 0 : channels_ + kBlock),
        data_(kFloatFields * len_),
        kind_(len_) {
    if (channels_ == 0) return;  // unused (closed forms)
    for (int64_t i = 0; i < len_; ++i) {
      const mo::RobustLossCoeffs& k = coeffs[i % channels_];
      const float fields[kFloatFields] = {k.alpha, k.inv_scale,    k.b,      k.inv_sqrt_b,
                                          k.sigma, k.bound, k.b_over_alpha, k.near2_e};
      for (int f = 0; f < kFloatFields; ++f) data_[f * len_ + i] = fields[f];
      kind_[i] = k.kind;
    }
    for (const mo::RobustLossCoeffs& k : coeffs) has_near2_ = has_near2_ || (k.kind == 0 && k.b < 0.5f);
  }
  int64_t channels() const { return channels_; }
  // Whether some channel has |alpha - 2| < 1/2 (may need the near-2 series).
  bool has_near2() const { return has_near2_; }
  // The coefficients of tile entry i (the fields the stage functions read).
  mo::RobustLossCoeffs at(int64_t i) const {
    mo::RobustLossCoeffs k{};
    const float* d = data_.data() + i;
    k.alpha = d[0];
    k.inv_scale = d[len_];
    k.b = d[2 * len_];
    k.inv_sqrt_b = d[3 * len_];
    k.sigma = d[4 * len_];
    k.bound = d[5 * len_];
    k.b_over_alpha = d[6 * len_];
    k.near2_e = d[7 * len_];
    k.kind = kind_[i];
    return k;
  }

 private:
  static constexpr int kFloatFields = 8;
  int64_t channels_, len_;
  std::vector<float> data_;
  std::vector<mo::int32> kind_;
  bool has_near2_ = false;
};

struct BlockTerms {
  alignas(64) float x[kBlock];
  alignas(64) float s[kBlock];
  alignas(64) float q[kBlock];
  alignas(64) float u[kBlock];
  alignas(64) float w[kBlock];
  alignas(64) float lw[kBlock];
  alignas(64) float L[kBlock];
  alignas(64) float y[kBlock];
  alignas(64) float ey[kBlock];
};

// x as float, s, q, u = q^2 (0 where q is huge: those elements take the
// scalar path), w, L = log1p(u), y = a L / 2 and exp(y) for m elements whose
// coefficients start at tile entry off.
template <typename T>
void FillBlockTerms(const T* x, int64_t m, const CoeffTile& tile, int64_t off, BlockTerms* b) {
  for (int64_t j = 0; j < m; ++j) b->x[j] = static_cast<float>(x[j]);
  for (int64_t j = 0; j < m; ++j) {
    const mo::RobustLossCoeffs k = tile.at(off + j);
    const float s = std::fabs(b->x[j]) * k.inv_scale;
    const float q = s * k.inv_sqrt_b;
    const float qs = q < MO_ROBUST_LOSS_BIG_Q ? q : 0.0f;
    b->s[j] = s;
    b->q[j] = q;
    b->u[j] = qs * qs;
    b->w[j] = 1.0f + qs * qs;
  }
  ArrayMap(b->lw, m) = ConstArrayMap(b->w, m).log();
  for (int64_t j = 0; j < m; ++j) {
    const mo::RobustLossCoeffs k = tile.at(off + j);
    b->L[j] = mo::rl_log1p_from(b->u[j], b->w[j], b->lw[j]);
    b->y[j] = 0.5f * k.alpha * b->L[j];
  }
  ArrayMap(b->ey, m) = ConstArrayMap(b->y, m).exp();
}

// rho over [begin, end) of the flat x.
template <typename T>
void ForwardBlocks(const T* xs, T* ys, int64_t begin, int64_t end, const CoeffTile& tile,
                   const std::vector<mo::RobustLossCoeffs>& coeffs) {
  BlockTerms b;
  alignas(64) float rho[kBlock];
  alignas(64) mo::int32 ok[kBlock];
  const int64_t channels = tile.channels();
  for (int64_t base = begin; base < end; base += kBlock) {
    const int64_t m = std::min(kBlock, end - base);
    const int64_t off = base % channels;
    FillBlockTerms(xs + base, m, tile, off, &b);
    mo::int32 num_bad = 0;
    for (int64_t j = 0; j < m; ++j) {
      const mo::RobustLossCoeffs k = tile.at(off + j);
      rho[j] = mo::rl_general_value(k, b.L[j], b.y[j], b.ey[j]);
      const mo::int32 good = mo::rl_general_value_ok(k, b.q[j], b.y[j]);
      ok[j] = good;
      num_bad += 1 - good;
    }
    for (int64_t j = 0; num_bad > 0 && j < m; ++j) {
      if (!ok[j]) rho[j] = mo::robust_loss_value_k(b.x[j], coeffs[(off + j) % channels]);
    }
    for (int64_t j = 0; j < m; ++j) ys[base + j] = static_cast<T>(rho[j]);
  }
}

// grad * drho/dx over [begin, end) of the flat x, and the sums of grad *
// drho/dalpha and grad * drho/dscale per channel, added to sum_alpha[c] and
// sum_scale[c] (c < channels) in a fixed order.
template <typename T>
void BackwardBlocks(const T* gs, const T* xs, T* dxs, int64_t begin, int64_t end, const CoeffTile& tile,
                    const std::vector<mo::RobustLossCoeffs>& coeffs, double* sum_alpha, double* sum_scale) {
  BlockTerms b;
  alignas(64) float g[kBlock];
  alignas(64) float dx[kBlock];
  alignas(64) float da[kBlock];
  alignas(64) float dc[kBlock];
  alignas(64) mo::int32 ok[kBlock];
  constexpr int kLanes = 16;
  const int64_t channels = tile.channels();
  for (int64_t base = begin; base < end; base += kBlock) {
    const int64_t m = std::min(kBlock, end - base);
    const int64_t off = base % channels;
    FillBlockTerms(xs + base, m, tile, off, &b);
    for (int64_t j = 0; j < m; ++j) g[j] = static_cast<float>(gs[base + j]);
    mo::int32 num_bad = 0;
    for (int64_t j = 0; j < m; ++j) {
      const mo::RobustLossCoeffs k = tile.at(off + j);
      const float u = b.u[j], w = b.w[j], L = b.L[j];
      const float r = u / w;
      const float D = mo::rl_d_from(u, L, r);
      float rho, d_x, d_a, d_c;
      mo::rl_general_grads(b.x[j], b.s[j], k, u, L, r, D, w, b.y[j], b.ey[j], false, rho, d_x, d_a, d_c);
      const mo::int32 good = mo::rl_general_grads_ok(k, b.q[j], b.y[j], L);
      ok[j] = good;
      num_bad += 1 - good;
      dx[j] = g[j] * d_x;
      da[j] = good ? g[j] * d_a : 0.0f;
      dc[j] = good ? g[j] * d_c : 0.0f;
    }
    if (tile.has_near2()) {  // alpha near 2, u < 1/4: d rho/d alpha from the series
      for (int64_t j = 0; j < m; ++j) {
        const mo::RobustLossCoeffs k = tile.at(off + j);
        const float u = b.u[j];
        const float series = mo::rl_dalpha_series(k, u);
        da[j] = ok[j] && mo::rl_near2_series(k, u / b.w[j]) ? g[j] * series : da[j];
      }
    }
    for (int64_t j = 0; num_bad > 0 && j < m; ++j) {
      if (ok[j]) continue;
      float rho, d_x, d_a, d_c;
      mo::robust_loss_grads_k(b.x[j], coeffs[(off + j) % channels], rho, d_x, d_a, d_c);
      dx[j] = g[j] * d_x;
      da[j] = g[j] * d_a;
      dc[j] = g[j] * d_c;
    }
    for (int64_t j = 0; j < m; ++j) dxs[base + j] = static_cast<T>(dx[j]);
    if (channels == 1) {
      // kLanes float partial sums in a fixed order (vectorises), then double.
      float lane_a[kLanes] = {}, lane_c[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= m; j += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          lane_a[l] += da[j + l];
          lane_c[l] += dc[j + l];
        }
      }
      for (int l = 0; j < m; ++j, ++l) {
        lane_a[l] += da[j];
        lane_c[l] += dc[j];
      }
      for (int l = 0; l < kLanes; ++l) {
        sum_alpha[0] += lane_a[l];
        sum_scale[0] += lane_c[l];
      }
    } else {
      int64_t col = off;
      for (int64_t j = 0; j < m; ++j) {
        sum_alpha[col] += da[j];
        sum_scale[col] += dc[j];
        if (++col == channels) col = 0;
      }
    }
  }
}

// ---- The kernels' bodies ---------------------------------------------------------------
// parallel_for(units, cycles_per_unit, fn) runs fn(begin, end) over [0, units)
// (the kernel: TF's intra-op pool). Element i of x is in channel
// i % coeffs.size() (one entry: scalar alpha and scale).

// rho of xs[0, n) into ys.
template <typename T, typename ParallelFor>
void Forward(const std::vector<mo::RobustLossCoeffs>& coeffs, const T* xs, T* ys, int64_t n,
             const ParallelFor& parallel_for) {
  // Scalar alpha = 2 or +-inf: closed forms, no block path needed.
  const bool closed_form = coeffs.size() == 1 && coeffs[0].kind != 0;
  const CoeffTile tile(closed_form ? std::vector<mo::RobustLossCoeffs>{} : coeffs);
  auto work = [&](int64_t begin, int64_t end) {
    if (closed_form) {
      const mo::RobustLossCoeffs k = coeffs[0];
      for (int64_t i = begin; i < end; ++i) {
        ys[i] = static_cast<T>(mo::robust_loss_value_k(static_cast<float>(xs[i]), k));
      }
      return;
    }
    ForwardBlocks(xs, ys, begin, end, tile, coeffs);
  };
  parallel_for(n, /*cycles_per_item=*/20, work);
}

// grad * drho/dx into dxs[0, n), and per channel c the sums of grad *
// drho/dalpha and grad * drho/dscale into sum_a[c] and sum_c[c].
template <typename T, typename ParallelFor>
void Backward(const std::vector<mo::RobustLossCoeffs>& coeffs, const T* gs, const T* xs, T* dxs, int64_t n,
              double* sum_a, double* sum_c, const ParallelFor& parallel_for) {
  const int64_t channels = static_cast<int64_t>(coeffs.size());
  const bool closed_form = channels == 1 && coeffs[0].kind != 0;
  const CoeffTile tile(closed_form ? std::vector<mo::RobustLossCoeffs>{} : coeffs);
  // Fixed blocks (their number depends on n only) with their own per-channel
  // partial sums (double), summed in block order afterwards: deterministic
  // for any number of threads, and free of atomics.
  const int64_t num_blocks = std::max<int64_t>(1, std::min<int64_t>(64, n / 16384));
  std::vector<double> partial(num_blocks * 2 * channels, 0.0);
  auto work = [&](int64_t block_begin, int64_t block_end) {
    for (int64_t blk = block_begin; blk < block_end; ++blk) {
      const int64_t begin = n * blk / num_blocks, end = n * (blk + 1) / num_blocks;
      double* pa = partial.data() + blk * 2 * channels;
      double* ps = pa + channels;
      if (!closed_form) {
        BackwardBlocks(gs, xs, dxs, begin, end, tile, coeffs, pa, ps);
        continue;
      }
      const mo::RobustLossCoeffs k = coeffs[0];
      for (int64_t i = begin; i < end; ++i) {
        float rho, d_x, d_a, d_c;
        mo::robust_loss_grads_k(static_cast<float>(xs[i]), k, rho, d_x, d_a, d_c);
        const float g = static_cast<float>(gs[i]);
        dxs[i] = static_cast<T>(g * d_x);
        pa[0] += static_cast<double>(g) * d_a;
        ps[0] += static_cast<double>(g) * d_c;
      }
    }
  };
  parallel_for(num_blocks, /*cycles_per_item=*/40 * (n / num_blocks + 1), work);
  for (int64_t col = 0; col < channels; ++col) sum_a[col] = sum_c[col] = 0.0;
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    for (int64_t col = 0; col < channels; ++col) {
      sum_a[col] += partial[blk * 2 * channels + col];
      sum_c[col] += partial[blk * 2 * channels + channels + col];
    }
  }
}

}  // namespace robust_loss_cpu
}  // namespace mo

#endif  // MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_CPU_H_

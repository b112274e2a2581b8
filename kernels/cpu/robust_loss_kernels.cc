// CPU kernels for MetalOpsRobustLoss / MetalOpsRobustLossGrad (C++ API, TF's
// intra-op thread pool). The arithmetic is kernels/common/robust_loss.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "kernels/common/robust_loss.h"
#include "ops/robust_loss_validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/threadpool.h"

namespace metal_ops {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;

using robust_loss::ParamLayout;

// Shapes and values of alpha and scale (both are in host memory here).
Status CheckParams(const Tensor& x, const Tensor& alpha, const Tensor& scale, ParamLayout* layout) {
  TF_RETURN_IF_ERROR(robust_loss::CheckParamShapes(x, alpha, scale, layout));
  return robust_loss::CheckParamValues(alpha, scale);
}

// The per-channel constants of the formula (one entry when both are scalars).
std::vector<mo::RobustLossCoeffs> ChannelCoeffs(const Tensor& alpha, const Tensor& scale,
                                                const ParamLayout& layout) {
  const float* as = alpha.flat<float>().data();
  const float* cs = scale.flat<float>().data();
  std::vector<mo::RobustLossCoeffs> coeffs(layout.channels);
  for (int64_t col = 0; col < layout.channels; ++col) {
    coeffs[col] = mo::robust_loss_coeffs(as[layout.alpha_vec ? col : 0], cs[layout.scale_vec ? col : 0]);
  }
  return coeffs;
}

// ---- Vectorised block path (scalar alpha / scale, general alpha) ------------------
// The formula's stages from kernels/common/robust_loss.h over blocks of
// kBlock elements, with the two transcendental functions done by Eigen's SIMD
// log / exp over each block; the stage loops are branch-free and vectorise.
// Elements outside the common case (rl_general_grads_ok false: huge |x|,
// large exponents, alpha near 2 with u >= 1, NaN) are redone with the scalar
// functions, so results equal the scalar path's up to log / exp rounding.
constexpr int64_t kBlock = 1024;

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

struct BlockTerms {
  alignas(64) float s[kBlock];
  alignas(64) float q[kBlock];
  alignas(64) float u[kBlock];
  alignas(64) float w[kBlock];
  alignas(64) float lw[kBlock];
  alignas(64) float L[kBlock];
  alignas(64) float y[kBlock];
  alignas(64) float ey[kBlock];
};

// s, q, u = q^2 (0 where q is huge: those elements take the scalar path), w,
// L = log1p(u) and y = a L / 2, exp(y), for m elements.
template <typename T>
void FillBlockTerms(const T* x, int64_t m, const mo::RobustLossCoeffs& k, BlockTerms* b) {
  for (int64_t j = 0; j < m; ++j) {
    const float s = std::fabs(static_cast<float>(x[j])) * k.inv_scale;
    const float q = s * k.inv_sqrt_b;
    const float qs = q < MO_ROBUST_LOSS_BIG_Q ? q : 0.0f;
    b->s[j] = s;
    b->q[j] = q;
    b->u[j] = qs * qs;
    b->w[j] = 1.0f + qs * qs;
  }
  ArrayMap(b->lw, m) = ConstArrayMap(b->w, m).log();
  for (int64_t j = 0; j < m; ++j) {
    b->L[j] = mo::rl_log1p_from(b->u[j], b->w[j], b->lw[j]);
    b->y[j] = 0.5f * k.alpha * b->L[j];
  }
  ArrayMap(b->ey, m) = ConstArrayMap(b->y, m).exp();
}

template <typename T>
void ForwardBlocks(const T* xs, T* ys, int64_t begin, int64_t end, const mo::RobustLossCoeffs& k) {
  BlockTerms b;
  for (int64_t base = begin; base < end; base += kBlock) {
    const int64_t m = std::min(kBlock, end - base);
    FillBlockTerms(xs + base, m, k, &b);
    for (int64_t j = 0; j < m; ++j) {
      ys[base + j] = static_cast<T>(mo::rl_general_value(k, b.L[j], b.y[j], b.ey[j]));
    }
    for (int64_t j = 0; j < m; ++j) {
      if (!(b.q[j] < MO_ROBUST_LOSS_BIG_Q) || b.y[j] > MO_ROBUST_LOSS_MAX_EXP) {
        ys[base + j] = static_cast<T>(mo::robust_loss_value_k(static_cast<float>(xs[base + j]), k));
      }
    }
  }
}

// Returns the sums of g * drho/dalpha and g * drho/dscale over [begin, end).
template <typename T>
void BackwardBlocks(const T* gs, const T* xs, T* dxs, int64_t begin, int64_t end,
                    const mo::RobustLossCoeffs& k, double* sum_alpha, double* sum_scale) {
  BlockTerms b;
  alignas(64) float da[kBlock];
  alignas(64) float dc[kBlock];
  alignas(64) bool ok[kBlock];
  for (int64_t base = begin; base < end; base += kBlock) {
    const int64_t m = std::min(kBlock, end - base);
    FillBlockTerms(xs + base, m, k, &b);
    for (int64_t j = 0; j < m; ++j) {
      const float u = b.u[j], w = b.w[j], L = b.L[j];
      const float r = u / w;
      const float D = mo::rl_d_from(u, L, r);
      float rho, d_x, d_a, d_c;
      mo::rl_general_grads(static_cast<float>(xs[base + j]), b.s[j], k, L, r, D, w, b.y[j], b.ey[j], rho,
                           d_x, d_a, d_c);
      const bool good = mo::rl_general_grads_ok(k, b.q[j], r, b.y[j], L);
      const float g = static_cast<float>(gs[base + j]);
      ok[j] = good;
      dxs[base + j] = static_cast<T>(g * d_x);
      da[j] = good ? g * d_a : 0.0f;
      dc[j] = good ? g * d_c : 0.0f;
    }
    float block_a = 0.0f, block_c = 0.0f;
    for (int64_t j = 0; j < m; ++j) {
      block_a += da[j];
      block_c += dc[j];
    }
    double fix_a = 0.0, fix_c = 0.0;
    for (int64_t j = 0; j < m; ++j) {
      if (ok[j]) continue;
      float rho, d_x, d_a, d_c;
      mo::robust_loss_grads_k(static_cast<float>(xs[base + j]), k, rho, d_x, d_a, d_c);
      const float g = static_cast<float>(gs[base + j]);
      dxs[base + j] = static_cast<T>(g * d_x);
      fix_a += static_cast<double>(g) * d_a;
      fix_c += static_cast<double>(g) * d_c;
    }
    *sum_alpha += static_cast<double>(block_a) + fix_a;
    *sum_scale += static_cast<double>(block_c) + fix_c;
  }
}

template <typename T>
class RobustLossCpuOp : public OpKernel {
 public:
  explicit RobustLossCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& alpha = ctx->input(1);
    const Tensor& scale = ctx->input(2);
    ParamLayout layout;
    OP_REQUIRES_OK(ctx, CheckParams(x, alpha, scale, &layout));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    const T* xs = x.flat<T>().data();
    T* ys = out->flat<T>().data();
    const int64_t channels = layout.channels;
    const std::vector<mo::RobustLossCoeffs> coeffs = ChannelCoeffs(alpha, scale, layout);
    auto work = [&](int64_t begin, int64_t end) {
      if (channels == 1) {
        const mo::RobustLossCoeffs k = coeffs[0];
        if (k.kind == 0) {
          ForwardBlocks(xs, ys, begin, end, k);
          return;
        }
        for (int64_t i = begin; i < end; ++i) {
          ys[i] = static_cast<T>(mo::robust_loss_value_k(static_cast<float>(xs[i]), k));
        }
        return;
      }
      int64_t col = begin % channels;
      for (int64_t i = begin; i < end; ++i) {
        ys[i] = static_cast<T>(mo::robust_loss_value_k(static_cast<float>(xs[i]), coeffs[col]));
        if (++col == channels) col = 0;
      }
    };
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(n, /*cost_per_unit=*/20, work);
  }
};

template <typename T>
class RobustLossGradCpuOp : public OpKernel {
 public:
  explicit RobustLossGradCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& alpha = ctx->input(2);
    const Tensor& scale = ctx->input(3);
    OP_REQUIRES_OK(ctx, robust_loss::CheckGradShape(grad, x));
    ParamLayout layout;
    OP_REQUIRES_OK(ctx, CheckParams(x, alpha, scale, &layout));
    Tensor *dx = nullptr, *dalpha = nullptr, *dscale = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, alpha.shape(), &dalpha));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, scale.shape(), &dscale));
    const int64_t n = x.NumElements();
    const int64_t channels = layout.channels;
    const int64_t a_vec = layout.alpha_vec, s_vec = layout.scale_vec;
    const int64_t na = alpha.NumElements(), ns = scale.NumElements();
    const T* gs = grad.flat<T>().data();
    const T* xs = x.flat<T>().data();
    const std::vector<mo::RobustLossCoeffs> coeffs = ChannelCoeffs(alpha, scale, layout);
    T* dxs = dx->flat<T>().data();

    // Fixed blocks with their own partial sums (double), summed in order
    // afterwards: deterministic and free of atomics.
    const int64_t num_blocks = std::max<int64_t>(1, std::min<int64_t>(64, n / 16384));
    std::vector<double> partial(num_blocks * (na + ns), 0.0);
    auto work = [&](int64_t block_begin, int64_t block_end) {
      for (int64_t blk = block_begin; blk < block_end; ++blk) {
        const int64_t begin = n * blk / num_blocks, end = n * (blk + 1) / num_blocks;
        double* pa = partial.data() + blk * (na + ns);
        double* ps = pa + na;
        if (channels == 1 && coeffs[0].kind == 0) {
          BackwardBlocks(gs, xs, dxs, begin, end, coeffs[0], pa, ps);
          continue;
        }
        int64_t col = begin % channels;
        for (int64_t i = begin; i < end; ++i) {
          float rho, d_x, d_a, d_c;
          mo::robust_loss_grads_k(static_cast<float>(xs[i]), coeffs[col], rho, d_x, d_a, d_c);
          const float g = static_cast<float>(gs[i]);
          dxs[i] = static_cast<T>(g * d_x);
          pa[a_vec * col] += static_cast<double>(g) * d_a;
          ps[s_vec * col] += static_cast<double>(g) * d_c;
          if (++col == channels) col = 0;
        }
      }
    };
    if (n > 0) {
      ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
          num_blocks, /*cost_per_unit=*/40 * (n / num_blocks + 1), work);
    }
    float* das = dalpha->flat<float>().data();
    float* dcs = dscale->flat<float>().data();
    for (int64_t j = 0; j < na; ++j) {
      double sum = 0.0;
      for (int64_t blk = 0; blk < num_blocks; ++blk) sum += partial[blk * (na + ns) + j];
      das[j] = static_cast<float>(sum);
    }
    for (int64_t j = 0; j < ns; ++j) {
      double sum = 0.0;
      for (int64_t blk = 0; blk < num_blocks; ++blk) sum += partial[blk * (na + ns) + na + j];
      dcs[j] = static_cast<float>(sum);
    }
  }
};

#define METAL_OPS_REGISTER_ROBUST_LOSS_CPU(T)                                                  \
  REGISTER_KERNEL_BUILDER(                                                                      \
      Name("MetalOpsRobustLoss").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),      \
      RobustLossCpuOp<T>);                                                                     \
  REGISTER_KERNEL_BUILDER(                                                                      \
      Name("MetalOpsRobustLossGrad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),  \
      RobustLossGradCpuOp<T>)
METAL_OPS_REGISTER_ROBUST_LOSS_CPU(float);
METAL_OPS_REGISTER_ROBUST_LOSS_CPU(Eigen::half);
METAL_OPS_REGISTER_ROBUST_LOSS_CPU(::tensorflow::bfloat16);
#undef METAL_OPS_REGISTER_ROBUST_LOSS_CPU

}  // namespace
}  // namespace metal_ops

// CPU kernels for MetalOpsRobustLoss / MetalOpsRobustLossGrad (C++ API, TF's
// intra-op thread pool). The arithmetic is kernels/common/robust_loss.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/robust_loss.h"
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
namespace errors = ::tensorflow::errors;

struct ParamLayout {
  int64_t channels = 1;
  bool alpha_vec = false;
  bool scale_vec = false;
};

// Shape of one parameter: one element (scalar or [1]) or [C] with C = last dim of x.
Status CheckParamShape(const Tensor& x, const Tensor& p, const char* name, bool* is_vec) {
  if (p.dims() > 1) {
    return errors::InvalidArgument("RobustLoss: '", name, "' must be a scalar or a vector, got shape ",
                                   p.shape().DebugString());
  }
  if (p.NumElements() == 1) {
    *is_vec = false;
    return Status();
  }
  if (x.dims() == 0 || p.dims() == 0 || p.dim_size(0) != x.dim_size(x.dims() - 1)) {
    return errors::InvalidArgument(
        "RobustLoss: '", name, "' has shape ", p.shape().DebugString(),
        " but must be a scalar, [1] or [C] with C the last dimension of 'x' (shape ",
        x.shape().DebugString(), ")");
  }
  *is_vec = true;
  return Status();
}

// Shapes and values of alpha and scale: InvalidArgument naming the argument.
Status CheckParams(const Tensor& x, const Tensor& alpha, const Tensor& scale, ParamLayout* layout) {
  TF_RETURN_IF_ERROR(CheckParamShape(x, alpha, "alpha", &layout->alpha_vec));
  TF_RETURN_IF_ERROR(CheckParamShape(x, scale, "scale", &layout->scale_vec));
  layout->channels = (layout->alpha_vec || layout->scale_vec) ? x.dim_size(x.dims() - 1) : 1;
  const auto a = alpha.flat<float>();
  for (int64_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a(i))) {
      return errors::InvalidArgument("RobustLoss: 'alpha' must not be NaN (alpha[", i, "] is NaN)");
    }
  }
  const auto c = scale.flat<float>();
  for (int64_t i = 0; i < c.size(); ++i) {
    if (!(c(i) > 0.0f) || std::isinf(c(i))) {
      return errors::InvalidArgument("RobustLoss: 'scale' must be positive and finite, got scale[", i,
                                     "] = ", c(i));
    }
  }
  return Status();
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
    const float* as = alpha.flat<float>().data();
    const float* cs = scale.flat<float>().data();
    const int64_t channels = layout.channels;
    const int64_t a_vec = layout.alpha_vec, s_vec = layout.scale_vec;
    auto work = [&](int64_t begin, int64_t end) {
      int64_t col = begin % channels;
      for (int64_t i = begin; i < end; ++i) {
        ys[i] = static_cast<T>(mo::robust_loss_value(static_cast<float>(xs[i]), as[a_vec * col],
                                                     cs[s_vec * col]));
        if (++col == channels) col = 0;
      }
    };
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(n, /*cost_per_unit=*/60, work);
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
    OP_REQUIRES(ctx, grad.shape() == x.shape(),
                errors::InvalidArgument("RobustLossGrad: 'grad' has shape ", grad.shape().DebugString(),
                                        " but 'x' has shape ", x.shape().DebugString()));
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
    const float* as = alpha.flat<float>().data();
    const float* cs = scale.flat<float>().data();
    T* dxs = dx->flat<T>().data();

    // Fixed blocks with their own partial sums (double), summed in order
    // afterwards: deterministic and free of atomics.
    const int64_t num_blocks = std::max<int64_t>(1, std::min<int64_t>(64, n / 8192));
    std::vector<double> partial(num_blocks * (na + ns), 0.0);
    auto work = [&](int64_t block_begin, int64_t block_end) {
      for (int64_t blk = block_begin; blk < block_end; ++blk) {
        const int64_t begin = n * blk / num_blocks, end = n * (blk + 1) / num_blocks;
        double* pa = partial.data() + blk * (na + ns);
        double* ps = pa + na;
        int64_t col = begin % channels;
        for (int64_t i = begin; i < end; ++i) {
          float rho, d_x, d_a, d_c;
          mo::robust_loss_grads(static_cast<float>(xs[i]), as[a_vec * col], cs[s_vec * col], rho, d_x, d_a, d_c);
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
          num_blocks, /*cost_per_unit=*/200 * (n / num_blocks + 1), work);
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

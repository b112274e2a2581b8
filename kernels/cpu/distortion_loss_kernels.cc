// CPU kernels for MetalOpsDistortionLoss / MetalOpsDistortionLossGrad (C++ API,
// TF's intra-op thread pool, one ray per work item, O(S) per ray). The
// arithmetic is kernels/common/distortion_loss.h.
#include <atomic>
#include <cstdint>

#include "kernels/common/distortion_loss.h"
#include "ops/distortion_loss_validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/threadpool.h"

namespace metal_ops {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;

// InvalidArgument naming the first ray whose t decreases (NaN counts).
Status CheckSorted(OpKernelContext* ctx, const Tensor& t, int64_t rays, int64_t samples) {
  const float* ts = t.flat<float>().data();
  std::atomic<int64_t> first_bad(rays);
  auto work = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end && r < first_bad.load(std::memory_order_relaxed); ++r) {
      if (mo::dl_first_decrease(ts + r * (samples + 1), samples) >= 0) {
        int64_t cur = first_bad.load();
        while (r < cur && !first_bad.compare_exchange_weak(cur, r)) {
        }
        return;
      }
    }
  };
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(rays, 4 * (samples + 1), work);
  const int64_t r = first_bad.load();
  if (r < rays) return distortion_loss::CheckRaySorted(ts + r * (samples + 1), r, samples);
  return Status();
}

class DistortionLossCpuOp : public OpKernel {
 public:
  explicit DistortionLossCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& w = ctx->input(0);
    const Tensor& t = ctx->input(1);
    OP_REQUIRES_OK(ctx, distortion_loss::CheckShapes(w, t));
    const int64_t rays = w.dim_size(0), samples = w.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {rays}, &out));
    if (rays == 0) return;
    OP_REQUIRES_OK(ctx, CheckSorted(ctx, t, rays, samples));
    const float* ws = w.flat<float>().data();
    const float* ts = t.flat<float>().data();
    float* loss = out->flat<float>().data();
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        loss[r] = mo::distortion_loss_ray(ws + r * samples, ts + r * (samples + 1), samples);
      }
    };
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(rays, 12 * (samples + 1), work);
  }
};

class DistortionLossGradCpuOp : public OpKernel {
 public:
  explicit DistortionLossGradCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& t = ctx->input(2);
    OP_REQUIRES_OK(ctx, distortion_loss::CheckShapes(w, t));
    const int64_t rays = w.dim_size(0), samples = w.dim_size(1);
    OP_REQUIRES_OK(ctx, distortion_loss::CheckGradShape(g, rays));
    Tensor *gw = nullptr, *gt = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, w.shape(), &gw));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, t.shape(), &gt));
    if (rays == 0) return;
    OP_REQUIRES_OK(ctx, CheckSorted(ctx, t, rays, samples));
    const float* gs = g.flat<float>().data();
    const float* ws = w.flat<float>().data();
    const float* ts = t.flat<float>().data();
    float* gws = gw->flat<float>().data();
    float* gts = gt->flat<float>().data();
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        mo::distortion_loss_grad_ray(gs[r], ws + r * samples, ts + r * (samples + 1), samples,
                                     gws + r * samples, gts + r * (samples + 1));
      }
    };
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(rays, 30 * (samples + 1), work);
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossCpuOp);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossGradCpuOp);

}  // namespace
}  // namespace metal_ops

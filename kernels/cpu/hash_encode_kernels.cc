// CPU kernels of the multiresolution hash encoding (C++ API, TF's intra-op
// thread pool). The arithmetic is kernels/common/hash_grid.h; this file only
// schedules it.
//
// Forward (and the second-order grad_grad_encoded): parallel over blocks of
//   points; inside a block, level by level, so one level's rows stay hot while
//   the block's points gather from it.
// Table gradient: no atomics. Levels are dealt round-robin to K = intra-op
//   threads groups; a group owns whole levels, so its writes are disjoint from
//   every other group's, and it adds the points of a level in index order 0..N-1.
//   The float32 sums are therefore bitwise identical for any thread count and
//   any run. Half tables accumulate into a float32 buffer, cast at the end.
// Input gradient: parallel over points, levels summed in order 0..L-1.
//
// MetalOpsHashEncodeGradGrad and MetalOpsHashGridOffsets run on the CPU only:
// their kernel classes live here, beside their registration, not in
// kernels/hash_encode_kernel.h (which holds the classes shared by devices).
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/hash_grid.h"
#include "kernels/cpu/hash_encode_cpu.h"
#include "kernels/cpu/hash_encode_functor.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/hash_encode_kernel.h"
#include "kernels/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace mo {
namespace {

using ::mo::int64;
using ::mo::uint32;
using namespace ::mo::hash_encode_cpu;  // NOLINT: the kernel bodies
using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::register_kernel::Name;

using ::mo::hash_encode::CheckInputsAndTable;
using ::mo::hash_encode::CheckMatrix;
using ::mo::hash_encode::GridAttrs;
using ::mo::hash_encode::GridRows;

// ---- Kernels (the functor: kernels/cpu/hash_encode_functor.h) -----------------------------

template <typename T>
class HashEncodeGradGradOp : public hash_encode::KernelOf<hash_encode::GridOp::kEncodeGradGrad> {
 public:
  using hash_encode::KernelOf<hash_encode::GridOp::kEncodeGradGrad>::OpKernelWithAttrs;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ggx = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    const Tensor& inputs = ctx->input(2);
    const Tensor& table = ctx->input(3);
    hash_encode::TableGeometry g;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, CheckInputsAndTable(ctx, attrs_.grid, 2, &g, &n));
    OP_REQUIRES_OK(ctx, CheckMatrix("grad_grad_inputs", ggx, n, g.dims));
    OP_REQUIRES_OK(ctx, CheckMatrix("grad_encoded", dy, n, int64(attrs_.grid.num_levels) * g.features));
    Tensor* grad_table = nullptr;
    Tensor* grad_dy = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, table.shape(), &grad_table));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, dy.shape(), &grad_dy));
    const HashEncodeGradGradArgs<T> args = {g.dims, g.features, n, g.rows, ggx.flat<float>().data(),
                                            dy.flat<T>().data(), inputs.flat<float>().data(), table.flat<T>().data(),
                                            grad_table->flat<T>().data(), grad_dy->flat<T>().data(), g.params};
    OP_REQUIRES_OK(ctx, (HashEncodeFunctor<Eigen::ThreadPoolDevice, T>::GradGrad(ctx, args)));
  }
};

class HashGridOffsetsOp : public hash_encode::KernelOf<hash_encode::GridOp::kOffsets> {
 public:
  using hash_encode::KernelOf<hash_encode::GridOp::kOffsets>::OpKernelWithAttrs;

  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({attrs_.grid.num_levels + 1}), &out));
    int64 offsets[hash_grid::kMaxLevels + 1];
    GridRows(attrs_.input_dim, attrs_.grid, offsets);
    auto o = out->flat<int64_t>();
    for (int l = 0; l <= attrs_.grid.num_levels; ++l) o(l) = offsets[l];
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsHashGridOffsets").Device(DEVICE_CPU), HashGridOffsetsOp);

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE_CPU, CPUDevice, Eigen::half);
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_CPU, float, HashEncodeGradGradOp<float>);
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_CPU, Eigen::half, HashEncodeGradGradOp<Eigen::half>);

}  // namespace mo

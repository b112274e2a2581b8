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
// MetalOpsHashGridOffsets runs on the CPU only: its kernel class lives here,
// beside its registration, not in kernels/hash_encode/hash_encode_kernel.h (which holds
// the classes shared by devices).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/hash_grid.h"
#include "kernels/hash_encode/hash_encode_cpu.h"
#include "kernels/hash_encode/hash_encode_functor.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/hash_encode/hash_encode_kernel.h"
#include "kernels/framework/register_kernels.h"
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

using ::mo::hash_encode::GridAttrs;
using ::mo::hash_encode::GridRows;

// ---- MetalOpsHashGridOffsets (the others' kernel classes: kernels/hash_encode/hash_encode_kernel.h) --------

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
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_CPU, float, HashEncodeGradGradOp<CPUDevice, float>);
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_CPU, Eigen::half, HashEncodeGradGradOp<CPUDevice, Eigen::half>);

}  // namespace mo

// The CPU registrations of the hash-grid ops: the kernel classes of
// kernels/hash_encode/hash_encode_kernel.h with the CPU functor of
// kernels/hash_encode/hash_encode_functor.h (which says how the work is split).
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

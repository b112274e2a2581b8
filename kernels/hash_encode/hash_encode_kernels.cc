// The CPU registrations of the hash-grid ops: the kernel classes of
// kernels/hash_encode/hash_encode_kernel.h with the CPU functor of
// kernels/hash_encode/hash_encode_functor.h (which says how the work is split), and XLA's
// host handlers of the same functor (kernels/xla/xla_host.h).
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
#include "kernels/xla/xla_host.h"  // MO_XLA
#if MO_XLA
#include "kernels/hash_encode/hash_encode_xla.h"
#endif

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

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/hash_encode/hash_encode_xla.cc emits.
namespace mo::xla_kernels {
namespace {

ffi::Error Forward(ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer encoded, int64_t num_levels,
                   int64_t log2_hashmap_size, int64_t base_resolution, float per_level_scale, int64_t interpolation,
                   int64_t out_of_range) {
  xla_ffi::HashEncodeCall c;
  ffi::Error error = xla_ffi::HashEncodeCallOf(num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                                               interpolation, out_of_range, inputs, table, &c);
  if (error.failure() || c.num_points == 0) return error;
  return xla_ffi::ForType<float, Eigen::half>(table.element_type(), "HashEncode", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(HashEncodeFunctor<Eigen::ThreadPoolDevice, T>::Forward(
        HostContext(), c.grid,
        xla_ffi::GridArgsOf<HashEncodeForwardArgs, T>(c, Data<float>(inputs), Data<T>(table), Data<T>(encoded))));
  });
}

ffi::Error Backward(ffi::AnyBuffer grad_encoded, ffi::AnyBuffer inputs, ffi::AnyBuffer table,
                    RetBuffer grad_table, RetBuffer grad_inputs, int64_t num_levels,
                    int64_t log2_hashmap_size, int64_t base_resolution, float per_level_scale, int64_t interpolation,
                    int64_t out_of_range, int64_t table_grad, int64_t input_grad, int64_t deterministic) {
  xla_ffi::HashEncodeCall c;
  ffi::Error error = xla_ffi::HashEncodeCallOf(num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                                               interpolation, out_of_range, inputs, table, &c);
  if (error.failure() || (!table_grad && !input_grad)) return error;
  return xla_ffi::ForType<float, Eigen::half>(table.element_type(), "HashEncodeGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(HashEncodeFunctor<Eigen::ThreadPoolDevice, T>::Backward(
        HostContext(), c.grid,
        xla_ffi::GridArgsOf<HashEncodeBackwardArgs, T>(c, Data<T>(grad_encoded), Data<float>(inputs), Data<T>(table),
                                                       table_grad ? Data<T>(grad_table) : nullptr,
                                                       input_grad ? Data<float>(grad_inputs) : nullptr,
                                                       deterministic != 0)));
  });
}

ffi::Error GradGrad(ffi::AnyBuffer grad_grad_inputs, ffi::AnyBuffer grad_encoded, ffi::AnyBuffer inputs,
                    ffi::AnyBuffer table, RetBuffer grad_table, RetBuffer grad_grad_encoded,
                    int64_t num_levels, int64_t log2_hashmap_size, int64_t base_resolution, float per_level_scale,
                    int64_t interpolation, int64_t out_of_range) {
  xla_ffi::HashEncodeCall c;
  ffi::Error error = xla_ffi::HashEncodeCallOf(num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                                               interpolation, out_of_range, inputs, table, &c);
  if (error.failure()) return error;
  return xla_ffi::ForType<float, Eigen::half>(table.element_type(), "HashEncodeGradGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(HashEncodeFunctor<Eigen::ThreadPoolDevice, T>::GradGrad(
        HostContext(),
        xla_ffi::GridArgsOf<HashEncodeGradGradArgs, T>(c, Data<float>(grad_grad_inputs), Data<T>(grad_encoded),
                                                       Data<float>(inputs), Data<T>(table), Data<T>(grad_table),
                                                       Data<T>(grad_grad_encoded))));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsHashEncode", "Host", Forward, xla_ffi::BindGridAttrs(xla_ffi::BindBuffers<2, 1>()));
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGrad", "Host", Backward,
                   xla_ffi::BindGridAttrs(xla_ffi::BindBuffers<3, 2>())
                       .Attr<int64_t>("table_grad")
                       .Attr<int64_t>("input_grad")
                       .Attr<int64_t>("deterministic"));
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGradGrad", "Host", GradGrad,
                   xla_ffi::BindGridAttrs(xla_ffi::BindBuffers<4, 2>()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA

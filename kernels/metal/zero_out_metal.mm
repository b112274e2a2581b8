// ZeroOut on the Metal PluggableDevice ("GPU" with tensorflow-metal): the
// kernel C API and TF_MetalStream through the shared glue (metal_kernel.h).
// Shaders: zero_out.metal.
#import "kernels/metal/metal_kernel.h"

#include "kernels/common/zero_out.h"
#include "kernels/spec/zero_out_spec.h"

namespace {

const char* ShaderFor(TF_DataType dtype) {
  switch (dtype) {
    case TF_INT32: return "zero_out_int32";
    case TF_INT64: return "zero_out_int64";
    default: return "zero_out_float32";
  }
}

void ZeroOut(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& attrs = *static_cast<const mo::zero_out::Attrs*>(kernel_ptr);
  TF_Tensor* input = call.Input(0);
  if (!call.ok()) return;
  const int64_t n = TF_TensorElementCount(input);
  if (!call.Check(mo::zero_out::PreserveIndex(attrs.preserve_index, n))) return;
  const TF_DataType dtype = TF_TensorType(input);
  TF_Tensor* output = call.Output(0, dtype, mo::metal::DimsOf(input));
  if (!call.ok() || n == 0) return;
  const mo::ZeroOutParams params = {n, attrs.preserve_index};
  id<MTLComputePipelineState> pipeline = call.Pipeline("zero_out", ShaderFor(dtype));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(0, input).Tensor(1, output).Value(2, params).Dispatch(pipeline, static_cast<uint64_t>(n));
  });
}

// MSL has no double.
const bool registered = mo::metal::RegisterWithAttrs<mo::zero_out::Attrs>("ZeroOut", {TF_INT32, TF_INT64, TF_FLOAT},
                                                                          &mo::metal::Compute<ZeroOut>);

}  // namespace

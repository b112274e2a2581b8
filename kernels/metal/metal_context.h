// Process-wide Metal state for the op library: the .metallib shipped beside
// _metal_ops.so (found with dladdr) and a cache of compute pipeline states, so
// each pipeline is built once per (device, function), never per Compute call.
#ifndef METAL_OPS_KERNELS_METAL_METAL_CONTEXT_H_
#define METAL_OPS_KERNELS_METAL_METAL_CONTEXT_H_

#import <Metal/Metal.h>

#include <cstdint>
#include <string>

#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_status.h"
#import "kernels/metal/tf_metal_stream.h"

namespace mo {
namespace metal {

// Returns the cached pipeline for `function_name` on `device`, creating it on
// first use. On failure sets `status` (INTERNAL, naming the function) and
// returns nil.
id<MTLComputePipelineState> GetPipeline(id<MTLDevice> device, const std::string& function_name,
                                        TF_Status* status);

// The MTLBuffer behind a tensor allocated by tensorflow-metal.
inline id<MTLBuffer> BufferOf(TF_Tensor* tensor) {
  return (__bridge id<MTLBuffer>)TF_TensorData(tensor);
}

// The TF_MetalStream of the kernel's device; sets `status` when there is none.
inline id<TF_MetalStream> StreamOf(TF_OpKernelContext* ctx, TF_Status* status) {
  return (id<TF_MetalStream>)(TF_GetStream(ctx, status));
}

// Encodes a 1-D dispatch of about `num_threads` threads (whole threadgroups,
// capped in count); shaders loop grid-stride and bound-check their own sizes.
void Dispatch1D(id<MTLComputeCommandEncoder> encoder, id<MTLComputePipelineState> pipeline,
                uint64_t num_threads);

}  // namespace metal
}  // namespace mo

#endif  // METAL_OPS_KERNELS_METAL_METAL_CONTEXT_H_

// ZeroOut on the Metal PluggableDevice ("GPU" on macOS with tensorflow-metal),
// written with the kernel C API as in the WWDC21 talk: work is encoded on the
// TF_MetalStream's command buffer inside dispatch_sync on its queue.
#import "kernels/metal/metal_context.h"

#include <string>
#include <vector>

#include "kernels/common/zero_out.h"

namespace {

struct ZeroOutMetalKernel {
  int64_t preserve_index = 0;
};

void* ZeroOutMetalCreate(TF_OpKernelConstruction* ctx) {
  auto* kernel = new ZeroOutMetalKernel;
  TF_Status* status = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrInt64(ctx, "preserve_index", &kernel->preserve_index, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return kernel;
}

void ZeroOutMetalDelete(void* kernel) { delete static_cast<ZeroOutMetalKernel*>(kernel); }

const char* ShaderNameFor(TF_DataType dtype) {
  switch (dtype) {
    case TF_INT32: return "zero_out_int32";
    case TF_INT64: return "zero_out_int64";
    case TF_FLOAT: return "zero_out_float32";
    default: return nullptr;
  }
}

void ZeroOutMetalCompute(void* kernel_ptr, TF_OpKernelContext* ctx) {
  const auto* kernel = static_cast<const ZeroOutMetalKernel*>(kernel_ptr);
  TF_Status* status = TF_NewStatus();
  TF_Tensor* input = nullptr;
  TF_Tensor* output = nullptr;
  TF_GetInput(ctx, 0, &input, status);
  if (TF_GetCode(status) == TF_OK) {
    const int64_t n = TF_TensorElementCount(input);
    const TF_DataType dtype = TF_TensorType(input);
    std::vector<int64_t> dims(TF_NumDims(input));
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = TF_Dim(input, static_cast<int>(d));
    if (n > 0 && kernel->preserve_index >= n) {
      const std::string msg = "ZeroOut: preserve_index " + std::to_string(kernel->preserve_index) +
                              " is out of range for input 'to_zero' with " + std::to_string(n) + " elements";
      TF_SetStatus(status, TF_INVALID_ARGUMENT, msg.c_str());
    } else {
      output = TF_AllocateOutput(ctx, 0, dtype, dims.data(), static_cast<int>(dims.size()),
                                 TF_TensorByteSize(input), status);
    }
    if (TF_GetCode(status) == TF_OK && n > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK
              ? mo::metal::GetPipeline(stream.currentCommandBuffer.device, ShaderNameFor(dtype), status)
              : nil;
      if (pipeline != nil) {
        const mo::ZeroOutParams params = {n, kernel->preserve_index};
        id<MTLBuffer> in_buffer = mo::metal::BufferOf(input);
        id<MTLBuffer> out_buffer = mo::metal::BufferOf(output);
        dispatch_sync(stream.queue, ^() {
          id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
          [encoder setBuffer:in_buffer offset:0 atIndex:0];
          [encoder setBuffer:out_buffer offset:0 atIndex:1];
          [encoder setBytes:&params length:sizeof(params) atIndex:2];
          mo::metal::Dispatch1D(encoder, pipeline, static_cast<uint64_t>(n));
          [encoder endEncoding];
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteTensor(input);
  TF_DeleteTensor(output);
  TF_DeleteStatus(status);
}

bool RegisterZeroOutMetalKernels() {
  const TF_DataType types[] = {TF_INT32, TF_INT64, TF_FLOAT};  // MSL has no double
  for (TF_DataType type : types) {
    TF_Status* status = TF_NewStatus();
    TF_KernelBuilder* builder =
        TF_NewKernelBuilder("ZeroOut", "GPU", &ZeroOutMetalCreate, &ZeroOutMetalCompute, &ZeroOutMetalDelete);
    TF_KernelBuilder_TypeConstraint(builder, "T", type, status);
    if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder("ZeroOutMetal", builder, status);
    TF_DeleteStatus(status);
  }
  return true;
}

const bool zero_out_metal_kernels_registered = RegisterZeroOutMetalKernels();

}  // namespace

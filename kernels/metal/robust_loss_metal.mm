// RobustLoss on the Metal PluggableDevice ("GPU" with tensorflow-metal), kernel
// C API + TF_MetalStream, like zero_out_metal.mm. Shaders: robust_loss.metal
// (formulas from kernels/common/robust_loss.h). float32 and float16 (MSL's
// bfloat needs Metal 3.1 and is not registered).
//
// Not compiled or run here (no Mac); see docs/LOSSES.md. alpha / scale stay on
// the device: invalid values give NaN elements (no host read-back).
#import "kernels/metal/metal_context.h"

#include <string>
#include <vector>

#include "kernels/common/robust_loss.h"

namespace {

std::vector<int64_t> DimsOf(TF_Tensor* t) {
  std::vector<int64_t> dims(TF_NumDims(t));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = TF_Dim(t, static_cast<int>(d));
  return dims;
}

// Fills params for x / alpha / scale or sets INVALID_ARGUMENT naming the argument.
bool LayoutOf(TF_Tensor* x, TF_Tensor* alpha, TF_Tensor* scale, mo::RobustLossParams* params,
              TF_Status* status) {
  const std::vector<int64_t> xd = DimsOf(x);
  const int64_t last = xd.empty() ? 1 : xd.back();
  TF_Tensor* ps[2] = {alpha, scale};
  const char* names[2] = {"alpha", "scale"};
  int64_t vec[2] = {0, 0};
  for (int j = 0; j < 2; ++j) {
    const int64_t count = TF_TensorElementCount(ps[j]);
    if (TF_NumDims(ps[j]) > 1 || (count != 1 && (xd.empty() || TF_NumDims(ps[j]) == 0 || count != last))) {
      const std::string msg = std::string("RobustLoss: '") + names[j] +
                              "' must be a scalar, [1] or [C] with C the last dimension of 'x'";
      TF_SetStatus(status, TF_INVALID_ARGUMENT, msg.c_str());
      return false;
    }
    vec[j] = count != 1 ? 1 : 0;
  }
  params->num_elements = TF_TensorElementCount(x);
  params->channels = (vec[0] || vec[1]) ? last : 1;
  params->alpha_vec = vec[0];
  params->scale_vec = vec[1];
  return true;
}

const char* Suffix(TF_DataType dtype) {
  return dtype == TF_HALF ? "float16" : "float32";
}

void* CreateNothing(TF_OpKernelConstruction*) { return nullptr; }
void DeleteNothing(void*) {}

void RobustLossMetalCompute(void*, TF_OpKernelContext* ctx) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor *x = nullptr, *alpha = nullptr, *scale = nullptr, *out = nullptr;
  TF_GetInput(ctx, 0, &x, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 1, &alpha, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 2, &scale, status);
  mo::RobustLossParams params = {};
  if (TF_GetCode(status) == TF_OK && LayoutOf(x, alpha, scale, &params, status)) {
    const TF_DataType dtype = TF_TensorType(x);
    const std::vector<int64_t> dims = DimsOf(x);
    out = TF_AllocateOutput(ctx, 0, dtype, dims.data(), static_cast<int>(dims.size()), TF_TensorByteSize(x), status);
    if (TF_GetCode(status) == TF_OK && params.num_elements > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      const std::string name = std::string("robust_loss_forward_") + Suffix(dtype);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK ? mo::metal::GetPipeline(stream.currentCommandBuffer.device, name, status) : nil;
      if (pipeline != nil) {
        id<MTLBuffer> bx = mo::metal::BufferOf(x), ba = mo::metal::BufferOf(alpha), bs = mo::metal::BufferOf(scale);
        id<MTLBuffer> bo = mo::metal::BufferOf(out);
        dispatch_sync(stream.queue, ^() {
          id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
          [encoder setBuffer:bx offset:0 atIndex:0];
          [encoder setBuffer:ba offset:0 atIndex:1];
          [encoder setBuffer:bs offset:0 atIndex:2];
          [encoder setBuffer:bo offset:0 atIndex:3];
          [encoder setBytes:&params length:sizeof(params) atIndex:4];
          mo::metal::Dispatch1D(encoder, pipeline, static_cast<uint64_t>(params.num_elements));
          [encoder endEncoding];
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteTensor(x);
  TF_DeleteTensor(alpha);
  TF_DeleteTensor(scale);
  TF_DeleteTensor(out);
  TF_DeleteStatus(status);
}

void RobustLossGradMetalCompute(void*, TF_OpKernelContext* ctx) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor *grad = nullptr, *x = nullptr, *alpha = nullptr, *scale = nullptr;
  TF_Tensor *dx = nullptr, *dalpha = nullptr, *dscale = nullptr;
  TF_GetInput(ctx, 0, &grad, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 1, &x, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 2, &alpha, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 3, &scale, status);
  mo::RobustLossParams params = {};
  if (TF_GetCode(status) == TF_OK && DimsOf(grad) != DimsOf(x)) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "RobustLossGrad: 'grad' and 'x' must have the same shape");
  }
  if (TF_GetCode(status) == TF_OK && LayoutOf(x, alpha, scale, &params, status)) {
    const TF_DataType dtype = TF_TensorType(x);
    const std::vector<int64_t> xd = DimsOf(x), ad = DimsOf(alpha), sd = DimsOf(scale);
    dx = TF_AllocateOutput(ctx, 0, dtype, xd.data(), static_cast<int>(xd.size()), TF_TensorByteSize(x), status);
    if (TF_GetCode(status) == TF_OK)
      dalpha = TF_AllocateOutput(ctx, 1, TF_FLOAT, ad.data(), static_cast<int>(ad.size()), TF_TensorByteSize(alpha), status);
    if (TF_GetCode(status) == TF_OK)
      dscale = TF_AllocateOutput(ctx, 2, TF_FLOAT, sd.data(), static_cast<int>(sd.size()), TF_TensorByteSize(scale), status);
    if (TF_GetCode(status) == TF_OK) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      const std::string name = std::string("robust_loss_backward_") + Suffix(dtype);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK ? mo::metal::GetPipeline(stream.currentCommandBuffer.device, name, status) : nil;
      if (pipeline != nil) {
        id<MTLBuffer> bg = mo::metal::BufferOf(grad), bx = mo::metal::BufferOf(x);
        id<MTLBuffer> ba = mo::metal::BufferOf(alpha), bs = mo::metal::BufferOf(scale);
        id<MTLBuffer> bdx = mo::metal::BufferOf(dx), bda = mo::metal::BufferOf(dalpha), bds = mo::metal::BufferOf(dscale);
        const size_t da_bytes = TF_TensorByteSize(alpha), ds_bytes = TF_TensorByteSize(scale);
        const int64_t n = params.num_elements;
        dispatch_sync(stream.queue, ^() {
          // The shader accumulates dalpha / dscale with atomics: zero them first.
          id<MTLBlitCommandEncoder> blit = [stream.currentCommandBuffer blitCommandEncoder];
          [blit fillBuffer:bda range:NSMakeRange(0, da_bytes) value:0];
          [blit fillBuffer:bds range:NSMakeRange(0, ds_bytes) value:0];
          [blit endEncoding];
          if (n > 0) {
            id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
            [encoder setBuffer:bg offset:0 atIndex:0];
            [encoder setBuffer:bx offset:0 atIndex:1];
            [encoder setBuffer:ba offset:0 atIndex:2];
            [encoder setBuffer:bs offset:0 atIndex:3];
            [encoder setBuffer:bdx offset:0 atIndex:4];
            [encoder setBuffer:bda offset:0 atIndex:5];
            [encoder setBuffer:bds offset:0 atIndex:6];
            [encoder setBytes:&params length:sizeof(params) atIndex:7];
            // Threads loop over rows; capping the grid caps the number of atomics.
            const uint64_t threads = n < (1 << 16) ? static_cast<uint64_t>(n) : (1ull << 16);
            mo::metal::Dispatch1D(encoder, pipeline, threads);
            [encoder endEncoding];
          }
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_Tensor* all[] = {grad, x, alpha, scale, dx, dalpha, dscale};
  for (TF_Tensor* t : all) TF_DeleteTensor(t);
  TF_DeleteStatus(status);
}

bool RegisterRobustLossMetalKernels() {
  const TF_DataType types[] = {TF_FLOAT, TF_HALF};
  for (TF_DataType type : types) {
    struct { const char* op; void (*compute)(void*, TF_OpKernelContext*); } kernels[] = {
        {"MetalOpsRobustLoss", &RobustLossMetalCompute}, {"MetalOpsRobustLossGrad", &RobustLossGradMetalCompute}};
    for (const auto& k : kernels) {
      TF_Status* status = TF_NewStatus();
      TF_KernelBuilder* builder = TF_NewKernelBuilder(k.op, "GPU", &CreateNothing, k.compute, &DeleteNothing);
      TF_KernelBuilder_TypeConstraint(builder, "T", type, status);
      if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder((std::string(k.op) + "Metal").c_str(), builder, status);
      TF_DeleteStatus(status);
    }
  }
  return true;
}

const bool robust_loss_metal_kernels_registered = RegisterRobustLossMetalKernels();

}  // namespace

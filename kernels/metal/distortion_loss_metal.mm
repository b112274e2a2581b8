// DistortionLoss on the Metal PluggableDevice ("GPU" with tensorflow-metal),
// kernel C API + TF_MetalStream, like zero_out_metal.mm. Shaders:
// distortion_loss.metal (one thread per ray, kernels/common/distortion_loss.h).
//
// Not compiled or run here (no Mac); see docs/LOSSES.md. Unsorted t is not
// reported as an error on Metal (that would need a read-back and a wait on the
// command buffer): those rays get NaN loss and gradients.
#import "kernels/metal/metal_context.h"

#include <string>
#include <vector>

#include "kernels/common/distortion_loss.h"

namespace {

void* CreateNothing(TF_OpKernelConstruction*) { return nullptr; }
void DeleteNothing(void*) {}

// weights [R, S], t [R, S + 1]; sets INVALID_ARGUMENT naming the argument.
bool ShapesOk(TF_Tensor* w, TF_Tensor* t, mo::DistortionLossParams* params, TF_Status* status) {
  if (TF_NumDims(w) != 2) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "DistortionLoss: 'weights' must be [R, S]");
    return false;
  }
  if (TF_NumDims(t) != 2 || TF_Dim(t, 0) != TF_Dim(w, 0) || TF_Dim(t, 1) != TF_Dim(w, 1) + 1) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "DistortionLoss: 't' must be [R, S + 1] for 'weights' [R, S]");
    return false;
  }
  params->num_rays = TF_Dim(w, 0);
  params->num_samples = TF_Dim(w, 1);
  return true;
}

void DistortionLossMetalCompute(void*, TF_OpKernelContext* ctx) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor *w = nullptr, *t = nullptr, *loss = nullptr;
  TF_GetInput(ctx, 0, &w, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 1, &t, status);
  mo::DistortionLossParams params = {};
  if (TF_GetCode(status) == TF_OK && ShapesOk(w, t, &params, status)) {
    const int64_t dims[1] = {params.num_rays};
    loss = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, 1, sizeof(float) * params.num_rays, status);
    if (TF_GetCode(status) == TF_OK && params.num_rays > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK
              ? mo::metal::GetPipeline(stream.currentCommandBuffer.device, "distortion_loss_forward", status)
              : nil;
      if (pipeline != nil) {
        id<MTLBuffer> bw = mo::metal::BufferOf(w), bt = mo::metal::BufferOf(t), bl = mo::metal::BufferOf(loss);
        dispatch_sync(stream.queue, ^() {
          id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
          [encoder setBuffer:bw offset:0 atIndex:0];
          [encoder setBuffer:bt offset:0 atIndex:1];
          [encoder setBuffer:bl offset:0 atIndex:2];
          [encoder setBytes:&params length:sizeof(params) atIndex:3];
          mo::metal::Dispatch1D(encoder, pipeline, static_cast<uint64_t>(params.num_rays));
          [encoder endEncoding];
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteTensor(w);
  TF_DeleteTensor(t);
  TF_DeleteTensor(loss);
  TF_DeleteStatus(status);
}

void DistortionLossGradMetalCompute(void*, TF_OpKernelContext* ctx) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor *g = nullptr, *w = nullptr, *t = nullptr, *gw = nullptr, *gt = nullptr;
  TF_GetInput(ctx, 0, &g, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 1, &w, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 2, &t, status);
  mo::DistortionLossParams params = {};
  if (TF_GetCode(status) == TF_OK && ShapesOk(w, t, &params, status)) {
    if (TF_NumDims(g) != 1 || TF_Dim(g, 0) != params.num_rays) {
      TF_SetStatus(status, TF_INVALID_ARGUMENT, "DistortionLossGrad: 'grad' must be [R]");
    }
    const int64_t wd[2] = {params.num_rays, params.num_samples};
    const int64_t td[2] = {params.num_rays, params.num_samples + 1};
    if (TF_GetCode(status) == TF_OK) gw = TF_AllocateOutput(ctx, 0, TF_FLOAT, wd, 2, TF_TensorByteSize(w), status);
    if (TF_GetCode(status) == TF_OK) gt = TF_AllocateOutput(ctx, 1, TF_FLOAT, td, 2, TF_TensorByteSize(t), status);
    if (TF_GetCode(status) == TF_OK && params.num_rays > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK
              ? mo::metal::GetPipeline(stream.currentCommandBuffer.device, "distortion_loss_backward", status)
              : nil;
      if (pipeline != nil) {
        id<MTLBuffer> bg = mo::metal::BufferOf(g), bw = mo::metal::BufferOf(w), bt = mo::metal::BufferOf(t);
        id<MTLBuffer> bgw = mo::metal::BufferOf(gw), bgt = mo::metal::BufferOf(gt);
        dispatch_sync(stream.queue, ^() {
          id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
          [encoder setBuffer:bg offset:0 atIndex:0];
          [encoder setBuffer:bw offset:0 atIndex:1];
          [encoder setBuffer:bt offset:0 atIndex:2];
          [encoder setBuffer:bgw offset:0 atIndex:3];
          [encoder setBuffer:bgt offset:0 atIndex:4];
          [encoder setBytes:&params length:sizeof(params) atIndex:5];
          mo::metal::Dispatch1D(encoder, pipeline, static_cast<uint64_t>(params.num_rays));
          [encoder endEncoding];
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_Tensor* all[] = {g, w, t, gw, gt};
  for (TF_Tensor* x : all) TF_DeleteTensor(x);
  TF_DeleteStatus(status);
}

bool RegisterDistortionLossMetalKernels() {
  struct { const char* op; void (*compute)(void*, TF_OpKernelContext*); } kernels[] = {
      {"MetalOpsDistortionLoss", &DistortionLossMetalCompute},
      {"MetalOpsDistortionLossGrad", &DistortionLossGradMetalCompute}};
  for (const auto& k : kernels) {
    TF_Status* status = TF_NewStatus();
    TF_KernelBuilder* builder = TF_NewKernelBuilder(k.op, "GPU", &CreateNothing, k.compute, &DeleteNothing);
    TF_RegisterKernelBuilder((std::string(k.op) + "Metal").c_str(), builder, status);
    TF_DeleteStatus(status);
  }
  return true;
}

const bool distortion_loss_metal_kernels_registered = RegisterDistortionLossMetalKernels();

}  // namespace

// MetalOpsVolumeRender / MetalOpsVolumeRenderGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), float32. Kernel C API; work is encoded on the
// TF_MetalStream's command buffer inside dispatch_sync on its queue, like
// ZeroOut. Shaders: kernels/metal/volume_render.metal (one thread per ray).
//
// Not compiled or run in this repository's Linux environment (no Mac): written
// against the same APIs as zero_out_metal.mm; see docs/VOLUME_RENDER.md.
//
// Value checks: the shaders give invalid rays (negative/NaN sigma, decreasing
// t) NaN outputs; the host does not wait for the GPU to report them.
#import "kernels/metal/metal_context.h"

#include <string>
#include <vector>

#include "kernels/common/volume_render.h"

namespace {

std::vector<int64_t> DimsOf(TF_Tensor* tensor) {
  std::vector<int64_t> dims(TF_NumDims(tensor));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = TF_Dim(tensor, static_cast<int>(d));
  return dims;
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) s += (d ? ", " : "") + std::to_string(dims[d]);
  return s + "]";
}

void SetInvalid(TF_Status* status, const std::string& msg) {
  TF_SetStatus(status, TF_INVALID_ARGUMENT, msg.c_str());
}

// Same rules and messages as the CPU kernels: sigma [R,S], rgb [R,S,3],
// t [R,S+1], background [3] or [R,3]. Returns false (status set) on mismatch.
bool CheckInputShapes(const char* op, TF_Tensor* sigma, TF_Tensor* rgb, TF_Tensor* t, TF_Tensor* background,
                      int64_t* rays, int64_t* samples, bool* background_per_ray, TF_Status* status) {
  const std::vector<int64_t> ds = DimsOf(sigma), dc = DimsOf(rgb), dt = DimsOf(t), db = DimsOf(background);
  const std::string prefix = std::string(op) + ": ";
  if (ds.size() != 2) {
    SetInvalid(status, prefix + "'sigma' must be [R, S] (rank 2), got shape " + ShapeString(ds));
    return false;
  }
  const int64_t R = ds[0], S = ds[1];
  const std::string rs = std::to_string(R) + ", " + std::to_string(S);
  if (!(dc.size() == 3 && dc[0] == R && dc[1] == S && dc[2] == 3)) {
    SetInvalid(status, prefix + "'rgb' must be [R, S, 3] = [" + rs + ", 3] to match 'sigma' " + ShapeString(ds) +
                           ", got shape " + ShapeString(dc));
    return false;
  }
  if (!(dt.size() == 2 && dt[0] == R && dt[1] == S + 1)) {
    SetInvalid(status, prefix + "'t' must be [R, S + 1] = [" + std::to_string(R) + ", " + std::to_string(S + 1) +
                           "] (interval boundaries) to match 'sigma' " + ShapeString(ds) + ", got shape " +
                           ShapeString(dt));
    return false;
  }
  const bool shared = db.size() == 1 && db[0] == 3;
  const bool per_ray = db.size() == 2 && db[0] == R && db[1] == 3;
  if (!shared && !per_ray) {
    SetInvalid(status, prefix + "'background' must be [3] or [R, 3] = [" + std::to_string(R) +
                           ", 3], got shape " + ShapeString(db));
    return false;
  }
  *rays = R;
  *samples = S;
  *background_per_ray = per_ray;
  return true;
}

bool ReadEarlyTermination(TF_OpKernelConstruction* ctx, const char* op, float* value, TF_Status* status) {
  TF_OpKernelConstruction_GetAttrFloat(ctx, "early_termination", value, status);
  if (TF_GetCode(status) != TF_OK) return false;
  if (!(*value >= 0.0f && *value <= 1.0f)) {
    SetInvalid(status, std::string(op) + ": 'early_termination' must be in [0, 1], got " + std::to_string(*value));
    return false;
  }
  return true;
}

// ---- forward ------------------------------------------------------------------------

struct VolumeRenderMetalKernel {
  float early_termination = 1e-4f;
  bool return_weights = false;
};

void* VolumeRenderMetalCreate(TF_OpKernelConstruction* ctx) {
  auto* kernel = new VolumeRenderMetalKernel;
  TF_Status* status = TF_NewStatus();
  if (ReadEarlyTermination(ctx, "MetalOpsVolumeRender", &kernel->early_termination, status)) {
    TF_Bool return_weights = 0;
    TF_OpKernelConstruction_GetAttrBool(ctx, "return_weights", &return_weights, status);
    kernel->return_weights = return_weights != 0;
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return kernel;
}

void VolumeRenderMetalDelete(void* kernel) { delete static_cast<VolumeRenderMetalKernel*>(kernel); }

void VolumeRenderMetalCompute(void* kernel_ptr, TF_OpKernelContext* ctx) {
  const auto* kernel = static_cast<const VolumeRenderMetalKernel*>(kernel_ptr);
  TF_Status* status = TF_NewStatus();
  TF_Tensor* in[4] = {nullptr, nullptr, nullptr, nullptr};
  TF_Tensor* out[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int i = 0; i < 4 && TF_GetCode(status) == TF_OK; ++i) TF_GetInput(ctx, i, &in[i], status);
  int64_t R = 0, S = 0;
  bool per_ray = false;
  if (TF_GetCode(status) == TF_OK &&
      CheckInputShapes("MetalOpsVolumeRender", in[0], in[1], in[2], in[3], &R, &S, &per_ray, status)) {
    const int64_t W = kernel->return_weights ? S : 0;
    const int64_t shapes[4][2] = {{R, 3}, {R, 0}, {R, 0}, {R, W}};
    const int ranks[4] = {2, 1, 1, 2};
    const int64_t counts[4] = {R * 3, R, R, R * W};
    for (int i = 0; i < 4 && TF_GetCode(status) == TF_OK; ++i) {
      out[i] = TF_AllocateOutput(ctx, i, TF_FLOAT, shapes[i], ranks[i], counts[i] * sizeof(float), status);
    }
    if (TF_GetCode(status) == TF_OK && R > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK
              ? mo::metal::GetPipeline(stream.currentCommandBuffer.device, "volume_render_forward_float32", status)
              : nil;
      if (pipeline != nil) {
        mo::VolumeRenderParams params = {};
        params.num_rays = R;
        params.num_samples = S;
        params.early_termination = kernel->early_termination;
        params.background_per_ray = per_ray ? 1 : 0;
        params.write_weights = kernel->return_weights ? 1 : 0;
        // Empty tensors may have no buffer (nil); the shader reads none of them then.
        id<MTLBuffer> buffers[8];
        for (int i = 0; i < 4; ++i) buffers[i] = mo::metal::BufferOf(in[i]);
        for (int i = 0; i < 4; ++i) buffers[4 + i] = mo::metal::BufferOf(out[i]);
        id<MTLBuffer> b0 = buffers[0], b1 = buffers[1], b2 = buffers[2], b3 = buffers[3];
        id<MTLBuffer> b4 = buffers[4], b5 = buffers[5], b6 = buffers[6], b7 = buffers[7];
        dispatch_sync(stream.queue, ^() {
          id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
          [encoder setBuffer:b0 offset:0 atIndex:0];
          [encoder setBuffer:b1 offset:0 atIndex:1];
          [encoder setBuffer:b2 offset:0 atIndex:2];
          [encoder setBuffer:b3 offset:0 atIndex:3];
          [encoder setBuffer:b4 offset:0 atIndex:4];
          [encoder setBuffer:b5 offset:0 atIndex:5];
          [encoder setBuffer:b6 offset:0 atIndex:6];
          [encoder setBuffer:b7 offset:0 atIndex:7];
          [encoder setBytes:&params length:sizeof(params) atIndex:8];
          mo::metal::Dispatch1D(encoder, pipeline, static_cast<uint64_t>(R));
          [encoder endEncoding];
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  for (TF_Tensor* t : in) TF_DeleteTensor(t);
  for (TF_Tensor* t : out) TF_DeleteTensor(t);
  TF_DeleteStatus(status);
}

// ---- backward -----------------------------------------------------------------------

struct VolumeRenderGradMetalKernel {
  float early_termination = 1e-4f;
};

void* VolumeRenderGradMetalCreate(TF_OpKernelConstruction* ctx) {
  auto* kernel = new VolumeRenderGradMetalKernel;
  TF_Status* status = TF_NewStatus();
  ReadEarlyTermination(ctx, "MetalOpsVolumeRenderGrad", &kernel->early_termination, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return kernel;
}

void VolumeRenderGradMetalDelete(void* kernel) { delete static_cast<VolumeRenderGradMetalKernel*>(kernel); }

void VolumeRenderGradMetalCompute(void* kernel_ptr, TF_OpKernelContext* ctx) {
  const auto* kernel = static_cast<const VolumeRenderGradMetalKernel*>(kernel_ptr);
  const char* op = "MetalOpsVolumeRenderGrad";
  TF_Status* status = TF_NewStatus();
  TF_Tensor* in[12] = {};
  TF_Tensor* out[3] = {nullptr, nullptr, nullptr};
  for (int i = 0; i < 12 && TF_GetCode(status) == TF_OK; ++i) TF_GetInput(ctx, i, &in[i], status);
  int64_t R = 0, S = 0;
  bool per_ray = false;
  if (TF_GetCode(status) == TF_OK && CheckInputShapes(op, in[0], in[1], in[2], in[3], &R, &S, &per_ray, status)) {
    const std::vector<int64_t> ray3 = {R, 3}, ray = {R};
    const std::vector<int64_t> weights = DimsOf(in[7]), grad_weights = DimsOf(in[11]);
    const bool weights_full = weights == std::vector<int64_t>{R, S};
    const bool weights_none = weights == std::vector<int64_t>{R, 0};
    if (DimsOf(in[4]) != ray3 || DimsOf(in[8]) != ray3) {
      SetInvalid(status, std::string(op) + ": 'out_rgb' and 'grad_rgb' must be [R, 3] = " + ShapeString(ray3));
    } else if (DimsOf(in[5]) != ray || DimsOf(in[6]) != ray || DimsOf(in[9]) != ray || DimsOf(in[10]) != ray) {
      SetInvalid(status, std::string(op) + ": 'depth', 'opacity', 'grad_depth' and 'grad_opacity' must be [R] = " +
                             ShapeString(ray));
    } else if (!(weights_full || weights_none) || grad_weights != weights) {
      SetInvalid(status, std::string(op) + ": 'weights' and 'grad_weights' must both be [R, S] = [" +
                             std::to_string(R) + ", " + std::to_string(S) + "] or [R, 0], got " +
                             ShapeString(weights) + " and " + ShapeString(grad_weights));
    }
    const bool has_weight_grad = weights_full && S > 0;
    const int64_t shapes[3][3] = {{R, S, 0}, {R, S, 3}, {R, 3, 0}};
    const int ranks[3] = {2, 3, 2};
    const int64_t counts[3] = {R * S, R * S * 3, R * 3};
    for (int i = 0; i < 3 && TF_GetCode(status) == TF_OK; ++i) {
      out[i] = TF_AllocateOutput(ctx, i, TF_FLOAT, shapes[i], ranks[i], counts[i] * sizeof(float), status);
    }
    if (TF_GetCode(status) == TF_OK && R > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK
              ? mo::metal::GetPipeline(stream.currentCommandBuffer.device, "volume_render_backward_float32", status)
              : nil;
      if (pipeline != nil) {
        mo::VolumeRenderParams params = {};
        params.num_rays = R;
        params.num_samples = S;
        params.early_termination = kernel->early_termination;
        params.background_per_ray = per_ray ? 1 : 0;
        params.has_weight_grad = has_weight_grad ? 1 : 0;
        // Buffers 0-11: the inputs in op order; 12-14: the outputs (empty tensors may be nil).
        NSMutableArray* buffers = [NSMutableArray arrayWithCapacity:15];
        for (int i = 0; i < 12; ++i) {
          id<MTLBuffer> b = mo::metal::BufferOf(in[i]);
          [buffers addObject:(b != nil ? (id)b : (id)[NSNull null])];
        }
        for (int i = 0; i < 3; ++i) {
          id<MTLBuffer> b = mo::metal::BufferOf(out[i]);
          [buffers addObject:(b != nil ? (id)b : (id)[NSNull null])];
        }
        dispatch_sync(stream.queue, ^() {
          id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
          for (NSUInteger i = 0; i < 15; ++i) {
            id object = buffers[i];
            [encoder setBuffer:(object == [NSNull null] ? nil : (id<MTLBuffer>)object) offset:0 atIndex:i];
          }
          [encoder setBytes:&params length:sizeof(params) atIndex:15];
          mo::metal::Dispatch1D(encoder, pipeline, static_cast<uint64_t>(R));
          [encoder endEncoding];
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  for (TF_Tensor* t : in) TF_DeleteTensor(t);
  for (TF_Tensor* t : out) TF_DeleteTensor(t);
  TF_DeleteStatus(status);
}

bool RegisterVolumeRenderMetalKernels() {
  {
    TF_Status* status = TF_NewStatus();
    TF_KernelBuilder* builder = TF_NewKernelBuilder("MetalOpsVolumeRender", "GPU", &VolumeRenderMetalCreate,
                                                    &VolumeRenderMetalCompute, &VolumeRenderMetalDelete);
    TF_KernelBuilder_TypeConstraint(builder, "T", TF_FLOAT, status);  // MSL has no double
    if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder("MetalOpsVolumeRenderMetal", builder, status);
    TF_DeleteStatus(status);
  }
  {
    TF_Status* status = TF_NewStatus();
    TF_KernelBuilder* builder =
        TF_NewKernelBuilder("MetalOpsVolumeRenderGrad", "GPU", &VolumeRenderGradMetalCreate,
                            &VolumeRenderGradMetalCompute, &VolumeRenderGradMetalDelete);
    TF_KernelBuilder_TypeConstraint(builder, "T", TF_FLOAT, status);
    if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder("MetalOpsVolumeRenderGradMetal", builder, status);
    TF_DeleteStatus(status);
  }
  return true;
}

const bool volume_render_metal_kernels_registered = RegisterVolumeRenderMetalKernels();

}  // namespace

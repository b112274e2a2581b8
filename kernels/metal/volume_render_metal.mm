// MetalOpsVolumeRender / MetalOpsVolumeRenderGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), float32, through the shared glue
// (metal_kernel.h). Shaders: kernels/metal/volume_render.metal (one thread per ray).
//
// Value checks: the shaders give invalid rays (negative/NaN sigma, decreasing
// t) NaN outputs; the host does not wait for the GPU to report them.
#import "kernels/metal/metal_kernel.h"

#include <string>
#include <vector>

#include "kernels/common/volume_render.h"

namespace {

using mo::metal::DimsOf;
using mo::metal::ShapeString;

// Same rules and messages as the CPU kernels: sigma [R,S], rgb [R,S,3],
// t [R,S+1], background [3] or [R,3]. Returns false (call failed) on mismatch.
bool CheckInputShapes(mo::metal::KernelCall& call, const char* op, TF_Tensor* sigma, TF_Tensor* rgb, TF_Tensor* t,
                      TF_Tensor* background, int64_t* rays, int64_t* samples, bool* background_per_ray) {
  const std::vector<int64_t> ds = DimsOf(sigma), dc = DimsOf(rgb), dt = DimsOf(t), db = DimsOf(background);
  const std::string prefix = std::string(op) + ": ";
  if (ds.size() != 2) {
    call.InvalidArgument(prefix + "'sigma' must be [R, S] (rank 2), got shape " + ShapeString(ds));
    return false;
  }
  const int64_t R = ds[0], S = ds[1];
  const std::string rs = std::to_string(R) + ", " + std::to_string(S);
  if (!(dc.size() == 3 && dc[0] == R && dc[1] == S && dc[2] == 3)) {
    call.InvalidArgument(prefix + "'rgb' must be [R, S, 3] = [" + rs + ", 3] to match 'sigma' " + ShapeString(ds) +
                         ", got shape " + ShapeString(dc));
    return false;
  }
  if (!(dt.size() == 2 && dt[0] == R && dt[1] == S + 1)) {
    call.InvalidArgument(prefix + "'t' must be [R, S + 1] = [" + std::to_string(R) + ", " + std::to_string(S + 1) +
                         "] (interval boundaries) to match 'sigma' " + ShapeString(ds) + ", got shape " +
                         ShapeString(dt));
    return false;
  }
  const bool shared = db.size() == 1 && db[0] == 3;
  const bool per_ray = db.size() == 2 && db[0] == R && db[1] == 3;
  if (!shared && !per_ray) {
    call.InvalidArgument(prefix + "'background' must be [3] or [R, 3] = [" + std::to_string(R) +
                         ", 3], got shape " + ShapeString(db));
    return false;
  }
  *rays = R;
  *samples = S;
  *background_per_ray = per_ray;
  return true;
}

float ReadEarlyTermination(mo::metal::AttrReader& attrs, const char* op) {
  const float value = attrs.Float("early_termination");
  if (attrs.ok() && !(value >= 0.0f && value <= 1.0f)) {
    attrs.InvalidArgument(std::string(op) + ": 'early_termination' must be in [0, 1], got " + std::to_string(value));
  }
  return value;
}

// ---- forward ------------------------------------------------------------------------

struct VolumeRenderMetalKernel {
  float early_termination = 1e-4f;
  bool return_weights = false;
};

void* CreateForward(TF_OpKernelConstruction* ctx) {
  auto* kernel = new VolumeRenderMetalKernel;
  mo::metal::AttrReader attrs(ctx);
  kernel->early_termination = ReadEarlyTermination(attrs, "MetalOpsVolumeRender");
  kernel->return_weights = attrs.Bool("return_weights");
  return kernel;
}

void DeleteForward(void* kernel) { delete static_cast<VolumeRenderMetalKernel*>(kernel); }

void Forward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& kernel = *static_cast<const VolumeRenderMetalKernel*>(kernel_ptr);
  TF_Tensor* in[4];
  for (int i = 0; i < 4; ++i) in[i] = call.Input(i);
  int64_t R = 0, S = 0;
  bool per_ray = false;
  if (!call.ok() || !CheckInputShapes(call, "MetalOpsVolumeRender", in[0], in[1], in[2], in[3], &R, &S, &per_ray)) {
    return;
  }
  // out_rgb [R, 3], depth [R], opacity [R], weights [R, S] or [R, 0].
  TF_Tensor* out[4] = {call.Output(0, TF_FLOAT, {R, 3}), call.Output(1, TF_FLOAT, {R}),
                       call.Output(2, TF_FLOAT, {R}), call.Output(3, TF_FLOAT, {R, kernel.return_weights ? S : 0})};
  if (!call.ok() || R == 0) return;
  const mo::VolumeRenderParams params =
      mo::make_volume_render_params(R, S, kernel.early_termination, per_ray, kernel.return_weights, false);
  call.Encode([&](mo::metal::Encoder& e) {
    id<MTLComputePipelineState> pipeline = e.Pipeline("volume_render", "volume_render_forward_float32");
    if (!e.ok()) return;
    for (int i = 0; i < 4; ++i) e.Tensor(i, in[i]);
    for (int i = 0; i < 4; ++i) e.Tensor(4 + i, out[i]);
    e.Value(8, params).Dispatch(pipeline, static_cast<uint64_t>(R));
  });
}

// ---- backward -----------------------------------------------------------------------

struct VolumeRenderGradMetalKernel {
  float early_termination = 1e-4f;
};

void* CreateBackward(TF_OpKernelConstruction* ctx) {
  auto* kernel = new VolumeRenderGradMetalKernel;
  mo::metal::AttrReader attrs(ctx);
  kernel->early_termination = ReadEarlyTermination(attrs, "MetalOpsVolumeRenderGrad");
  return kernel;
}

void DeleteBackward(void* kernel) { delete static_cast<VolumeRenderGradMetalKernel*>(kernel); }

void Backward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& kernel = *static_cast<const VolumeRenderGradMetalKernel*>(kernel_ptr);
  const char* op = "MetalOpsVolumeRenderGrad";
  TF_Tensor* in[12];
  for (int i = 0; i < 12; ++i) in[i] = call.Input(i);
  int64_t R = 0, S = 0;
  bool per_ray = false;
  if (!call.ok() || !CheckInputShapes(call, op, in[0], in[1], in[2], in[3], &R, &S, &per_ray)) return;
  const std::vector<int64_t> ray3 = {R, 3}, ray = {R};
  const std::vector<int64_t> weights = DimsOf(in[7]), grad_weights = DimsOf(in[11]);
  const bool weights_full = weights == std::vector<int64_t>{R, S};
  const bool weights_none = weights == std::vector<int64_t>{R, 0};
  if (DimsOf(in[4]) != ray3 || DimsOf(in[8]) != ray3) {
    call.InvalidArgument(std::string(op) + ": 'out_rgb' and 'grad_rgb' must be [R, 3] = " + ShapeString(ray3));
  } else if (DimsOf(in[5]) != ray || DimsOf(in[6]) != ray || DimsOf(in[9]) != ray || DimsOf(in[10]) != ray) {
    call.InvalidArgument(std::string(op) + ": 'depth', 'opacity', 'grad_depth' and 'grad_opacity' must be [R] = " +
                         ShapeString(ray));
  } else if (!(weights_full || weights_none) || grad_weights != weights) {
    call.InvalidArgument(std::string(op) + ": 'weights' and 'grad_weights' must both be [R, S] = [" +
                         std::to_string(R) + ", " + std::to_string(S) + "] or [R, 0], got " +
                         ShapeString(weights) + " and " + ShapeString(grad_weights));
  }
  // grad_sigma [R, S], grad_rgb [R, S, 3], grad_background [R, 3].
  TF_Tensor* out[3] = {call.Output(0, TF_FLOAT, {R, S}), call.Output(1, TF_FLOAT, {R, S, 3}),
                       call.Output(2, TF_FLOAT, {R, 3})};
  if (!call.ok() || R == 0) return;
  const mo::VolumeRenderParams params =
      mo::make_volume_render_params(R, S, kernel.early_termination, per_ray, false, weights_full && S > 0);
  call.Encode([&](mo::metal::Encoder& e) {
    id<MTLComputePipelineState> pipeline = e.Pipeline("volume_render", "volume_render_backward_float32");
    if (!e.ok()) return;
    // Buffers 0-11: the inputs in op order; 12-14: the outputs.
    for (int i = 0; i < 12; ++i) e.Tensor(i, in[i]);
    for (int i = 0; i < 3; ++i) e.Tensor(12 + i, out[i]);
    e.Value(15, params).Dispatch(pipeline, static_cast<uint64_t>(R));
  });
}

bool Register() {
  // MSL has no double: float32 only.
  mo::metal::RegisterKernel("MetalOpsVolumeRender", TF_FLOAT, &CreateForward, &mo::metal::Compute<Forward>,
                            &DeleteForward);
  mo::metal::RegisterKernel("MetalOpsVolumeRenderGrad", TF_FLOAT, &CreateBackward, &mo::metal::Compute<Backward>,
                            &DeleteBackward);
  return true;
}

const bool registered = Register();

}  // namespace

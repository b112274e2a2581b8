// C-ABI entry points for testing the FusedConv2D / FusedActivationGrad CUDA
// kernels without TensorFlow (tests/cuda/test_fused_conv2d_cuda.py drives them
// with CuPy device pointers). Attributes go through the op's own checks
// (kernels/fused_conv2d/fused_conv2d.h), so the geometry is the one the op computes.
//
// Each returns 0 on success, 1 for an argument the op's checks reject, 2 for a
// failed CUDA / cuBLAS call; metal_ops_fused_conv2d_last_error() then gives
// the message (of the calling thread's last failure).
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/last_error.h"
#include "kernels/fused_conv2d/fused_conv2d.h"

namespace {

// input_shape, filter_shape: 4 sizes; strides, dilations: 4 (NHWC);
// explicit_paddings: 8 when padding is "EXPLICIT", else nullptr. The
// attributes are read and checked by the op's ReadAttrs.
mo::Result GeometryOf(const int64_t* input_shape, const int64_t* filter_shape, const int64_t* strides,
                      const int64_t* dilations, const char* padding, const int64_t* explicit_paddings,
                      const char* activation, float alpha, mo::fused_conv2d::Attrs* attrs,
                      mo::fused_conv2d::ConvGeometry* g) {
  auto get = [&](const char* name, auto* value) -> bool {
    using T = std::remove_pointer_t<decltype(value)>;
    const std::string attr = name;
    if constexpr (std::is_same_v<T, std::string>) {
      *value = attr == "padding" ? padding : attr == "activation" ? activation : "NHWC";
    } else if constexpr (std::is_same_v<T, float>) {
      *value = alpha;
    } else if constexpr (std::is_same_v<T, mo::Dims>) {
      if (attr == "strides") *value = mo::Dims(strides, strides + 4);
      if (attr == "dilations") *value = mo::Dims(dilations, dilations + 4);
      if (attr == "explicit_paddings") {
        *value = explicit_paddings != nullptr ? mo::Dims(explicit_paddings, explicit_paddings + 8) : mo::Dims();
      }
    } else {
      *value = 0;  // num_bias, num_residual
    }
    return true;
  };
  MO_RETURN_IF_INVALID(mo::fused_conv2d::ReadAttrs(get, attrs));
  return mo::fused_conv2d::Geometry(*attrs, mo::Dims(input_shape, input_shape + 4),
                                    mo::Dims(filter_shape, filter_shape + 4), g);
}

}  // namespace

extern "C" {

const char* metal_ops_fused_conv2d_last_error() { return last_error.c_str(); }

// The cuBLAS soname the convolution opens at its first GEMM.
const char* metal_ops_cublas_soname() { return mo::cuda::CublasSoname(); }

// The output shape (4 sizes) and the plan the TF kernel uses
// (mo::cuda::PlanFusedConv2D), with its budgets or, where <= 0, the defaults.
int metal_ops_fused_conv2d_plan(const int64_t* input_shape, const int64_t* filter_shape, const int64_t* strides,
                                const int64_t* dilations, const char* padding, const int64_t* explicit_paddings,
                                int64_t max_patch_bytes, int64_t max_chunk_output_bytes, int64_t* output_shape,
                                int64_t* chunk_rows, int64_t* patch_floats) {
  mo::fused_conv2d::Attrs attrs;
  mo::fused_conv2d::ConvGeometry g;
  const mo::Result r =
      GeometryOf(input_shape, filter_shape, strides, dilations, padding, explicit_paddings, "none", 0.0f, &attrs, &g);
  if (!r.ok) return Fail(1, r.message);
  const mo::cuda::FusedConv2DPlan plan = mo::cuda::PlanFusedConv2D(
      g, max_patch_bytes > 0 ? max_patch_bytes : mo::cuda::kFusedConv2DMaxPatchBytes,
      max_chunk_output_bytes > 0 ? max_chunk_output_bytes : mo::cuda::kFusedConv2DChunkOutputBytes);
  const mo::Dims out = g.output_dims();
  for (int d = 0; d < 4; ++d) output_shape[d] = out[d];
  *chunk_rows = plan.chunk_rows;
  *patch_floats = plan.patch_floats;
  return 0;
}

// output = act(conv2d(input, filter) + bias + residual); bias / residual may
// be nullptr; patches: patch_floats floats (the plan's, or any other size the
// launcher accepts), chunk_rows output rows per chunk.
int metal_ops_fused_conv2d_forward_float32(const float* input, const float* filter, const float* bias,
                                           const float* residual, float* output, float* patches,
                                           int64_t patch_floats, int64_t chunk_rows, const int64_t* input_shape,
                                           const int64_t* filter_shape, const int64_t* strides,
                                           const int64_t* dilations, const char* padding,
                                           const int64_t* explicit_paddings, const char* activation, float alpha,
                                           int allow_tf32, cudaStream_t stream) {
  mo::fused_conv2d::Attrs attrs;
  mo::fused_conv2d::ConvGeometry g;
  const mo::Result r = GeometryOf(input_shape, filter_shape, strides, dilations, padding,
                                                explicit_paddings, activation, alpha, &attrs, &g);
  if (!r.ok) return Fail(1, r.message);
  mo::cuda::FusedConv2DParams p{};
  p.input = input;
  p.filter = filter;
  p.bias = bias;
  p.residual = residual;
  p.output = output;
  p.patches = patches;
  p.patch_floats = patch_floats;
  p.chunk_rows = chunk_rows;
  p.act = attrs.activation;
  p.alpha = attrs.leaky_relu_alpha;
  p.allow_tf32 = allow_tf32 != 0;
  const mo::cuda::GpuStatus s = mo::cuda::LaunchFusedConv2D(g, p, stream);
  return StatusCode(s, 2);
}

// backprops = gradients * act'(z); features (z) may be nullptr where the
// derivative follows from outputs (the op's attribute check decides).
int metal_ops_fused_activation_grad_float32(const float* gradients, const float* outputs, const float* features,
                                            float* backprops, int64_t n, const char* activation, float alpha,
                                            cudaStream_t stream) {
  const int64_t num_features = features != nullptr ? 1 : 0;
  mo::fused_activation_grad::Attrs attrs;
  // The op's attribute reader, over this call's arguments.
  auto get = [&](const char* name, auto* value) -> bool {
    using T = std::remove_pointer_t<decltype(value)>;
    const std::string attr = name;
    if constexpr (std::is_same_v<T, std::string>) {
      if (attr == "activation") *value = activation;
      return attr == "activation";
    } else if constexpr (std::is_same_v<T, float>) {
      if (attr == "leaky_relu_alpha") *value = alpha;
      return attr == "leaky_relu_alpha";
    } else {
      if (attr == "num_features") *value = num_features;
      return attr == "num_features";
    }
  };
  const mo::Result r = mo::fused_activation_grad::ReadAttrs(get, &attrs);
  if (!r.ok) return Fail(1, r.message);
  const cudaError_t err =
      mo::cuda::LaunchFusedActivationGrad(gradients, outputs, features, backprops, n, attrs.activation,
                                          attrs.leaky_relu_alpha, stream);
  if (err != cudaSuccess) return Fail(2, std::string("FusedActivationGrad launch failed: ") + cudaGetErrorString(err));
  return 0;
}

}  // extern "C"

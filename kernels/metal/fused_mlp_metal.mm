// MetalOpsFusedMLP / MetalOpsFusedMLPGrad on the Metal PluggableDevice ("GPU"
// with tensorflow-metal), kernel C API, through the shared glue
// (metal_kernel.h). Shaders: fused_mlp.metal (simdgroup_matrix, Apple7+ GPUs);
// layout, buffer indices and threadgroup geometry: kernels/common/fused_mlp.h; checks:
// kernels/spec/fused_mlp_spec.h. The shim test (tests/test_fused_mlp_metal_shim.py)
// runs the shaders in the order this file encodes them; what has run where:
// docs/METAL_COMPAT.md.
//
// Forward: the kernels and biases packed into zero-padded blocks (one small
// dispatch each), then one dispatch of row tiles. Backward: the kernels
// packed, the float32 partials zeroed, one threadgroup per partition of the
// row tiles writing its weight- and bias-gradient sums, then per layer the
// partials added in partition order: no atomics, bitwise deterministic.
#import "kernels/metal/metal_kernel.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/common/activations.h"
#include "kernels/common/fused_mlp.h"
#include "kernels/spec/fused_mlp_spec.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

using mo::metal::DimsOf;

const char* DtypeName(TF_DataType dtype) { return dtype == TF_HALF ? "float16" : "float32"; }

std::string Shader(const char* kind, int width, TF_DataType dtype) {
  char name[64];
  std::snprintf(name, sizeof(name), "fused_mlp_%s_w%d_%s", kind, width, DtypeName(dtype));
  return name;
}

// `count` tensors from input `first` on, and their shapes.
std::vector<TF_Tensor*> Inputs(mo::metal::KernelCall& call, int first, int count, std::vector<mo::checks::Dims>* dims) {
  std::vector<TF_Tensor*> tensors;
  for (int i = 0; i < count && call.ok(); ++i) {
    tensors.push_back(call.Input(first + i));
    if (call.ok()) dims->push_back(DimsOf(tensors.back()));
  }
  return tensors;
}

// The dispatch geometry (kernels/common/fused_mlp.h) for pipelines running up to
// `max_threads` threads per threadgroup; false, failing the call, if none fits.
bool Geometry(mo::metal::KernelCall& call, const mo::fused_mlp::Net& net, const mo::fused_mlp::Attrs& a, int64_t n,
              TF_DataType dtype, bool backward, mo::FusedMlpParams* p,
              int64_t max_threads = 4 * MO_FUSED_MLP_SIMD_WIDTH) {
  if (mo::fused_mlp_params(n, int(net.in_dim), int(net.width), int(net.out_dim), net.hidden_layers, a.activation,
                           a.output_activation, a.leaky_relu_alpha, int(TF_DataTypeSize(dtype)), backward, p,
                           max_threads)) {
    return true;
  }
  call.Fail(TF_UNIMPLEMENTED, "FusedMLP: no Metal threadgroup geometry fits this network on this GPU (its pipeline "
                              "runs at most " + std::to_string(max_threads) + " threads per threadgroup)");
  return false;
}

// The geometry again when the tile pipeline runs fewer threads per
// threadgroup than it asks for (fewer SIMD-groups then).
bool FitGeometry(mo::metal::KernelCall& call, const mo::fused_mlp::Net& net, const mo::fused_mlp::Attrs& a,
                 int64_t n, TF_DataType dtype, bool backward, id<MTLComputePipelineState> tiles,
                 mo::FusedMlpParams* p) {
  if (!call.ok() || tiles == nil) return false;
  const int64_t max_threads = static_cast<int64_t>(tiles.maxTotalThreadsPerThreadgroup);
  if (int64_t(p->simdgroups) * MO_FUSED_MLP_SIMD_WIDTH <= max_threads) return true;
  return Geometry(call, net, a, n, dtype, backward, p, max_threads);
}

// Whether this GPU has simdgroup_matrix (else the call fails saying so).
// Checked before any shader library is compiled: a GPU without it (a
// paravirtual one in CI) would otherwise fail compiling the library.
bool GpuFamilyOk(mo::metal::KernelCall& call) {
  id<MTLDevice> device = call.Device();
  if (!call.ok() || device == nil) return false;
  if (![device supportsFamily:MTLGPUFamilyApple7]) {
    call.Fail(TF_UNIMPLEMENTED,
              "FusedMLP's Metal kernel needs an Apple-silicon GPU (MTLGPUFamilyApple7: simdgroup_matrix); run it "
              "on the CPU with tf.device('/CPU:0')");
    return false;
  }
  return true;
}

// Whether the simdgroup_matrix shaders can run on this GPU with these
// threadgroups (else the call fails saying why). Called before anything is
// encoded, so a call that cannot run encodes nothing.
bool ShaderPipelinesOk(mo::metal::KernelCall& call, id<MTLComputePipelineState> tiles, const mo::FusedMlpParams& p) {
  id<MTLDevice> device = call.Device();
  if (!call.ok() || device == nil || tiles == nil) return false;
  if (tiles.threadExecutionWidth != MO_FUSED_MLP_SIMD_WIDTH) {
    call.Fail(TF_UNIMPLEMENTED, "FusedMLP's Metal kernel needs 32-wide SIMD-groups; this GPU's are " +
                                    std::to_string(tiles.threadExecutionWidth));
    return false;
  }
  return call.CheckThreadgroups(tiles, uint32_t(p.simdgroups) * MO_FUSED_MLP_SIMD_WIDTH, uint32_t(p.tg_bytes));
}

// The op's outputs, in one place: y [N, out_dim] and hidden [hidden_layers,
// N, W] (every hidden layer's output, which the backward reads).
bool ForwardOutputs(mo::metal::KernelCall& call, const mo::fused_mlp::Net& net, int64_t n, TF_DataType dtype,
                    TF_Tensor** y, TF_Tensor** hidden) {
  *y = call.Output(0, dtype, {n, net.out_dim});
  *hidden = call.Output(1, dtype, {int64_t(net.hidden_layers), n, net.width});
  return call.ok();
}

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const auto& attrs = *static_cast<const mo::fused_mlp::Attrs*>(kernel);
  const int num = (TF_NumInputs(call.context()) - 1) / 2;  // x, N kernels, N biases
  TF_Tensor* x = call.Input(0);
  std::vector<mo::checks::Dims> kernel_dims, bias_dims;
  const std::vector<TF_Tensor*> kernels = Inputs(call, 1, num, &kernel_dims);
  const std::vector<TF_Tensor*> biases = Inputs(call, 1 + num, num, &bias_dims);
  mo::fused_mlp::Net net;
  if (!call.ok() || !call.Check(mo::fused_mlp::Shapes(DimsOf(x), kernel_dims, bias_dims, &net))) return;
  const TF_DataType dtype = TF_TensorType(x);
  const int64_t n = TF_Dim(x, 0);
  TF_Tensor *y = nullptr, *hidden = nullptr;
  mo::FusedMlpParams p;
  if (!ForwardOutputs(call, net, n, dtype, &y, &hidden) || !Geometry(call, net, attrs, n, dtype, false, &p) || n == 0) {
    return;
  }
  TF_Tensor* packed_w = call.Temp(dtype, {mo::fused_mlp_weights_total(p.in_pad, p.width, p.out_pad, num - 1)});
  TF_Tensor* packed_b = call.Temp(dtype, {mo::fused_mlp_biases_total(p.width, p.out_pad, num - 1)});
  if (!call.ok() || !GpuFamilyOk(call)) return;
  id<MTLComputePipelineState> pack = call.Pipeline("fused_mlp", std::string("fused_mlp_pack_") + DtypeName(dtype));
  id<MTLComputePipelineState> tiles = call.Pipeline("fused_mlp", Shader("forward", p.width, dtype));
  if (!FitGeometry(call, net, attrs, n, dtype, false, tiles, &p) || !ShaderPipelinesOk(call, tiles, p)) return;
  call.Encode([&](mo::metal::Encoder& e) {
    for (int l = 0; l < num; ++l) {
      const mo::FusedMlpPackParams qw = mo::fused_mlp_pack_params(p, l, false);
      const mo::FusedMlpPackParams qb = mo::fused_mlp_pack_params(p, l, true);
      e.Tensor(mo::kFusedMlpPackSrc, kernels[l]).Tensor(mo::kFusedMlpPackDst, packed_w).Value(mo::kFusedMlpPackParams, qw);
      e.Dispatch(pack, uint64_t(qw.rows_pad) * qw.cols_pad);
      e.Tensor(mo::kFusedMlpPackSrc, biases[l]).Tensor(mo::kFusedMlpPackDst, packed_b).Value(mo::kFusedMlpPackParams, qb);
      e.Dispatch(pack, uint64_t(qb.cols_pad));
    }
    e.Tensor(mo::kFusedMlpForwardX, x).Tensor(mo::kFusedMlpForwardWeights, packed_w).Tensor(mo::kFusedMlpForwardBiases, packed_b);
    e.Tensor(mo::kFusedMlpForwardY, y).Tensor(mo::kFusedMlpForwardHidden, hidden).Value(mo::kFusedMlpForwardParams, p);
    e.DispatchThreadgroups(tiles, std::min<uint64_t>(uint64_t(p.num_tiles), mo::metal::kMaxThreadgroups),
                           uint32_t(p.simdgroups) * MO_FUSED_MLP_SIMD_WIDTH, uint32_t(p.tg_bytes));
  });
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const auto& attrs = *static_cast<const mo::fused_mlp::Attrs*>(kernel);
  const int num = TF_NumInputs(call.context()) - 4;  // grad_y, x, N kernels, y, hidden
  TF_Tensor* dy = call.Input(0);
  TF_Tensor* x = call.Input(1);
  std::vector<mo::checks::Dims> kernel_dims, bias_dims;
  const std::vector<TF_Tensor*> kernels = Inputs(call, 2, num, &kernel_dims);
  TF_Tensor* y = call.Input(2 + num);
  TF_Tensor* hidden = call.Input(3 + num);
  if (!call.ok()) return;
  for (const mo::checks::Dims& k : kernel_dims) bias_dims.push_back({k.size() == 2 ? k[1] : 0});
  mo::fused_mlp::Net net;
  if (!call.Check(mo::fused_mlp::Shapes(DimsOf(x), kernel_dims, bias_dims, &net))) return;
  const int64_t n = TF_Dim(x, 0);
  if (!call.Check(mo::fused_mlp::GradShapes(net, n, DimsOf(dy), DimsOf(y), DimsOf(hidden)))) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, {n, net.in_dim});
  std::vector<TF_Tensor*> grad_kernels, grad_biases;
  for (int l = 0; l < num; ++l) grad_kernels.push_back(call.Output(1 + l, dtype, kernel_dims[l]));
  for (int l = 0; l < num; ++l) grad_biases.push_back(call.Output(1 + num + l, dtype, bias_dims[l]));
  mo::FusedMlpParams p;
  if (!call.ok() || !Geometry(call, net, attrs, n, dtype, true, &p)) return;
  TF_Tensor* packed_w = call.Temp(dtype, {mo::fused_mlp_weights_total(p.in_pad, p.width, p.out_pad, num - 1)});
  if (!call.ok() || !GpuFamilyOk(call)) return;
  id<MTLComputePipelineState> pack = call.Pipeline("fused_mlp", std::string("fused_mlp_pack_") + DtypeName(dtype));
  id<MTLComputePipelineState> tiles = call.Pipeline("fused_mlp", Shader("backward", p.width, dtype));
  id<MTLComputePipelineState> reduce = call.Pipeline("fused_mlp", std::string("fused_mlp_reduce_") + DtypeName(dtype));
  if (!FitGeometry(call, net, attrs, n, dtype, true, tiles, &p) || !ShaderPipelinesOk(call, tiles, p)) return;
  // After the geometry is final: the partitions depend on its row tiles.
  TF_Tensor* partials = call.Temp(TF_FLOAT, {int64_t(p.partitions) * p.params_pad});
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Zero(partials);
    for (int l = 0; l < num; ++l) {
      const mo::FusedMlpPackParams q = mo::fused_mlp_pack_params(p, l, false);
      e.Tensor(mo::kFusedMlpPackSrc, kernels[l]).Tensor(mo::kFusedMlpPackDst, packed_w).Value(mo::kFusedMlpPackParams, q);
      e.Dispatch(pack, uint64_t(q.rows_pad) * q.cols_pad);
    }
    if (n > 0) {
      e.Tensor(mo::kFusedMlpBackwardDy, dy).Tensor(mo::kFusedMlpBackwardX, x).Tensor(mo::kFusedMlpBackwardY, y);
      e.Tensor(mo::kFusedMlpBackwardHidden, hidden).Tensor(mo::kFusedMlpBackwardWeights, packed_w);
      e.Tensor(mo::kFusedMlpBackwardPartials, partials).Tensor(mo::kFusedMlpBackwardDx, dx).Value(mo::kFusedMlpBackwardParams, p);
      e.DispatchThreadgroups(tiles, uint64_t(p.partitions), uint32_t(p.simdgroups) * MO_FUSED_MLP_SIMD_WIDTH,
                             uint32_t(p.tg_bytes));
    }
    for (int l = 0; l < num; ++l) {
      const mo::FusedMlpReduceParams q = mo::fused_mlp_reduce_params(p, l);
      e.Tensor(mo::kFusedMlpReducePartials, partials).Tensor(mo::kFusedMlpReduceGradKernel, grad_kernels[l]);
      e.Tensor(mo::kFusedMlpReduceGradBias, grad_biases[l]).Value(mo::kFusedMlpReduceParams, q);
      e.Dispatch(reduce, uint64_t(q.rows) * q.cols + q.cols);
    }
  });
}

const bool registered_forward = mo::metal::RegisterWithAttrs<mo::fused_mlp::Attrs>(
    "MetalOpsFusedMLP", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<mo::fused_mlp::Attrs>(
    "MetalOpsFusedMLPGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace

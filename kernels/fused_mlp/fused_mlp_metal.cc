// FusedMLP on Metal: the op's Metal plans (shaders: fused_mlp.metal,
// simdgroup_matrix, Apple7+ GPUs; layout, buffer indices and threadgroup
// geometry: fused_mlp.h; every Metal path runs them: the CPU kernels'
// offload, the MSL shim, tensorflow-metal) and, on macOS, MetalOpsFusedMLP /
// MetalOpsFusedMLPGrad on the Metal PluggableDevice ("GPU" with
// tensorflow-metal), kernel C API, through the shared glue
// (kernels/metal/metal_kernel.h). What has run where: docs/METAL_COMPAT.md.
//
// Forward: the kernels and biases packed into zero-padded blocks (one small
// dispatch each), then one dispatch of row tiles. Backward: the float32
// partials zeroed, the kernels packed, one threadgroup per partition of the
// row tiles writing its weight- and bias-gradient sums, then per layer the
// partials added in partition order: no atomics, bitwise deterministic.
#include <cstdio>
#include <string>

#include "kernels/fused_mlp/fused_mlp.h"

namespace mo {
namespace metal_plan {
namespace {

// fused_mlp_<pack|reduce>_<dtype>: the shader's instantiations (the row tiles': FusedMlpTileShader).
std::string Shader(const char* kind, Dtype dtype) { return std::string("fused_mlp_") + kind + "_" + DtypeSuffix(dtype); }

uint64_t ElementBytes(Dtype dtype) { return dtype == Dtype::kFloat16 ? 2 : 4; }
uint32_t Threads(const FusedMlpParams& p) { return uint32_t(p.simdgroups) * MO_FUSED_MLP_SIMD_WIDTH; }

// Packs layer l's kernel (or bias) from tensor slot `src` into scratch `dst`.
void Pack(PlanBuilder& b, const FusedMlpParams& p, Dtype dtype, int l, bool bias, int src, int dst) {
  const FusedMlpPackParams q = fused_mlp_pack_params(p, l, bias);
  b.Threads("fused_mlp", Shader("pack", dtype), uint64_t(q.rows_pad) * uint64_t(q.cols_pad))
      .Tensor(kFusedMlpPackSrc, src)
      .Scratch(kFusedMlpPackDst, dst)
      .Value(kFusedMlpPackParams, q);
}

}  // namespace

std::string FusedMlpTileShader(int width, bool backward, Dtype dtype) {
  char name[64];
  std::snprintf(name, sizeof(name), "fused_mlp_%s_w%d_%s", backward ? "backward" : "forward", width,
                DtypeSuffix(dtype));
  return name;
}

Plan FusedMlpForward(const FusedMlpParams& p, Dtype dtype) {
  const FusedMlpSlots s = {p.hidden_layers + 1};
  PlanBuilder b(s.forward_slots());
  if (p.n == 0) return b.Finish();
  b.NeedsSimdgroupMatrix();
  const uint64_t e = ElementBytes(dtype);
  const int weights = b.NewScratch(uint64_t(fused_mlp_weights_total(p.in_pad, p.width, p.out_pad, p.hidden_layers)) * e);
  const int biases = b.NewScratch(uint64_t(fused_mlp_biases_total(p.width, p.out_pad, p.hidden_layers)) * e);
  for (int l = 0; l < s.layers; ++l) {
    Pack(b, p, dtype, l, false, s.kernel(l), weights);
    Pack(b, p, dtype, l, true, s.bias(l), biases);
  }
  const uint64_t groups = uint64_t(p.num_tiles) < kFusedMlpMaxThreadgroups ? uint64_t(p.num_tiles)
                                                                           : kFusedMlpMaxThreadgroups;
  b.Threadgroups("fused_mlp", FusedMlpTileShader(p.width, false, dtype), groups, Threads(p), uint32_t(p.tg_bytes))
      .Tensor(kFusedMlpForwardX, s.x())
      .Scratch(kFusedMlpForwardWeights, weights)
      .Scratch(kFusedMlpForwardBiases, biases)
      .Output(kFusedMlpForwardY, s.y())
      .Output(kFusedMlpForwardHidden, s.hidden())
      .Value(kFusedMlpForwardParams, p);
  return b.Finish();
}

Plan FusedMlpBackward(const FusedMlpParams& p, Dtype dtype) {
  const FusedMlpSlots s = {p.hidden_layers + 1};
  PlanBuilder b(s.backward_slots());
  b.NeedsSimdgroupMatrix();
  const uint64_t e = ElementBytes(dtype);
  const int weights = b.NewScratch(uint64_t(fused_mlp_weights_total(p.in_pad, p.width, p.out_pad, p.hidden_layers)) * e);
  const uint64_t partial_bytes = uint64_t(p.partitions) * uint64_t(p.params_pad) * sizeof(float);
  const int partials = b.NewScratch(partial_bytes);
  b.ZeroScratch(partials, partial_bytes);
  for (int l = 0; l < s.layers; ++l) Pack(b, p, dtype, l, false, s.grad_kernel_input(l), weights);
  if (p.n > 0) {
    b.Threadgroups("fused_mlp", FusedMlpTileShader(p.width, true, dtype), uint64_t(p.partitions), Threads(p),
                   uint32_t(p.tg_bytes))
        .Tensor(kFusedMlpBackwardDy, s.grad_y())
        .Tensor(kFusedMlpBackwardX, s.grad_x_input())
        .Tensor(kFusedMlpBackwardY, s.grad_y_input())
        .Tensor(kFusedMlpBackwardHidden, s.grad_hidden_input())
        .Scratch(kFusedMlpBackwardWeights, weights)
        .Scratch(kFusedMlpBackwardPartials, partials)
        .Output(kFusedMlpBackwardDx, s.grad_x())
        .Value(kFusedMlpBackwardParams, p);
  }
  for (int l = 0; l < s.layers; ++l) {
    const FusedMlpReduceParams q = fused_mlp_reduce_params(p, l);
    b.Threads("fused_mlp", Shader("reduce", dtype), uint64_t(q.rows) * uint64_t(q.cols) + uint64_t(q.cols))
        .Scratch(kFusedMlpReducePartials, partials)
        .Output(kFusedMlpReduceGradKernel, s.grad_kernel(l))
        .Output(kFusedMlpReduceGradBias, s.grad_bias(l))
        .Value(kFusedMlpReduceParams, q);
  }
  return b.Finish();
}

}  // namespace metal_plan
}  // namespace mo

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

#include <vector>

#include "kernels/common/activations.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

using mo::metal::DimsOf;

// The row-tile shader's host name (the plans').
std::string TileShader(int width, bool backward, TF_DataType dtype) {
  return mo::metal_plan::FusedMlpTileShader(width, backward, mo::metal::PlanDtype(dtype));
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

// The dispatch geometry (kernels/fused_mlp/fused_mlp.h) for pipelines running up to
// `max_threads` threads per threadgroup; false, failing the call, if none fits.
bool Geometry(mo::metal::KernelCall& call, const mo::fused_mlp::Net& net, const mo::fused_mlp::Attrs& a, int64_t n,
              TF_DataType dtype, bool backward, mo::FusedMlpParams* p,
              int64_t max_threads = 4 * MO_FUSED_MLP_SIMD_WIDTH) {
  if (mo::fused_mlp_params(n, int(net.in_dim), int(net.width), int(net.out_dim), net.hidden_layers, a.activation,
                           a.output_activation, a.leaky_relu_alpha, int(TF_DataTypeSize(dtype)), backward, p,
                           max_threads)) {
    return true;
  }
  call.Refuse("fused_mlp", "no Metal threadgroup geometry fits this network (the pipeline runs at most " +
                               std::to_string(max_threads) + " threads per threadgroup)");
  return false;
}

// The geometry again when the tile pipeline runs fewer threads per
// threadgroup than it asks for (fewer SIMD-groups then).
bool FitGeometry(mo::metal::KernelCall& call, const mo::fused_mlp::Net& net, const mo::fused_mlp::Attrs& a,
                 int64_t n, TF_DataType dtype, bool backward, const mo::mtl::Pipeline* tiles,
                 mo::FusedMlpParams* p) {
  if (!call.ok() || tiles == nullptr) return false;
  const int64_t max_threads = static_cast<int64_t>(tiles->MaxTotalThreadsPerThreadgroup());
  if (int64_t(p->simdgroups) * MO_FUSED_MLP_SIMD_WIDTH <= max_threads) return true;
  return Geometry(call, net, a, n, dtype, backward, p, max_threads);
}

// Whether this GPU has simdgroup_matrix (else the call fails saying so).
// Checked before any shader library is compiled: a GPU without it (a
// paravirtual one in CI) would otherwise fail compiling the library. Where
// tensorflow-metal's GPU is the system's, the kernels are not registered for
// it then (metal_rules.h GpuRegistrationRefusal); this covers another GPU.
bool GpuFamilyOk(mo::metal::KernelCall& call) {
  mo::mtl::Device* device = call.Device();
  if (device == nullptr) return false;
  if (!device->GetLimits().apple7) {
    call.Refuse("fused_mlp", "the shaders need an Apple-silicon GPU (MTLGPUFamilyApple7: simdgroup_matrix)");
    return false;
  }
  return true;
}

// Whether the simdgroup_matrix shaders can run on this GPU with these
// threadgroups (else the call fails saying why). Called before anything is
// encoded, so a call that cannot run encodes nothing.
bool ShaderPipelinesOk(mo::metal::KernelCall& call, const mo::mtl::Pipeline* tiles, const mo::FusedMlpParams& p) {
  if (!call.ok() || tiles == nullptr) return false;
  return call.CheckSimdWidth(tiles) &&
         call.CheckThreadgroups(tiles, uint32_t(p.simdgroups) * MO_FUSED_MLP_SIMD_WIDTH, uint32_t(p.tg_bytes));
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
  if (!GpuFamilyOk(call)) return;
  const mo::mtl::Pipeline* tiles = call.Pipeline("fused_mlp", TileShader(p.width, false, dtype));
  if (!FitGeometry(call, net, attrs, n, dtype, false, tiles, &p) || !ShaderPipelinesOk(call, tiles, p)) return;
  std::vector<mo::metal::KernelCall::PlanSlot> slots = {x};
  for (TF_Tensor* k : kernels) slots.push_back(k);
  for (TF_Tensor* b : biases) slots.push_back(b);
  slots.push_back(y);
  slots.push_back(hidden);
  call.RunPlan(mo::metal_plan::FusedMlpForward(p, mo::metal::PlanDtype(dtype)), slots);
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
  if (!GpuFamilyOk(call)) return;
  const mo::mtl::Pipeline* tiles = call.Pipeline("fused_mlp", TileShader(p.width, true, dtype));
  if (!FitGeometry(call, net, attrs, n, dtype, true, tiles, &p) || !ShaderPipelinesOk(call, tiles, p)) return;
  // The partitions (and so the plan's partials) follow the final geometry.
  std::vector<mo::metal::KernelCall::PlanSlot> slots = {dy, x};
  for (TF_Tensor* k : kernels) slots.push_back(k);
  slots.push_back(y);
  slots.push_back(hidden);
  slots.push_back(dx);
  for (TF_Tensor* k : grad_kernels) slots.push_back(k);
  for (TF_Tensor* b : grad_biases) slots.push_back(b);
  call.RunPlan(mo::metal_plan::FusedMlpBackward(p, mo::metal::PlanDtype(dtype)), slots);
}

const bool registered_forward = mo::metal::RegisterWithAttrs<mo::fused_mlp::Attrs>(
    "MetalOpsFusedMLP", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<mo::fused_mlp::Attrs>(
    "MetalOpsFusedMLPGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace
#endif  // __APPLE__

// FusedMLP's Metal plans (kernels/fused_mlp/fused_mlp_plan.h).
#include "kernels/fused_mlp/fused_mlp_plan.h"

#include <cstdio>
#include <string>

namespace mo {
namespace metal_plan {
namespace {

// fused_mlp_<kind>_w<W>_<dtype>, fused_mlp_<pack|reduce>_<dtype>: the shader's instantiations.
std::string Shader(const char* kind, int width, Dtype dtype) {
  char name[64];
  std::snprintf(name, sizeof(name), "fused_mlp_%s_w%d_%s", kind, width, DtypeSuffix(dtype));
  return name;
}
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
  b.Threadgroups("fused_mlp", Shader("forward", p.width, dtype), groups, Threads(p), uint32_t(p.tg_bytes))
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
    b.Threadgroups("fused_mlp", Shader("backward", p.width, dtype), uint64_t(p.partitions), Threads(p),
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

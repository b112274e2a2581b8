// FusedMLP's Metal plans (shaders: kernels/fused_mlp/fused_mlp.metal, which needs
// simdgroup_matrix: Apple7+ GPUs; buffer indices, layouts and threadgroup
// geometry: kernels/fused_mlp/fused_mlp.h). Every Metal path runs them
// (kernels/metal_plan/plan.h).
//   forward:  each kernel and bias packed into its zero-padded block (one
//             small pass each), then threadgroups of row tiles through every
//             layer (y and hidden);
//   backward: the float32 partials zeroed, the kernels packed, one threadgroup
//             per partition of the row tiles (grad_x and that partition's
//             weight- and bias-gradient sums), then per layer the partials
//             added in partition order: no atomics, bitwise deterministic.
// The tensor slots depend on the number of layers L = hidden_layers + 1
// (FusedMlpSlots).
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_PLAN_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_PLAN_H_

#include <cstdint>

#include "kernels/fused_mlp/fused_mlp.h"
#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// The slots of a network of L layers, in the op's order.
struct FusedMlpSlots {
  int layers;
  // Forward: x, kernels[L], biases[L], y [n, out_dim], hidden [hidden_layers, n, W].
  int x() const { return 0; }
  int kernel(int l) const { return 1 + l; }
  int bias(int l) const { return 1 + layers + l; }
  int y() const { return 1 + 2 * layers; }
  int hidden() const { return 2 + 2 * layers; }
  int forward_slots() const { return 3 + 2 * layers; }
  // Backward: grad_y, x, kernels[L], y, hidden, then grad_x, grad_kernels[L], grad_biases[L].
  int grad_y() const { return 0; }
  int grad_x_input() const { return 1; }
  int grad_kernel_input(int l) const { return 2 + l; }
  int grad_y_input() const { return 2 + layers; }
  int grad_hidden_input() const { return 3 + layers; }
  int grad_x() const { return 4 + layers; }
  int grad_kernel(int l) const { return 5 + layers + l; }
  int grad_bias(int l) const { return 5 + 2 * layers + l; }
  int backward_slots() const { return 5 + 3 * layers; }
};

// p from fused_mlp_params (its n > 0 for the forward; the backward of n = 0
// writes zero gradients), of `dtype` float32 or float16.
Plan FusedMlpForward(const FusedMlpParams& p, Dtype dtype);
Plan FusedMlpBackward(const FusedMlpParams& p, Dtype dtype);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_PLAN_H_

// HashEncode's Metal plans (shaders: kernels/hash_encode/hash_encode.metal, buffer
// indices kernels/hash_encode/hash_encode.h): the forward, one thread per (point,
// level); the backward's table gradient (atomic float sums, or with
// `deterministic` 64-bit fixed point scaled by max |dy|) and input gradient.
// Every Metal path runs them (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_PLAN_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_PLAN_H_

#include <cstdint>

#include "kernels/common/hash_grid.h"
#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// Forward slots {inputs [N, D] float32, table [P, F], encoded [N, L * F]}.
enum HashEncodeSlots { kHashEncodeSlotInputs, kHashEncodeSlotTable, kHashEncodeSlotEncoded, kHashEncodeSlots };
// Backward slots {grad_encoded, inputs, table, grad_table [P, F] (empty when
// not wanted), grad_inputs [N, D] float32 (empty when not wanted)}.
enum HashEncodeGradSlots {
  kHashEncodeGradSlotDy,
  kHashEncodeGradSlotInputs,
  kHashEncodeGradSlotTable,
  kHashEncodeGradSlotGradTable,
  kHashEncodeGradSlotGradInputs,
  kHashEncodeGradSlots
};

// The grid (params: hash_encode::InputsAndTable), D, F, the table's rows P
// and its element type (float32 or float16).
struct HashEncodeLayout {
  const hash_grid::Params* params;
  int dims, features;
  int64_t rows;
  Dtype dtype;
};
// params->num_points > 0.
Plan HashEncodeForward(const HashEncodeLayout& layout);
// At least one gradient wanted; the table gradient also when there are no points (zeros).
Plan HashEncodeBackward(const HashEncodeLayout& layout, bool table_grad, bool input_grad, bool deterministic);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_PLAN_H_

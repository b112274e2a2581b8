// HashEncode's Metal dispatches: the helper kernels' arguments and every
// shader's named buffer indices (kernels/hash_encode/hash_encode.metal and the plans
// of kernels/hash_encode/hash_encode_plan.cc). The formulas: hash_grid.h.
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of the helper kernels (zero, max_abs, fixed_to_table, float_to_half).
struct HashEncodeCountParams {
  int64 count;       // elements to visit
  int64 num_points;  // N (fixed_to_table's scale)
};

enum HashEncodeBuffers {
  // forward: encoded = the grid's features of inputs
  kHashEncodeInputs = 0,
  kHashEncodeTable = 1,
  kHashEncodeEncoded = 2,
  kHashEncodeParams = 3,  // hash_grid::Params
  // table_grad (atomic float sums) and table_grad_fixed (64-bit fixed-point pairs)
  kHashEncodeScatterDy = 0,
  kHashEncodeScatterInputs = 1,
  kHashEncodeScatterSums = 2,
  kHashEncodeScatterParams = 3,   // hash_grid::Params
  kHashEncodeScatterMaxBits = 4,  // table_grad_fixed: max |dy| as float bits
  // input_grad
  kHashEncodeInputGradDy = 0,
  kHashEncodeInputGradInputs = 1,
  kHashEncodeInputGradTable = 2,
  kHashEncodeInputGradOut = 3,
  kHashEncodeInputGradParams = 4,  // hash_grid::Params
  // zero (32-bit words)
  kHashEncodeZeroWords = 0,
  kHashEncodeZeroCount = 1,  // HashEncodeCountParams
  // max_abs
  kHashEncodeMaxAbsX = 0,
  kHashEncodeMaxAbsBits = 1,
  kHashEncodeMaxAbsCount = 2,  // HashEncodeCountParams
  // fixed_to_table
  kHashEncodeFixedPairs = 0,
  kHashEncodeFixedMaxBits = 1,
  kHashEncodeFixedOut = 2,
  kHashEncodeFixedCount = 3,  // HashEncodeCountParams
  // float_to_half
  kHashEncodeToHalfIn = 0,
  kHashEncodeToHalfOut = 1,
  kHashEncodeToHalfCount = 2,  // HashEncodeCountParams
};

}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_H_

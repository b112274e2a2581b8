// HashEncode's Metal plans (kernels/hash_encode/hash_encode_plan.h).
#include "kernels/hash_encode/hash_encode_plan.h"

#include <cstdio>
#include <string>

#include "kernels/hash_encode/hash_encode.h"

namespace mo {
namespace metal_plan {
namespace {

// <kind>_d<D>_f<F>_<dtype>: the shader's instantiations.
std::string ShaderName(const char* kind, const HashEncodeLayout& layout) {
  char name[96];
  std::snprintf(name, sizeof(name), "hash_encode_%s_d%d_f%d_%s", kind, layout.dims, layout.features,
                DtypeSuffix(layout.dtype));
  return name;
}

}  // namespace

Plan HashEncodeForward(const HashEncodeLayout& layout) {
  const hash_grid::Params& p = *layout.params;
  PlanBuilder b(kHashEncodeSlots);
  b.Threads("hash_encode", ShaderName("forward", layout), uint64_t(p.num_points) * uint64_t(p.num_levels))
      .Tensors({{kHashEncodeInputs, kHashEncodeSlotInputs}, {kHashEncodeTable, kHashEncodeSlotTable}},
               {{kHashEncodeEncoded, kHashEncodeSlotEncoded}})
      .Value(kHashEncodeParams, p);
  return b.Finish();
}

Plan HashEncodeBackward(const HashEncodeLayout& layout, bool table_grad, bool input_grad, bool deterministic) {
  const hash_grid::Params& p = *layout.params;
  const int64_t n = p.num_points;
  const int64_t n_table = layout.rows * layout.features;
  const int64_t n_dy = n * p.num_levels * layout.features;
  const uint64_t scatter_threads = uint64_t(n) * uint64_t(p.num_levels);
  const bool half = layout.dtype == Dtype::kFloat16;
  PlanBuilder b(kHashEncodeGradSlots);
  if (table_grad && n_table > 0) {
    const HashEncodeCountParams table_count = {n_table, n};
    if (deterministic) {
      // 64-bit fixed-point pairs and max |dy| as float bits, zeroed, then the
      // scatter, then the conversion into grad_table.
      const HashEncodeCountParams pair_count = {2 * n_table, n};
      const HashEncodeCountParams one = {1, n};
      const int pairs = b.NewScratch(uint64_t(pair_count.count) * 4);
      const int bits = b.NewScratch(4);
      b.Threads("hash_encode", "hash_encode_zero_u32", uint64_t(pair_count.count))
          .Scratch(kHashEncodeZeroWords, pairs)
          .Value(kHashEncodeZeroCount, pair_count);
      b.Threads("hash_encode", "hash_encode_zero_u32", 1).Scratch(kHashEncodeZeroWords, bits).Value(kHashEncodeZeroCount, one);
      if (n_dy > 0) {
        const HashEncodeCountParams dy_count = {n_dy, n};
        b.Threads("hash_encode", std::string("hash_encode_max_abs_") + DtypeSuffix(layout.dtype), uint64_t(n_dy))
            .Tensor(kHashEncodeMaxAbsX, kHashEncodeGradSlotDy)
            .Scratch(kHashEncodeMaxAbsBits, bits)
            .Value(kHashEncodeMaxAbsCount, dy_count);
        b.Threads("hash_encode", ShaderName("table_grad_fixed", layout), scatter_threads)
            .Tensor(kHashEncodeScatterDy, kHashEncodeGradSlotDy)
            .Tensor(kHashEncodeScatterInputs, kHashEncodeGradSlotInputs)
            .Scratch(kHashEncodeScatterSums, pairs)
            .Value(kHashEncodeScatterParams, p)
            .Scratch(kHashEncodeScatterMaxBits, bits);
      }
      b.Threads("hash_encode", std::string("hash_encode_fixed_to_table_") + DtypeSuffix(layout.dtype),
                uint64_t(n_table))
          .Scratch(kHashEncodeFixedPairs, pairs)
          .Scratch(kHashEncodeFixedMaxBits, bits)
          .Output(kHashEncodeFixedOut, kHashEncodeGradSlotGradTable)
          .Value(kHashEncodeFixedCount, table_count);
    } else {
      // float32 tables sum atomically in grad_table itself, float16 ones in a
      // float32 buffer converted at the end.
      b.OrderDependent();
      const int sums = half ? b.NewScratch(uint64_t(n_table) * 4) : -1;
      auto bind_sums = [&](uint32_t index) -> PlanBuilder& {
        return half ? b.Scratch(index, sums) : b.Output(index, kHashEncodeGradSlotGradTable);
      };
      b.Threads("hash_encode", "hash_encode_zero_u32", uint64_t(n_table));
      bind_sums(kHashEncodeZeroWords).Value(kHashEncodeZeroCount, table_count);
      if (scatter_threads > 0) {
        b.Threads("hash_encode", ShaderName("table_grad", layout), scatter_threads)
            .Tensor(kHashEncodeScatterDy, kHashEncodeGradSlotDy)
            .Tensor(kHashEncodeScatterInputs, kHashEncodeGradSlotInputs);
        bind_sums(kHashEncodeScatterSums).Value(kHashEncodeScatterParams, p);
      }
      if (half) {
        b.Threads("hash_encode", "hash_encode_float_to_half", uint64_t(n_table))
            .Scratch(kHashEncodeToHalfIn, sums)
            .Output(kHashEncodeToHalfOut, kHashEncodeGradSlotGradTable)
            .Value(kHashEncodeToHalfCount, table_count);
      }
    }
  }
  if (input_grad && n > 0) {
    b.Threads("hash_encode", ShaderName("input_grad", layout), uint64_t(n))
        .Tensor(kHashEncodeInputGradDy, kHashEncodeGradSlotDy)
        .Tensor(kHashEncodeInputGradInputs, kHashEncodeGradSlotInputs)
        .Tensor(kHashEncodeInputGradTable, kHashEncodeGradSlotTable)
        .Output(kHashEncodeInputGradOut, kHashEncodeGradSlotGradInputs)
        .Value(kHashEncodeInputGradParams, p);
  }
  return b.Finish();
}

}  // namespace metal_plan
}  // namespace mo

// HashEncode on Metal: the op's Metal plans (which shader of
// hash_encode.metal, one entry point per (D, F, dtype), which tensor slot at
// which buffer index, how many threads; every Metal path runs them: the CPU
// kernels' offload, the MSL shim, tensorflow-metal) and, on macOS, its kernels
// on the Metal PluggableDevice ("GPU" with tensorflow-metal) through the shared
// glue (kernels/metal/metal_kernel.h), float32 and float16. What has run
// where: docs/METAL_COMPAT.md.
//
// Backward: the table gradient is scattered with atomic_float adds into a
// float32 buffer (grad_table itself for float tables, a temp for half ones,
// then converted); with the op's `deterministic` attribute or
// TF_DETERMINISTIC_OPS=1 (a C-API kernel cannot query TF's op-determinism flag) it is
// accumulated in 64-bit fixed point instead (bitwise reproducible). The input
// gradient is one thread per point, levels in order: deterministic always.
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

#if defined(__APPLE__)
#include <cstdlib>
#include <cstring>

#include "kernels/metal/metal_kernel.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

using mo::metal::DimsOf;

// The backward's state: its attributes, `deterministic` also set by
// TF_DETERMINISTIC_OPS (a C-API kernel cannot query TensorFlow's
// op-determinism flag).
void* CreateGrad(TF_OpKernelConstruction* ctx) {
  auto* k = static_cast<mo::hash_encode::GradAttrs*>(mo::metal::CreateWithAttrs<mo::hash_encode::GradAttrs>(ctx));
  const char* env = std::getenv("TF_DETERMINISTIC_OPS");
  if (env != nullptr && (std::strcmp(env, "1") == 0 || std::strcmp(env, "true") == 0)) k->deterministic = true;
  return k;
}

// What inputs [N, D] and table [P, F] give every kernel of the op.
struct Encoding {
  mo::hash_grid::Params params;
  int dims = 0, features = 0;
  int64_t rows = 0;
  TF_DataType dtype = TF_FLOAT;  // the table's
};

// inputs and table against the grid (the checks every kernel of the op runs).
template <typename A>
bool Validate(mo::metal::KernelCall& call, const A& k, TF_Tensor* inputs, TF_Tensor* table, Encoding* enc) {
  if (!call.ok() || !call.Check(mo::hash_encode::InputsAndTable(k, DimsOf(inputs), DimsOf(table), &enc->dims,
                                                                &enc->features, &enc->rows, &enc->params))) {
    return false;
  }
  enc->dtype = TF_TensorType(table);
  return true;
}

mo::metal_plan::HashEncodeLayout LayoutOf(const Encoding& enc) {
  return {&enc.params, enc.dims, enc.features, enc.rows, mo::metal::PlanDtype(enc.dtype)};
}

void Forward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& k = *static_cast<const mo::hash_encode::Attrs*>(kernel_ptr);
  TF_Tensor* inputs = call.Input(0);
  TF_Tensor* table = call.Input(1);
  Encoding enc;
  if (!Validate(call, k, inputs, table, &enc)) return;
  const int64_t n = enc.params.num_points;
  TF_Tensor* encoded = call.Output(0, enc.dtype, {n, int64_t(k.num_levels) * enc.features});
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::HashEncodeForward(LayoutOf(enc)), {inputs, table, encoded});
}

void Backward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& k = *static_cast<const mo::hash_encode::GradAttrs*>(kernel_ptr);
  TF_Tensor* dy = call.Input(0);
  TF_Tensor* inputs = call.Input(1);
  TF_Tensor* table = call.Input(2);
  Encoding enc;
  if (!Validate(call, k, inputs, table, &enc)) return;
  const int64_t n = enc.params.num_points;
  const int64_t width = int64_t(k.num_levels) * enc.features;
  if (!call.Check(mo::hash_encode::Matrix("grad_encoded", DimsOf(dy), n, width))) return;
  TF_Tensor* grad_table = call.Output(0, enc.dtype, {k.compute_table_grad ? enc.rows : 0, enc.features});
  TF_Tensor* grad_inputs = call.Output(1, TF_FLOAT, {k.compute_input_grad ? n : 0, enc.dims});
  const bool input_grad = k.compute_input_grad && n > 0;
  if (!call.ok() || (!k.compute_table_grad && !input_grad)) return;
  call.RunPlan(mo::metal_plan::HashEncodeBackward(LayoutOf(enc), k.compute_table_grad, input_grad, k.deterministic),
               {dy, inputs, table, grad_table, grad_inputs});
}

bool RegisterGrad() {
  for (TF_DataType type : {TF_FLOAT, TF_HALF}) {
    mo::metal::RegisterKernel("MetalOpsHashEncodeGrad", type, &CreateGrad, &mo::metal::Compute<Backward>,
                              &mo::metal::DeleteAttrs<mo::hash_encode::GradAttrs>);
  }
  return true;
}

const bool registered_forward =
    mo::metal::RegisterWithAttrs<mo::hash_encode::Attrs>("MetalOpsHashEncode", {TF_FLOAT, TF_HALF},
                                                         &mo::metal::Compute<Forward>);
const bool registered_backward = RegisterGrad();

}  // namespace
#endif  // __APPLE__

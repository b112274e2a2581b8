// MetalOpsHashEncode / MetalOpsHashEncodeGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), kernel C API. The work is the plan of
// kernels/hash_encode/hash_encode_plan.cc (shaders: hash_encode.metal, formulas
// from kernels/common/hash_grid.h); pipelines come from the shared glue's
// cache (metal_kernel.h), never built per call. What has run where:
// docs/METAL_COMPAT.md.
//
// Backward: the table gradient is scattered with atomic_float adds into a
// float32 buffer (grad_table itself for float tables, a temp for half ones,
// then converted); with the op's `deterministic` attribute or
// TF_DETERMINISTIC_OPS=1 (a C-API kernel cannot query TF's op-determinism flag) it is
// accumulated in 64-bit fixed point instead (bitwise reproducible). The input
// gradient is one thread per point, levels in order: deterministic always.
#include "kernels/metal/metal_kernel.h"

#include <cstdlib>
#include <cstring>

#include "kernels/common/hash_grid.h"
#include "kernels/hash_encode/hash_encode_plan.h"
#include "kernels/hash_encode/hash_encode_spec.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

using mo::metal::DimsOf;

// The kernels' state: the op's attributes.
using HashEncodeMetalKernel = mo::hash_encode::Attrs;

void* CreateKernel(TF_OpKernelConstruction* ctx, bool is_grad) {
  auto* k = new HashEncodeMetalKernel;
  mo::metal::AttrReader reader(ctx);
  const mo::hash_encode::GridOp op = is_grad ? mo::hash_encode::GridOp::kEncodeGrad : mo::hash_encode::GridOp::kEncode;
  if (!reader.Check(mo::hash_encode::ReadAttrs(reader.Getter(), op, k))) return k;
  // A C-API kernel cannot query TensorFlow's op-determinism flag.
  const char* env = std::getenv("TF_DETERMINISTIC_OPS");
  if (env != nullptr && (std::strcmp(env, "1") == 0 || std::strcmp(env, "true") == 0)) k->deterministic = true;
  return k;
}

void* CreateForward(TF_OpKernelConstruction* ctx) { return CreateKernel(ctx, false); }
void* CreateGrad(TF_OpKernelConstruction* ctx) { return CreateKernel(ctx, true); }
void DeleteKernel(void* kernel) { delete static_cast<HashEncodeMetalKernel*>(kernel); }

// What inputs [N, D] and table [P, F] give every kernel of the op.
struct Encoding {
  mo::hash_grid::Params params;
  int dims = 0, features = 0;
  int64_t rows = 0;
  TF_DataType dtype = TF_FLOAT;  // the table's
};

// inputs and table against the grid (the checks every kernel of the op runs).
bool Validate(mo::metal::KernelCall& call, const HashEncodeMetalKernel& k, TF_Tensor* inputs, TF_Tensor* table,
              Encoding* enc) {
  if (!call.ok() || !call.Check(mo::hash_encode::InputsAndTable(k.grid, DimsOf(inputs), DimsOf(table), &enc->dims,
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
  const auto& k = *static_cast<const HashEncodeMetalKernel*>(kernel_ptr);
  TF_Tensor* inputs = call.Input(0);
  TF_Tensor* table = call.Input(1);
  Encoding enc;
  if (!Validate(call, k, inputs, table, &enc)) return;
  const int64_t n = enc.params.num_points;
  TF_Tensor* encoded = call.Output(0, enc.dtype, {n, int64_t(k.grid.num_levels) * enc.features});
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::HashEncodeForward(LayoutOf(enc)), {inputs, table, encoded});
}

void Backward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& k = *static_cast<const HashEncodeMetalKernel*>(kernel_ptr);
  TF_Tensor* dy = call.Input(0);
  TF_Tensor* inputs = call.Input(1);
  TF_Tensor* table = call.Input(2);
  Encoding enc;
  if (!Validate(call, k, inputs, table, &enc)) return;
  const int64_t n = enc.params.num_points;
  const int64_t width = int64_t(k.grid.num_levels) * enc.features;
  if (!call.Check(mo::hash_encode::Matrix("grad_encoded", DimsOf(dy), n, width))) return;
  TF_Tensor* grad_table = call.Output(0, enc.dtype, {k.table_grad ? enc.rows : 0, enc.features});
  TF_Tensor* grad_inputs = call.Output(1, TF_FLOAT, {k.input_grad ? n : 0, enc.dims});
  const bool input_grad = k.input_grad && n > 0;
  if (!call.ok() || (!k.table_grad && !input_grad)) return;
  call.RunPlan(mo::metal_plan::HashEncodeBackward(LayoutOf(enc), k.table_grad, input_grad, k.deterministic),
               {dy, inputs, table, grad_table, grad_inputs});
}

bool Register() {
  for (TF_DataType type : {TF_FLOAT, TF_HALF}) {
    mo::metal::RegisterKernel("MetalOpsHashEncode", type, &CreateForward, &mo::metal::Compute<Forward>,
                              &DeleteKernel);
    mo::metal::RegisterKernel("MetalOpsHashEncodeGrad", type, &CreateGrad, &mo::metal::Compute<Backward>,
                              &DeleteKernel);
  }
  return true;
}

const bool registered = Register();

}  // namespace

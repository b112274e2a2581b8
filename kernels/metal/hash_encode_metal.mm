// MetalOpsHashEncode / MetalOpsHashEncodeGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), kernel C API. Shaders: hash_encode.metal
// (formulas from kernels/common/hash_grid.h); pipelines come from the
// shared glue's cache (metal_kernel.h), never built per call. The shim test
// (tests/test_hash_encode_metal_shim.py) runs the shaders in the order this
// file encodes them; what has run where: docs/METAL_COMPAT.md.
//
// Backward: the table gradient is scattered with atomic_float adds into a
// float32 buffer (grad_table itself for float tables, a temp for half ones,
// then converted); with the op's `deterministic` attribute or
// TF_DETERMINISTIC_OPS=1 (a C-API kernel cannot query TF's op-determinism flag) it is
// accumulated in 64-bit fixed point instead (bitwise reproducible). The input
// gradient is one thread per point, levels in order: deterministic always.
#import "kernels/metal/metal_kernel.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/common/hash_grid.h"
#include "kernels/spec/hash_encode_spec.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

using mo::metal::DimsOf;

// The kernels' state: the op's attributes.
using HashEncodeMetalKernel = mo::hash_encode::Attrs;

// Same layout as HashEncodeCountParams in hash_encode.metal.
struct CountParams {
  int64_t count;
  int64_t num_points;
};

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

const char* DtypeName(TF_DataType dtype) { return dtype == TF_HALF ? "float16" : "float32"; }

std::string ShaderName(const char* kind, const Encoding& enc) {
  char name[96];
  std::snprintf(name, sizeof(name), "hash_encode_%s_d%d_f%d_%s", kind, enc.dims, enc.features,
                DtypeName(enc.dtype));
  return name;
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
  id<MTLComputePipelineState> pipeline = call.Pipeline("hash_encode", ShaderName("forward", enc));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(0, inputs).Tensor(1, table).Tensor(2, encoded).Value(3, enc.params);
    e.Dispatch(pipeline, uint64_t(n) * uint64_t(k.grid.num_levels));
  });
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
  const bool deterministic = k.deterministic;
  const int64_t n_table = enc.rows * enc.features;
  // float32 sums for half tables, or 64-bit fixed-point pairs + max|dy| bits.
  TF_Tensor* scratch = nullptr;
  TF_Tensor* max_bits = nullptr;
  if (k.table_grad && deterministic) {
    scratch = call.Temp(TF_UINT32, {2 * n_table});
    max_bits = call.Temp(TF_UINT32, {1});
  } else if (k.table_grad && enc.dtype == TF_HALF) {
    scratch = call.Temp(TF_FLOAT, {n_table});
  }
  const bool input_grad = k.input_grad && n > 0;
  if (!call.ok() || (!k.table_grad && !input_grad)) return;
  // float tables accumulate atomically in grad_table itself.
  TF_Tensor* sums = (!deterministic && enc.dtype == TF_FLOAT) ? grad_table : scratch;
  const bool half = enc.dtype == TF_HALF;
  const CountParams table_count = {n_table, n};
  const CountParams pair_count = {2 * n_table, n};
  const CountParams one = {1, n};
  const CountParams dy_count = {n * width, n};
  const uint64_t scatter_threads = uint64_t(n) * uint64_t(k.grid.num_levels);
  // Every pipeline first (each may fail), then one serial compute encoder:
  // each dispatch sees the previous ones' writes.
  id<MTLComputePipelineState> zero = nil, max_abs = nil, scatter = nil, finish = nil, input_pipeline = nil;
  if (k.table_grad) {
    zero = call.Pipeline("hash_encode", "hash_encode_zero_u32");
    if (deterministic) {
      max_abs = call.Pipeline("hash_encode", std::string("hash_encode_max_abs_") + DtypeName(enc.dtype));
      scatter = call.Pipeline("hash_encode", ShaderName("table_grad_fixed", enc));
      finish = call.Pipeline("hash_encode", std::string("hash_encode_fixed_to_table_") + DtypeName(enc.dtype));
    } else {
      scatter = call.Pipeline("hash_encode", ShaderName("table_grad", enc));
      if (half) finish = call.Pipeline("hash_encode", "hash_encode_float_to_half");
    }
  }
  if (input_grad) input_pipeline = call.Pipeline("hash_encode", ShaderName("input_grad", enc));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    if (k.table_grad && deterministic) {
      e.Tensor(0, scratch).Value(1, pair_count).Dispatch(zero, uint64_t(pair_count.count));
      e.Tensor(0, max_bits).Value(1, one).Dispatch(zero, 1);
      e.Tensor(0, dy).Tensor(1, max_bits).Value(2, dy_count).Dispatch(max_abs, uint64_t(dy_count.count));
      e.Tensor(0, dy).Tensor(1, inputs).Tensor(2, scratch).Value(3, enc.params).Tensor(4, max_bits);
      e.Dispatch(scatter, scatter_threads);
      e.Tensor(0, scratch).Tensor(1, max_bits).Tensor(2, grad_table).Value(3, table_count);
      e.Dispatch(finish, uint64_t(table_count.count));
    } else if (k.table_grad) {
      e.Tensor(0, sums).Value(1, table_count).Dispatch(zero, uint64_t(table_count.count));
      e.Tensor(0, dy).Tensor(1, inputs).Tensor(2, sums).Value(3, enc.params).Dispatch(scatter, scatter_threads);
      if (half) e.Tensor(0, sums).Tensor(1, grad_table).Value(2, table_count).Dispatch(finish, uint64_t(table_count.count));
    }
    if (input_grad) {
      e.Tensor(0, dy).Tensor(1, inputs).Tensor(2, table).Tensor(3, grad_inputs).Value(4, enc.params);
      e.Dispatch(input_pipeline, uint64_t(n));
    }
  });
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

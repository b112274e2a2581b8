// MetalOpsHashEncode / MetalOpsHashEncodeGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), kernel C API. Shaders: hash_encode.metal
// (formulas from kernels/common/hash_grid.h); pipelines come from the
// shared glue's cache (metal_kernel.h), never built per call. Compiled and
// linked for macOS by `make metal-check`; never run on a Mac GPU here: the
// shaders' arithmetic is tested on the CPU through the MSL shim
// (tests/test_hash_encode_metal_shim.py runs them in the order this file
// encodes them).
//
// Backward: the table gradient is scattered with atomic_float adds into a
// float32 buffer (grad_table itself for float tables, a temp for half ones,
// then converted); under tf.config.experimental.enable_op_determinism() it is
// accumulated in 64-bit fixed point instead (bitwise reproducible). The input
// gradient is one thread per point, levels in order: deterministic always.
#import "kernels/metal/metal_kernel.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/common/hash_grid.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_tensor.h"
#include "tensorflow/core/util/determinism.h"

namespace {

namespace hg = ::mo::hash_grid;

struct HashEncodeMetalKernel {
  int32_t num_levels = 0;
  int32_t log2_hashmap_size = 0;
  int32_t base_resolution = 0;
  float per_level_scale = 0.f;
  int interpolation = hg::kLinear;
  int out_of_range = hg::kClamp;
  bool is_grad = false;
  bool table_grad = true;
  bool input_grad = true;
};

// Same layout as HashEncodeCountParams in hash_encode.metal.
struct CountParams {
  int64_t count;
  int64_t num_points;
};

// The CPU kernel's attribute checks and messages (kernels/cpu/hash_encode_kernels.cc).
void CheckAttrs(const HashEncodeMetalKernel& k, mo::metal::AttrReader& attrs) {
  if (k.num_levels < 1 || k.num_levels > hg::kMaxLevels) {
    attrs.InvalidArgument("num_levels must be in [1, " + std::to_string(int(hg::kMaxLevels)) + "], got " +
                           std::to_string(k.num_levels));
  } else if (k.log2_hashmap_size < hg::kMinLog2HashmapSize || k.log2_hashmap_size > hg::kMaxLog2HashmapSize) {
    attrs.InvalidArgument("log2_hashmap_size must be in [" + std::to_string(int(hg::kMinLog2HashmapSize)) + ", " +
                           std::to_string(int(hg::kMaxLog2HashmapSize)) + "], got " +
                           std::to_string(k.log2_hashmap_size));
  } else if (k.base_resolution < 1) {
    attrs.InvalidArgument("base_resolution must be >= 1, got " + std::to_string(k.base_resolution));
  } else if (!(k.per_level_scale >= 1.0f) || std::isinf(k.per_level_scale)) {
    attrs.InvalidArgument("per_level_scale must be finite and >= 1, got " + std::to_string(k.per_level_scale));
  } else {
    const float finest = hg::level_scale(k.num_levels - 1, ::mo::log2_f(k.per_level_scale),
                                         ::mo::uint32(k.base_resolution));
    if (!(finest < 2147483520.0f)) {
      attrs.InvalidArgument("resolution of the finest level (base_resolution * per_level_scale^(num_levels-1) = " +
                             std::to_string(finest + 1.0f) +
                             ") must stay below 2^31: reduce base_resolution, per_level_scale or num_levels");
    }
  }
}

void* CreateKernel(TF_OpKernelConstruction* ctx, bool is_grad) {
  auto* k = new HashEncodeMetalKernel;
  k->is_grad = is_grad;
  mo::metal::AttrReader attrs(ctx);
  k->num_levels = attrs.Int("num_levels");
  k->log2_hashmap_size = attrs.Int("log2_hashmap_size");
  k->base_resolution = attrs.Int("base_resolution");
  k->per_level_scale = attrs.Float("per_level_scale");
  const std::string interpolation = attrs.String("interpolation");
  const std::string out_of_range = attrs.String("out_of_range");
  if (is_grad) {
    k->table_grad = attrs.Bool("compute_table_grad");
    k->input_grad = attrs.Bool("compute_input_grad");
  }
  if (!attrs.ok()) return k;
  if (interpolation == "linear") {
    k->interpolation = hg::kLinear;
  } else if (interpolation == "smoothstep") {
    k->interpolation = hg::kSmoothstep;
  } else {
    attrs.InvalidArgument("interpolation must be 'linear' or 'smoothstep', got '" + interpolation + "'");
  }
  if (out_of_range == "clamp") {
    k->out_of_range = hg::kClamp;
  } else if (out_of_range == "wrap") {
    k->out_of_range = hg::kWrap;
  } else if (out_of_range == "zero") {
    k->out_of_range = hg::kZero;
  } else {
    attrs.InvalidArgument("out_of_range must be 'clamp', 'wrap' or 'zero', got '" + out_of_range + "'");
  }
  CheckAttrs(*k, attrs);
  return k;
}

void* CreateForward(TF_OpKernelConstruction* ctx) { return CreateKernel(ctx, false); }
void* CreateGrad(TF_OpKernelConstruction* ctx) { return CreateKernel(ctx, true); }
void DeleteKernel(void* kernel) { delete static_cast<HashEncodeMetalKernel*>(kernel); }

std::string Shape(TF_Tensor* t) {
  std::string s = "[";
  for (int d = 0; d < TF_NumDims(t); ++d) s += (d ? "," : "") + std::to_string(TF_Dim(t, d));
  return s + "]";
}

// inputs [N, D] and table [P, F] against the grid (the CPU kernel's checks
// and messages); fills params, dims, features and rows.
bool Validate(mo::metal::KernelCall& call, const HashEncodeMetalKernel& k, TF_Tensor* inputs, TF_Tensor* table,
              hg::Params* params, int* dims, int* features, int64_t* rows) {
  if (TF_NumDims(inputs) != 2) {
    call.InvalidArgument("inputs must be a rank-2 tensor [N, D], got shape " + Shape(inputs));
    return false;
  }
  const int64_t d = TF_Dim(inputs, 1);
  if (d < 1 || d > hg::kMaxDims) {
    call.InvalidArgument("inputs must be [N, D] with D in [1, 4], got D = " + std::to_string(d) + " (shape " +
                           Shape(inputs) + ")");
    return false;
  }
  if (TF_NumDims(table) != 2) {
    call.InvalidArgument("table must be a rank-2 tensor [P, F], got shape " + Shape(table));
    return false;
  }
  const int64_t f = TF_Dim(table, 1);
  if (f != 1 && f != 2 && f != 4 && f != 8) {
    call.InvalidArgument("table must be [P, F] with F in {1, 2, 4, 8}, got F = " + std::to_string(f));
    return false;
  }
  *params = hg::Params();
  params->num_points = TF_Dim(inputs, 0);
  params->log2_per_level_scale = ::mo::log2_f(k.per_level_scale);
  params->base_resolution = ::mo::uint32(k.base_resolution);
  params->num_levels = k.num_levels;
  params->interpolation = k.interpolation;
  params->out_of_range = k.out_of_range;
  params->pad_ = 0;
  *rows = hg::level_offsets(int(d), k.num_levels, k.log2_hashmap_size, params->log2_per_level_scale,
                            params->base_resolution, params->level_offsets);
  if (TF_Dim(table, 0) != *rows) {
    call.InvalidArgument("table has " + std::to_string(TF_Dim(table, 0)) + " rows but the hash grid needs " +
                           std::to_string(*rows) + " (hash_grid_size(input_dim=" + std::to_string(d) +
                           ", num_levels=" + std::to_string(k.num_levels) +
                           ", log2_hashmap_size=" + std::to_string(k.log2_hashmap_size) +
                           ", base_resolution=" + std::to_string(k.base_resolution) +
                           ", per_level_scale=" + std::to_string(k.per_level_scale) + "))");
    return false;
  }
  *dims = int(d);
  *features = int(f);
  return true;
}

const char* DtypeName(TF_DataType dtype) { return dtype == TF_HALF ? "float16" : "float32"; }

std::string ShaderName(const char* kind, int dims, int features, TF_DataType dtype) {
  char name[96];
  std::snprintf(name, sizeof(name), "hash_encode_%s_d%d_f%d_%s", kind, dims, features, DtypeName(dtype));
  return name;
}

void Forward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& k = *static_cast<const HashEncodeMetalKernel*>(kernel_ptr);
  TF_Tensor* inputs = call.Input(0);
  TF_Tensor* table = call.Input(1);
  hg::Params params;
  int dims = 0, features = 0;
  int64_t rows = 0;
  if (!call.ok() || !Validate(call, k, inputs, table, &params, &dims, &features, &rows)) return;
  const TF_DataType dtype = TF_TensorType(table);
  const int64_t n = params.num_points;
  TF_Tensor* encoded = call.Output(0, dtype, {n, int64_t(k.num_levels) * features});
  if (!call.ok() || n == 0) return;
  call.Encode([&](mo::metal::Encoder& e) {
    id<MTLComputePipelineState> pipeline = e.Pipeline("hash_encode", ShaderName("forward", dims, features, dtype));
    if (!e.ok()) return;
    e.Tensor(0, inputs).Tensor(1, table).Tensor(2, encoded).Value(3, params);
    e.Dispatch(pipeline, uint64_t(n) * uint64_t(k.num_levels));
  });
}

void Backward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& k = *static_cast<const HashEncodeMetalKernel*>(kernel_ptr);
  TF_Tensor* dy = call.Input(0);
  TF_Tensor* inputs = call.Input(1);
  TF_Tensor* table = call.Input(2);
  hg::Params params;
  int dims = 0, features = 0;
  int64_t rows = 0;
  if (!call.ok() || !Validate(call, k, inputs, table, &params, &dims, &features, &rows)) return;
  const TF_DataType dtype = TF_TensorType(table);
  const int64_t n = params.num_points;
  const int64_t width = int64_t(k.num_levels) * features;
  if (TF_NumDims(dy) != 2 || TF_Dim(dy, 0) != n || TF_Dim(dy, 1) != width) {
    call.InvalidArgument("grad_encoded must have shape [" + std::to_string(n) + ", " + std::to_string(width) +
                         "], got " + Shape(dy));
    return;
  }
  TF_Tensor* grad_table = call.Output(0, dtype, {k.table_grad ? rows : 0, features});
  TF_Tensor* grad_inputs = call.Output(1, TF_FLOAT, {k.input_grad ? n : 0, dims});
  const bool deterministic = tsl::OpDeterminismRequired();
  const int64_t n_table = rows * features;
  // float32 sums for half tables, or 64-bit fixed-point pairs + max|dy| bits.
  TF_Tensor* scratch = nullptr;
  TF_Tensor* max_bits = nullptr;
  if (k.table_grad && deterministic) {
    scratch = call.Temp(TF_UINT32, {2 * n_table});
    max_bits = call.Temp(TF_UINT32, {1});
  } else if (k.table_grad && dtype == TF_HALF) {
    scratch = call.Temp(TF_FLOAT, {n_table});
  }
  const bool input_grad = k.input_grad && n > 0;
  if (!call.ok() || (!k.table_grad && !input_grad)) return;
  // float tables accumulate atomically in grad_table itself.
  TF_Tensor* sums = (!deterministic && dtype == TF_FLOAT) ? grad_table : scratch;
  const bool half = dtype == TF_HALF;
  const CountParams table_count = {n_table, n};
  const CountParams pair_count = {2 * n_table, n};
  const CountParams one = {1, n};
  const CountParams dy_count = {n * width, n};
  const uint64_t scatter_threads = uint64_t(n) * uint64_t(k.num_levels);
  call.Encode([&](mo::metal::Encoder& e) {
    // Every pipeline first (each may fail), then one serial compute encoder:
    // each dispatch sees the previous ones' writes.
    id<MTLComputePipelineState> zero = nil, max_abs = nil, scatter = nil, finish = nil, input_pipeline = nil;
    if (k.table_grad) {
      zero = e.Pipeline("hash_encode", "hash_encode_zero_u32");
      if (deterministic) {
        max_abs = e.Pipeline("hash_encode", std::string("hash_encode_max_abs_") + DtypeName(dtype));
        scatter = e.Pipeline("hash_encode", ShaderName("table_grad_fixed", dims, features, dtype));
        finish = e.Pipeline("hash_encode", std::string("hash_encode_fixed_to_table_") + DtypeName(dtype));
      } else {
        scatter = e.Pipeline("hash_encode", ShaderName("table_grad", dims, features, dtype));
        if (half) finish = e.Pipeline("hash_encode", "hash_encode_float_to_half");
      }
    }
    if (input_grad) input_pipeline = e.Pipeline("hash_encode", ShaderName("input_grad", dims, features, dtype));
    if (!e.ok()) return;
    if (k.table_grad && deterministic) {
      e.Tensor(0, scratch).Value(1, pair_count).Dispatch(zero, uint64_t(pair_count.count));
      e.Tensor(0, max_bits).Value(1, one).Dispatch(zero, 1);
      e.Tensor(0, dy).Tensor(1, max_bits).Value(2, dy_count).Dispatch(max_abs, uint64_t(dy_count.count));
      e.Tensor(0, dy).Tensor(1, inputs).Tensor(2, scratch).Value(3, params).Tensor(4, max_bits);
      e.Dispatch(scatter, scatter_threads);
      e.Tensor(0, scratch).Tensor(1, max_bits).Tensor(2, grad_table).Value(3, table_count);
      e.Dispatch(finish, uint64_t(table_count.count));
    } else if (k.table_grad) {
      e.Tensor(0, sums).Value(1, table_count).Dispatch(zero, uint64_t(table_count.count));
      e.Tensor(0, dy).Tensor(1, inputs).Tensor(2, sums).Value(3, params).Dispatch(scatter, scatter_threads);
      if (half) e.Tensor(0, sums).Tensor(1, grad_table).Value(2, table_count).Dispatch(finish, uint64_t(table_count.count));
    }
    if (input_grad) {
      e.Tensor(0, dy).Tensor(1, inputs).Tensor(2, table).Tensor(3, grad_inputs).Value(4, params);
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

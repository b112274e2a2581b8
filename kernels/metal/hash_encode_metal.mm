// MetalOpsHashEncode / MetalOpsHashEncodeGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), kernel C API. Shaders: hash_encode.metal
// (formulas from kernels/common/hash_grid.h); pipelines come from the
// process-wide cache (mo::metal::GetPipeline), never built per call; work is
// encoded on the TF_MetalStream's command buffer inside dispatch_sync on its
// queue, then committed.
//
// NOT COMPILED OR RUN HERE (no Mac in this project's CI machines): the
// shaders' arithmetic is tested on the CPU through the MSL shim
// (tests/test_hash_encode_metal_shim.py runs them in the order this file
// encodes them); this host code is written to the C API and the
// TF_MetalStream protocol but unverified until built on macOS.
//
// Backward: the table gradient is scattered with atomic_float adds into a
// float32 buffer (grad_table itself for float tables, a temp for half ones,
// then converted); under tf.config.experimental.enable_op_determinism() it is
// accumulated in 64-bit fixed point instead (bitwise reproducible). The input
// gradient is one thread per point, levels in order: deterministic always.
#import "kernels/metal/metal_context.h"

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

void SetInvalid(TF_Status* status, const std::string& msg) {
  TF_SetStatus(status, TF_INVALID_ARGUMENT, msg.c_str());
}

std::string ReadString(TF_OpKernelConstruction* ctx, const char* name, TF_Status* status) {
  char buffer[64] = {0};
  TF_OpKernelConstruction_GetAttrString(ctx, name, buffer, sizeof(buffer) - 1, status);
  return std::string(buffer);
}

// The CPU kernel's attribute checks and messages (kernels/cpu/hash_encode_kernels.cc).
void CheckAttrs(const HashEncodeMetalKernel& k, TF_Status* status) {
  if (k.num_levels < 1 || k.num_levels > hg::kMaxLevels) {
    SetInvalid(status, "num_levels must be in [1, " + std::to_string(int(hg::kMaxLevels)) + "], got " +
                           std::to_string(k.num_levels));
  } else if (k.log2_hashmap_size < hg::kMinLog2HashmapSize || k.log2_hashmap_size > hg::kMaxLog2HashmapSize) {
    SetInvalid(status, "log2_hashmap_size must be in [" + std::to_string(int(hg::kMinLog2HashmapSize)) + ", " +
                           std::to_string(int(hg::kMaxLog2HashmapSize)) + "], got " +
                           std::to_string(k.log2_hashmap_size));
  } else if (k.base_resolution < 1) {
    SetInvalid(status, "base_resolution must be >= 1, got " + std::to_string(k.base_resolution));
  } else if (!(k.per_level_scale >= 1.0f) || std::isinf(k.per_level_scale)) {
    SetInvalid(status, "per_level_scale must be finite and >= 1, got " + std::to_string(k.per_level_scale));
  } else {
    const float finest = hg::level_scale(k.num_levels - 1, ::mo::log2_f(k.per_level_scale),
                                         ::mo::uint32(k.base_resolution));
    if (!(finest < 2147483520.0f)) {
      SetInvalid(status, "resolution of the finest level (base_resolution * per_level_scale^(num_levels-1) = " +
                             std::to_string(finest + 1.0f) +
                             ") must stay below 2^31: reduce base_resolution, per_level_scale or num_levels");
    }
  }
}

void* CreateKernel(TF_OpKernelConstruction* ctx, bool is_grad) {
  auto* k = new HashEncodeMetalKernel;
  k->is_grad = is_grad;
  TF_Status* status = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrInt32(ctx, "num_levels", &k->num_levels, status);
  if (TF_GetCode(status) == TF_OK)
    TF_OpKernelConstruction_GetAttrInt32(ctx, "log2_hashmap_size", &k->log2_hashmap_size, status);
  if (TF_GetCode(status) == TF_OK)
    TF_OpKernelConstruction_GetAttrInt32(ctx, "base_resolution", &k->base_resolution, status);
  if (TF_GetCode(status) == TF_OK)
    TF_OpKernelConstruction_GetAttrFloat(ctx, "per_level_scale", &k->per_level_scale, status);
  if (TF_GetCode(status) == TF_OK) {
    const std::string interpolation = ReadString(ctx, "interpolation", status);
    if (TF_GetCode(status) == TF_OK) {
      if (interpolation == "linear") {
        k->interpolation = hg::kLinear;
      } else if (interpolation == "smoothstep") {
        k->interpolation = hg::kSmoothstep;
      } else {
        SetInvalid(status, "interpolation must be 'linear' or 'smoothstep', got '" + interpolation + "'");
      }
    }
  }
  if (TF_GetCode(status) == TF_OK) {
    const std::string out_of_range = ReadString(ctx, "out_of_range", status);
    if (TF_GetCode(status) == TF_OK) {
      if (out_of_range == "clamp") {
        k->out_of_range = hg::kClamp;
      } else if (out_of_range == "wrap") {
        k->out_of_range = hg::kWrap;
      } else if (out_of_range == "zero") {
        k->out_of_range = hg::kZero;
      } else {
        SetInvalid(status, "out_of_range must be 'clamp', 'wrap' or 'zero', got '" + out_of_range + "'");
      }
    }
  }
  if (is_grad && TF_GetCode(status) == TF_OK) {
    TF_Bool table_grad = 1, input_grad = 1;
    TF_OpKernelConstruction_GetAttrBool(ctx, "compute_table_grad", &table_grad, status);
    if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrBool(ctx, "compute_input_grad", &input_grad, status);
    k->table_grad = table_grad != 0;
    k->input_grad = input_grad != 0;
  }
  if (TF_GetCode(status) == TF_OK) CheckAttrs(*k, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
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
bool Validate(const HashEncodeMetalKernel& k, TF_Tensor* inputs, TF_Tensor* table, hg::Params* params, int* dims,
              int* features, int64_t* rows, TF_Status* status) {
  if (TF_NumDims(inputs) != 2) {
    SetInvalid(status, "inputs must be a rank-2 tensor [N, D], got shape " + Shape(inputs));
    return false;
  }
  const int64_t d = TF_Dim(inputs, 1);
  if (d < 1 || d > hg::kMaxDims) {
    SetInvalid(status, "inputs must be [N, D] with D in [1, 4], got D = " + std::to_string(d) + " (shape " +
                           Shape(inputs) + ")");
    return false;
  }
  if (TF_NumDims(table) != 2) {
    SetInvalid(status, "table must be a rank-2 tensor [P, F], got shape " + Shape(table));
    return false;
  }
  const int64_t f = TF_Dim(table, 1);
  if (f != 1 && f != 2 && f != 4 && f != 8) {
    SetInvalid(status, "table must be [P, F] with F in {1, 2, 4, 8}, got F = " + std::to_string(f));
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
    SetInvalid(status, "table has " + std::to_string(TF_Dim(table, 0)) + " rows but the hash grid needs " +
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

void ForwardCompute(void* kernel_ptr, TF_OpKernelContext* ctx) {
  const auto& k = *static_cast<const HashEncodeMetalKernel*>(kernel_ptr);
  TF_Status* status = TF_NewStatus();
  TF_Tensor* inputs = nullptr;
  TF_Tensor* table = nullptr;
  TF_Tensor* encoded = nullptr;
  hg::Params params;
  int dims = 0, features = 0;
  int64_t rows = 0;
  TF_GetInput(ctx, 0, &inputs, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 1, &table, status);
  if (TF_GetCode(status) == TF_OK && Validate(k, inputs, table, &params, &dims, &features, &rows, status)) {
    const TF_DataType dtype = TF_TensorType(table);
    const int64_t n = params.num_points;
    const int64_t out_dims[2] = {n, int64_t(k.num_levels) * features};
    encoded = TF_AllocateOutput(ctx, 0, dtype, out_dims, 2, size_t(n * out_dims[1]) * TF_DataTypeSize(dtype),
                                status);
    if (TF_GetCode(status) == TF_OK && n > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      id<MTLComputePipelineState> pipeline =
          TF_GetCode(status) == TF_OK
              ? mo::metal::GetPipeline(stream.currentCommandBuffer.device,
                                       ShaderName("forward", dims, features, dtype), status)
              : nil;
      if (pipeline != nil) {
        id<MTLBuffer> in_buffer = mo::metal::BufferOf(inputs);
        id<MTLBuffer> table_buffer = mo::metal::BufferOf(table);
        id<MTLBuffer> out_buffer = mo::metal::BufferOf(encoded);
        const uint64_t threads = uint64_t(n) * uint64_t(k.num_levels);
        dispatch_sync(stream.queue, ^() {
          id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
          [encoder setBuffer:in_buffer offset:0 atIndex:0];
          [encoder setBuffer:table_buffer offset:0 atIndex:1];
          [encoder setBuffer:out_buffer offset:0 atIndex:2];
          [encoder setBytes:&params length:sizeof(params) atIndex:3];
          mo::metal::Dispatch1D(encoder, pipeline, threads);
          [encoder endEncoding];
          [stream commit];
        });
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteTensor(inputs);
  TF_DeleteTensor(table);
  TF_DeleteTensor(encoded);
  TF_DeleteStatus(status);
}

void GradCompute(void* kernel_ptr, TF_OpKernelContext* ctx) {
  const auto& k = *static_cast<const HashEncodeMetalKernel*>(kernel_ptr);
  TF_Status* status = TF_NewStatus();
  TF_Tensor* dy = nullptr;
  TF_Tensor* inputs = nullptr;
  TF_Tensor* table = nullptr;
  TF_Tensor* grad_table = nullptr;
  TF_Tensor* grad_inputs = nullptr;
  TF_Tensor* scratch = nullptr;  // float32 sums (half tables) or fixed-point pairs
  TF_Tensor* max_bits = nullptr;
  hg::Params params;
  int dims = 0, features = 0;
  int64_t rows = 0;
  TF_GetInput(ctx, 0, &dy, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 1, &inputs, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 2, &table, status);
  if (TF_GetCode(status) == TF_OK && Validate(k, inputs, table, &params, &dims, &features, &rows, status)) {
    const TF_DataType dtype = TF_TensorType(table);
    const int64_t n = params.num_points;
    const int64_t width = int64_t(k.num_levels) * features;
    if (TF_NumDims(dy) != 2 || TF_Dim(dy, 0) != n || TF_Dim(dy, 1) != width) {
      SetInvalid(status, "grad_encoded must have shape [" + std::to_string(n) + ", " + std::to_string(width) +
                             "], got " + Shape(dy));
    }
    const int64_t table_dims[2] = {k.table_grad ? rows : 0, features};
    const int64_t input_dims[2] = {k.input_grad ? n : 0, dims};
    if (TF_GetCode(status) == TF_OK) {
      grad_table = TF_AllocateOutput(ctx, 0, dtype, table_dims, 2,
                                     size_t(table_dims[0] * features) * TF_DataTypeSize(dtype), status);
    }
    if (TF_GetCode(status) == TF_OK) {
      grad_inputs = TF_AllocateOutput(ctx, 1, TF_FLOAT, input_dims, 2, size_t(input_dims[0] * dims) * sizeof(float),
                                      status);
    }
    const bool deterministic = tsl::OpDeterminismRequired();
    const int64_t n_table = rows * features;
    TF_AllocatorAttributes attrs;
    attrs.struct_size = TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE;
    attrs.on_host = 0;
    if (TF_GetCode(status) == TF_OK && k.table_grad && deterministic) {
      const int64_t pair_dims[1] = {2 * n_table};
      const int64_t bit_dims[1] = {1};
      scratch = TF_AllocateTemp(ctx, TF_UINT32, pair_dims, 1, &attrs, status);
      if (TF_GetCode(status) == TF_OK) max_bits = TF_AllocateTemp(ctx, TF_UINT32, bit_dims, 1, &attrs, status);
    } else if (TF_GetCode(status) == TF_OK && k.table_grad && dtype == TF_HALF) {
      const int64_t sum_dims[1] = {n_table};
      scratch = TF_AllocateTemp(ctx, TF_FLOAT, sum_dims, 1, &attrs, status);
    }
    id<TF_MetalStream> stream = nil;
    if (TF_GetCode(status) == TF_OK && (k.table_grad || (k.input_grad && n > 0))) {
      stream = mo::metal::StreamOf(ctx, status);
    }
    // Pipelines first (each may fail and set status), then one encoder.
    id<MTLDevice> device = stream != nil ? stream.currentCommandBuffer.device : nil;
    auto pipeline = [&](const std::string& name) -> id<MTLComputePipelineState> {
      return TF_GetCode(status) == TF_OK ? mo::metal::GetPipeline(device, name, status) : nil;
    };
    id<MTLComputePipelineState> zero = nil, max_abs = nil, scatter = nil, finish = nil, input_grad = nil;
    if (stream != nil && k.table_grad) {
      zero = pipeline("hash_encode_zero_u32");
      if (deterministic) {
        max_abs = pipeline(std::string("hash_encode_max_abs_") + DtypeName(dtype));
        scatter = pipeline(ShaderName("table_grad_fixed", dims, features, dtype));
        finish = pipeline(std::string("hash_encode_fixed_to_table_") + DtypeName(dtype));
      } else {
        scatter = pipeline(ShaderName("table_grad", dims, features, dtype));
        if (dtype == TF_HALF) finish = pipeline("hash_encode_float_to_half");
      }
    }
    if (stream != nil && k.input_grad && n > 0) input_grad = pipeline(ShaderName("input_grad", dims, features, dtype));

    if (TF_GetCode(status) == TF_OK && stream != nil) {
      id<MTLBuffer> dy_buffer = mo::metal::BufferOf(dy);
      id<MTLBuffer> in_buffer = mo::metal::BufferOf(inputs);
      id<MTLBuffer> table_buffer = mo::metal::BufferOf(table);
      id<MTLBuffer> grad_table_buffer = k.table_grad ? mo::metal::BufferOf(grad_table) : nil;
      id<MTLBuffer> grad_inputs_buffer = (k.input_grad && n > 0) ? mo::metal::BufferOf(grad_inputs) : nil;
      id<MTLBuffer> scratch_buffer = scratch ? mo::metal::BufferOf(scratch) : nil;
      id<MTLBuffer> bits_buffer = max_bits ? mo::metal::BufferOf(max_bits) : nil;
      // float tables accumulate atomically in grad_table itself.
      id<MTLBuffer> sums_buffer = (!deterministic && dtype == TF_FLOAT) ? grad_table_buffer : scratch_buffer;
      const bool table_grad = k.table_grad;
      const bool half = dtype == TF_HALF;
      const CountParams table_count = {n_table, n};
      const CountParams pair_count = {2 * n_table, n};
      const CountParams one = {1, n};
      const CountParams dy_count = {n * width, n};
      const uint64_t scatter_threads = uint64_t(n) * uint64_t(k.num_levels);
      dispatch_sync(stream.queue, ^() {
        // One serial compute encoder: each dispatch sees the previous ones' writes.
        id<MTLComputeCommandEncoder> encoder = [stream.currentCommandBuffer computeCommandEncoder];
        if (table_grad && deterministic) {
          [encoder setBuffer:scratch_buffer offset:0 atIndex:0];
          [encoder setBytes:&pair_count length:sizeof(pair_count) atIndex:1];
          mo::metal::Dispatch1D(encoder, zero, uint64_t(pair_count.count));
          [encoder setBuffer:bits_buffer offset:0 atIndex:0];
          [encoder setBytes:&one length:sizeof(one) atIndex:1];
          mo::metal::Dispatch1D(encoder, zero, 1);
          [encoder setBuffer:dy_buffer offset:0 atIndex:0];
          [encoder setBuffer:bits_buffer offset:0 atIndex:1];
          [encoder setBytes:&dy_count length:sizeof(dy_count) atIndex:2];
          mo::metal::Dispatch1D(encoder, max_abs, uint64_t(dy_count.count));
          [encoder setBuffer:dy_buffer offset:0 atIndex:0];
          [encoder setBuffer:in_buffer offset:0 atIndex:1];
          [encoder setBuffer:scratch_buffer offset:0 atIndex:2];
          [encoder setBytes:&params length:sizeof(params) atIndex:3];
          [encoder setBuffer:bits_buffer offset:0 atIndex:4];
          mo::metal::Dispatch1D(encoder, scatter, scatter_threads);
          [encoder setBuffer:scratch_buffer offset:0 atIndex:0];
          [encoder setBuffer:bits_buffer offset:0 atIndex:1];
          [encoder setBuffer:grad_table_buffer offset:0 atIndex:2];
          [encoder setBytes:&table_count length:sizeof(table_count) atIndex:3];
          mo::metal::Dispatch1D(encoder, finish, uint64_t(table_count.count));
        } else if (table_grad) {
          [encoder setBuffer:sums_buffer offset:0 atIndex:0];
          [encoder setBytes:&table_count length:sizeof(table_count) atIndex:1];
          mo::metal::Dispatch1D(encoder, zero, uint64_t(table_count.count));
          [encoder setBuffer:dy_buffer offset:0 atIndex:0];
          [encoder setBuffer:in_buffer offset:0 atIndex:1];
          [encoder setBuffer:sums_buffer offset:0 atIndex:2];
          [encoder setBytes:&params length:sizeof(params) atIndex:3];
          mo::metal::Dispatch1D(encoder, scatter, scatter_threads);
          if (half) {
            [encoder setBuffer:sums_buffer offset:0 atIndex:0];
            [encoder setBuffer:grad_table_buffer offset:0 atIndex:1];
            [encoder setBytes:&table_count length:sizeof(table_count) atIndex:2];
            mo::metal::Dispatch1D(encoder, finish, uint64_t(table_count.count));
          }
        }
        if (input_grad != nil) {
          [encoder setBuffer:dy_buffer offset:0 atIndex:0];
          [encoder setBuffer:in_buffer offset:0 atIndex:1];
          [encoder setBuffer:table_buffer offset:0 atIndex:2];
          [encoder setBuffer:grad_inputs_buffer offset:0 atIndex:3];
          [encoder setBytes:&params length:sizeof(params) atIndex:4];
          mo::metal::Dispatch1D(encoder, input_grad, uint64_t(n));
        }
        [encoder endEncoding];
        [stream commit];
      });
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteTensor(dy);
  TF_DeleteTensor(inputs);
  TF_DeleteTensor(table);
  TF_DeleteTensor(grad_table);
  TF_DeleteTensor(grad_inputs);
  TF_DeleteTensor(scratch);
  TF_DeleteTensor(max_bits);
  TF_DeleteStatus(status);
}

bool RegisterHashEncodeMetalKernels() {
  const TF_DataType types[] = {TF_FLOAT, TF_HALF};
  for (TF_DataType type : types) {
    TF_Status* status = TF_NewStatus();
    TF_KernelBuilder* forward =
        TF_NewKernelBuilder("MetalOpsHashEncode", "GPU", &CreateForward, &ForwardCompute, &DeleteKernel);
    TF_KernelBuilder_TypeConstraint(forward, "T", type, status);
    if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder("MetalOpsHashEncodeMetal", forward, status);
    TF_KernelBuilder* grad =
        TF_NewKernelBuilder("MetalOpsHashEncodeGrad", "GPU", &CreateGrad, &GradCompute, &DeleteKernel);
    TF_KernelBuilder_TypeConstraint(grad, "T", type, status);
    if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder("MetalOpsHashEncodeGradMetal", grad, status);
    TF_DeleteStatus(status);
  }
  return true;
}

const bool hash_encode_metal_kernels_registered = RegisterHashEncodeMetalKernels();

}  // namespace

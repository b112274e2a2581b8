// Runs the HashEncode Metal shaders on the CPU (see tests/metal_shim/msl_shim.h),
// in the order kernels/hash_encode/hash_encode_metal.cc encodes them, each over its
// whole dispatch grid (threads one after another). Driven by
// tests/test_hash_encode_metal_shim.py through ctypes.
#include <string>
#include <type_traits>

#include "tests/metal_shim/msl_shim.h"
#include "hash_encode.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

using mo::hash_grid::Params;
using msl_shim::Kernel;

template <typename Kernel, typename... Args>
void RunGrid(Kernel shader, uint grid, Args... args) {
  for (uint gid = 0; gid < grid; ++gid) shader(args..., gid, grid);
}

Kernel kKernels[] = {
#include "hash_encode.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

bool Supported(int dims, int features, int dtype) {
  return dims >= 1 && dims <= 4 && (features == 1 || features == 2 || features == 4 || features == 8) &&
         (dtype == 0 || dtype == 1);
}

const char* DtypeName(int dtype) { return dtype == 1 ? "float16" : "float32"; }

// The entry point hash_encode_metal.cc asks for: hash_encode_<kind>_d<D>_f<F>_<dtype>.
template <typename Fn>
Fn Shader(const char* kind, int dims, int features, int dtype) {
  return msl_shim::find_kernel<Fn>(kKernels, std::string("hash_encode_") + kind + "_d" + std::to_string(dims) +
                                                 "_f" + std::to_string(features) + "_" + DtypeName(dtype));
}

// hash_encode_<kind>_<dtype>.
template <typename Fn>
Fn Helper(const char* kind, int dtype) {
  return msl_shim::find_kernel<Fn>(kKernels, std::string("hash_encode_") + kind + "_" + DtypeName(dtype));
}

template <typename T>
struct Kernels {
  decltype(&hash_encode_forward<1, 1, T>) forward;
  decltype(&hash_encode_table_grad<1, 1, T>) table_grad;
  decltype(&hash_encode_table_grad_fixed<1, 1, T>) table_grad_fixed;
  decltype(&hash_encode_input_grad<1, 1, T>) input_grad;
  decltype(&hash_encode_max_abs<T>) max_abs;
  decltype(&hash_encode_fixed_to_table<T>) fixed_to_table;

  // Every one found by name, or false.
  bool Find(int dims, int features, int dtype) {
    forward = Shader<decltype(forward)>("forward", dims, features, dtype);
    table_grad = Shader<decltype(table_grad)>("table_grad", dims, features, dtype);
    table_grad_fixed = Shader<decltype(table_grad_fixed)>("table_grad_fixed", dims, features, dtype);
    input_grad = Shader<decltype(input_grad)>("input_grad", dims, features, dtype);
    max_abs = Helper<decltype(max_abs)>("max_abs", dtype);
    fixed_to_table = Helper<decltype(fixed_to_table)>("fixed_to_table", dtype);
    return forward && table_grad && table_grad_fixed && input_grad && max_abs && fixed_to_table;
  }
};

uint GridFor(int64_t work, uint max_grid) {
  if (work <= 0) return 1;
  return work < int64_t(max_grid) ? uint(work) : max_grid;
}

// The .mm's backward sequence for one dtype.
template <typename T>
void Backward(const Kernels<T>& k, const T* dy, const float* x, const T* table, T* grad_table, float* grad_inputs,
              bool want_table, bool want_input, bool deterministic, uint32_t* workspace, const Params& p,
              int64_t rows, int features, uint max_grid) {
  const int64_t n_table = rows * features;
  const int64_t n_dy = p.num_points * p.num_levels * features;
  const int64_t scatter_threads = p.num_points * p.num_levels;
  if (want_table) {
    if (deterministic) {
      uint32_t* pairs = workspace;
      uint32_t* bits = workspace + 2 * n_table;
      const mo::HashEncodeCountParams zero_pairs = {2 * n_table, p.num_points};
      const mo::HashEncodeCountParams zero_bits = {1, p.num_points};
      RunGrid(hash_encode_zero<int>, GridFor(2 * n_table, max_grid), reinterpret_cast<int*>(pairs), zero_pairs);
      RunGrid(hash_encode_zero<int>, GridFor(1, max_grid), reinterpret_cast<int*>(bits), zero_bits);
      const mo::HashEncodeCountParams dy_count = {n_dy, p.num_points};
      RunGrid(k.max_abs, GridFor(n_dy, max_grid), dy, reinterpret_cast<metal::atomic_uint*>(bits), dy_count);
      RunGrid(k.table_grad_fixed, GridFor(scatter_threads, max_grid), dy, x, reinterpret_cast<metal::atomic_uint*>(pairs),
              p, static_cast<const uint*>(bits));
      const mo::HashEncodeCountParams table_count = {n_table, p.num_points};
      RunGrid(k.fixed_to_table, GridFor(n_table, max_grid), static_cast<const uint*>(pairs),
              static_cast<const uint*>(bits), grad_table, table_count);
    } else {
      // float tables accumulate in grad_table itself, half tables in a float32 buffer.
      float* sums = std::is_same<T, float>::value ? reinterpret_cast<float*>(grad_table)
                                                  : reinterpret_cast<float*>(workspace);
      const mo::HashEncodeCountParams count = {n_table, p.num_points};
      RunGrid(hash_encode_zero<int>, GridFor(n_table, max_grid), reinterpret_cast<int*>(sums), count);
      RunGrid(k.table_grad, GridFor(scatter_threads, max_grid), dy, x, reinterpret_cast<metal::atomic_float*>(sums), p);
      if (!std::is_same<T, float>::value) {
        RunGrid(hash_encode_float_to<half>, GridFor(n_table, max_grid), static_cast<const float*>(sums),
                reinterpret_cast<half*>(grad_table), count);
      }
    }
  }
  if (want_input && p.num_points > 0) {
    RunGrid(k.input_grad, GridFor(p.num_points, max_grid), dy, x, table, grad_inputs, p);
  }
}

}  // namespace

extern "C" {

int64_t shim_hash_encode_table_rows(int dims, int num_levels, int log2_hashmap_size, uint32_t base_resolution,
                                    float per_level_scale) {
  Params p;
  return mo::hash_grid::make_params(dims, 0, num_levels, log2_hashmap_size, base_resolution, per_level_scale, 0, 0, &p);
}

// The per-level table make_params hands every backend's kernels (scale,
// resolution, hashed flag of levels 0 .. num_levels-1).
void shim_hash_grid_levels(int dims, int num_levels, int log2_hashmap_size, uint32_t base_resolution,
                           float per_level_scale, float* scale, uint32_t* resolution, uint32_t* hashed) {
  Params p;
  mo::hash_grid::make_params(dims, 0, num_levels, log2_hashmap_size, base_resolution, per_level_scale, 0, 0, &p);
  for (int l = 0; l < num_levels; ++l) {
    scale[l] = p.level_scale[l];
    resolution[l] = p.level_resolution[l];
    hashed[l] = p.level_hashed[l];
  }
}

// Overrides level `level`'s scale in the Params of the next forward (-1: none),
// so a test can see that the shaders use the host's table.
namespace {
int g_override_level = -1;
float g_override_scale = 0.0f;
}  // namespace
void shim_hash_encode_override_level_scale(int level, float scale) {
  g_override_level = level;
  g_override_scale = scale;
}

// dtype 0 = float32, 1 = float16 (table, encoded, grad_encoded, grad_table).
// max_grid caps the dispatch width so the shaders' grid-stride loops run.
// Returns 0, or -1 for an unsupported (dims, features, dtype).
int shim_hash_encode_forward(int dtype, const float* x, const void* table, void* encoded, int64_t n, int dims,
                             int features, int num_levels, int log2_hashmap_size, uint32_t base_resolution,
                             float per_level_scale, int interpolation, int out_of_range, uint max_grid) {
  if (!Supported(dims, features, dtype)) return -1;
  Params p;
  mo::hash_grid::make_params(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale, interpolation, out_of_range,
             &p);
  if (g_override_level >= 0 && g_override_level < num_levels) p.level_scale[g_override_level] = g_override_scale;
  const uint grid = GridFor(n * num_levels, max_grid);
  if (dtype == 0) {
    Kernels<float> k;
    if (!k.Find(dims, features, dtype)) return -2;
    RunGrid(k.forward, grid, x, static_cast<const float*>(table), static_cast<float*>(encoded), p);
  } else {
    Kernels<half> k;
    if (!k.Find(dims, features, dtype)) return -2;
    RunGrid(k.forward, grid, x, static_cast<const half*>(table), static_cast<half*>(encoded), p);
  }
  return 0;
}

// workspace: at least (2 * rows * features + 1) uint32 words.
int shim_hash_encode_backward(int dtype, const void* dy, const float* x, const void* table, void* grad_table,
                              float* grad_inputs, int table_grad, int input_grad, int deterministic,
                              uint32_t* workspace, int64_t n, int dims, int features, int num_levels,
                              int log2_hashmap_size, uint32_t base_resolution, float per_level_scale,
                              int interpolation, int out_of_range, uint max_grid) {
  if (!Supported(dims, features, dtype)) return -1;
  Params p;
  const int64_t rows = mo::hash_grid::make_params(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                                  interpolation, out_of_range, &p);
  if (dtype == 0) {
    Kernels<float> k;
    if (!k.Find(dims, features, dtype)) return -2;
    Backward(k, static_cast<const float*>(dy), x, static_cast<const float*>(table), static_cast<float*>(grad_table),
             grad_inputs, table_grad != 0, input_grad != 0, deterministic != 0, workspace, p, rows, features,
             max_grid);
  } else {
    Kernels<half> k;
    if (!k.Find(dims, features, dtype)) return -2;
    Backward(k, static_cast<const half*>(dy), x, static_cast<const half*>(table), static_cast<half*>(grad_table),
             grad_inputs, table_grad != 0, input_grad != 0, deterministic != 0, workspace, p, rows, features,
             max_grid);
  }
  return 0;
}

// Finds every entry point hash_encode_metal.cc can ask for (D 1..4, F 1, 2,
// 4, 8, both dtypes): -1 when one is missing, else the number of the
// shader's instantiations none of those names reached.
int shim_hash_encode_find_every_kernel() {
  for (int dims = 1; dims <= 4; ++dims) {
    for (int features = 1; features <= 8; features *= 2) {
      Kernels<float> k32;
      Kernels<half> k16;
      if (!k32.Find(dims, features, 0) || !k16.Find(dims, features, 1)) return -1;
    }
  }
  if (!msl_shim::find_kernel<decltype(&hash_encode_zero<int>)>(kKernels, "hash_encode_zero_u32") ||
      !msl_shim::find_kernel<decltype(&hash_encode_float_to<half>)>(kKernels, "hash_encode_float_to_half")) {
    return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"

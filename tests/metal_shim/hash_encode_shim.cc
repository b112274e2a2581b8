// Runs the HashEncode Metal shaders on the CPU (see tests/metal_shim/msl_shim.h),
// in the order kernels/metal/hash_encode_metal.mm encodes them, each over its
// whole dispatch grid (threads one after another). Driven by
// tests/test_hash_encode_metal_shim.py through ctypes.
#include <type_traits>

#include "tests/metal_shim/msl_shim.h"
#include "hash_encode.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

using mo::hash_grid::Params;

template <typename Kernel, typename... Args>
void RunGrid(Kernel shader, uint grid, Args... args) {
  for (uint gid = 0; gid < grid; ++gid) shader(args..., gid, grid);
}

bool FeatureIndex(int features, int* index) {
  switch (features) {
    case 1: *index = 0; return true;
    case 2: *index = 1; return true;
    case 4: *index = 2; return true;
    case 8: *index = 3; return true;
  }
  return false;
}

#define SHIM_ROW(KIND, D, TN) \
  { KIND##_d##D##_f1_##TN, KIND##_d##D##_f2_##TN, KIND##_d##D##_f4_##TN, KIND##_d##D##_f8_##TN }
#define SHIM_TABLE(NAME, KIND, TN)                                                                       \
  static decltype(&KIND##_d1_f1_##TN) const NAME[4][4] = {SHIM_ROW(KIND, 1, TN), SHIM_ROW(KIND, 2, TN), \
                                                         SHIM_ROW(KIND, 3, TN), SHIM_ROW(KIND, 4, TN)};

SHIM_TABLE(kForward32, hash_encode_forward, float32)
SHIM_TABLE(kForward16, hash_encode_forward, float16)
SHIM_TABLE(kTableGrad32, hash_encode_table_grad, float32)
SHIM_TABLE(kTableGrad16, hash_encode_table_grad, float16)
SHIM_TABLE(kTableGradFixed32, hash_encode_table_grad_fixed, float32)
SHIM_TABLE(kTableGradFixed16, hash_encode_table_grad_fixed, float16)
SHIM_TABLE(kInputGrad32, hash_encode_input_grad, float32)
SHIM_TABLE(kInputGrad16, hash_encode_input_grad, float16)

uint GridFor(int64_t work, uint max_grid) {
  if (work <= 0) return 1;
  return work < int64_t(max_grid) ? uint(work) : max_grid;
}

// The .mm's backward sequence for one dtype.
template <typename T, typename TableGrad, typename TableGradFixed, typename InputGrad, typename MaxAbs,
          typename FixedToTable>
void Backward(TableGrad table_grad, TableGradFixed table_grad_fixed, InputGrad input_grad, MaxAbs max_abs,
              FixedToTable fixed_to_table, const T* dy, const float* x, const T* table, T* grad_table,
              float* grad_inputs, bool want_table, bool want_input, bool deterministic, uint32_t* workspace,
              const Params& p, int64_t rows, int features, uint max_grid) {
  const int64_t n_table = rows * features;
  const int64_t n_dy = p.num_points * p.num_levels * features;
  const int64_t scatter_threads = p.num_points * p.num_levels;
  if (want_table) {
    if (deterministic) {
      uint32_t* pairs = workspace;
      uint32_t* bits = workspace + 2 * n_table;
      const HashEncodeCountParams zero_pairs = {2 * n_table, p.num_points};
      const HashEncodeCountParams zero_bits = {1, p.num_points};
      RunGrid(hash_encode_zero_u32, GridFor(2 * n_table, max_grid), pairs, zero_pairs);
      RunGrid(hash_encode_zero_u32, GridFor(1, max_grid), bits, zero_bits);
      const HashEncodeCountParams dy_count = {n_dy, p.num_points};
      RunGrid(max_abs, GridFor(n_dy, max_grid), dy, reinterpret_cast<metal::atomic_uint*>(bits), dy_count);
      RunGrid(table_grad_fixed, GridFor(scatter_threads, max_grid), dy, x, reinterpret_cast<metal::atomic_uint*>(pairs),
              p, static_cast<const uint*>(bits));
      const HashEncodeCountParams table_count = {n_table, p.num_points};
      RunGrid(fixed_to_table, GridFor(n_table, max_grid), static_cast<const uint*>(pairs),
              static_cast<const uint*>(bits), grad_table, table_count);
    } else {
      // float tables accumulate in grad_table itself, half tables in a float32 buffer.
      float* sums = std::is_same<T, float>::value ? reinterpret_cast<float*>(grad_table)
                                                  : reinterpret_cast<float*>(workspace);
      const HashEncodeCountParams count = {n_table, p.num_points};
      RunGrid(hash_encode_zero_u32, GridFor(n_table, max_grid), reinterpret_cast<uint*>(sums), count);
      RunGrid(table_grad, GridFor(scatter_threads, max_grid), dy, x, reinterpret_cast<metal::atomic_float*>(sums), p);
      if (!std::is_same<T, float>::value) {
        RunGrid(hash_encode_float_to_half, GridFor(n_table, max_grid), static_cast<const float*>(sums),
                reinterpret_cast<half*>(grad_table), count);
      }
    }
  }
  if (want_input && p.num_points > 0) {
    RunGrid(input_grad, GridFor(p.num_points, max_grid), dy, x, table, grad_inputs, p);
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
  int fi = 0;
  if (dims < 1 || dims > 4 || !FeatureIndex(features, &fi) || (dtype != 0 && dtype != 1)) return -1;
  Params p;
  mo::hash_grid::make_params(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale, interpolation, out_of_range,
             &p);
  if (g_override_level >= 0 && g_override_level < num_levels) p.level_scale[g_override_level] = g_override_scale;
  const uint grid = GridFor(n * num_levels, max_grid);
  if (dtype == 0) {
    RunGrid(kForward32[dims - 1][fi], grid, x, static_cast<const float*>(table), static_cast<float*>(encoded), p);
  } else {
    RunGrid(kForward16[dims - 1][fi], grid, x, static_cast<const half*>(table), static_cast<half*>(encoded), p);
  }
  return 0;
}

// workspace: at least (2 * rows * features + 1) uint32 words.
int shim_hash_encode_backward(int dtype, const void* dy, const float* x, const void* table, void* grad_table,
                              float* grad_inputs, int table_grad, int input_grad, int deterministic,
                              uint32_t* workspace, int64_t n, int dims, int features, int num_levels,
                              int log2_hashmap_size, uint32_t base_resolution, float per_level_scale,
                              int interpolation, int out_of_range, uint max_grid) {
  int fi = 0;
  if (dims < 1 || dims > 4 || !FeatureIndex(features, &fi) || (dtype != 0 && dtype != 1)) return -1;
  Params p;
  const int64_t rows = mo::hash_grid::make_params(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                                  interpolation, out_of_range, &p);
  if (dtype == 0) {
    Backward(kTableGrad32[dims - 1][fi], kTableGradFixed32[dims - 1][fi], kInputGrad32[dims - 1][fi],
             hash_encode_max_abs_float32, hash_encode_fixed_to_table_float32, static_cast<const float*>(dy), x,
             static_cast<const float*>(table), static_cast<float*>(grad_table), grad_inputs, table_grad != 0,
             input_grad != 0, deterministic != 0, workspace, p, rows, features, max_grid);
  } else {
    Backward(kTableGrad16[dims - 1][fi], kTableGradFixed16[dims - 1][fi], kInputGrad16[dims - 1][fi],
             hash_encode_max_abs_float16, hash_encode_fixed_to_table_float16, static_cast<const half*>(dy), x,
             static_cast<const half*>(table), static_cast<half*>(grad_table), grad_inputs, table_grad != 0,
             input_grad != 0, deterministic != 0, workspace, p, rows, features, max_grid);
  }
  return 0;
}

}  // extern "C"

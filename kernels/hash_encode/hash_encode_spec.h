// HashEncode's attribute and input checks, written once for every kernel of
// the op: the CPU kernels and CUDA registrations (through kernels/spec/checks_tf.h),
// the Metal kernels (through KernelCall::Check) and the shape functions. No
// TensorFlow API: sizes and values in, kernels/spec/checks.h's Result out. Messages
// name the argument; tests match on them.
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_SPEC_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_SPEC_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/common/hash_grid.h"
#include "kernels/spec/checks.h"

namespace mo {
namespace hash_encode {

struct GridAttrs {
  int num_levels = 0;
  int log2_hashmap_size = 0;
  int base_resolution = 0;
  float per_level_scale = 0.f;
  float log2_per_level_scale = 0.f;  // set by Grid()
  int interpolation = hash_grid::kLinear;
  int out_of_range = hash_grid::kClamp;
};

// The numeric attributes; sets log2_per_level_scale.
inline Result Grid(GridAttrs* a) {
  if (a->num_levels < 1 || a->num_levels > hash_grid::kMaxLevels) {
    return Invalid("num_levels must be in [1, ", int(hash_grid::kMaxLevels), "], got ", a->num_levels);
  }
  if (a->log2_hashmap_size < hash_grid::kMinLog2HashmapSize || a->log2_hashmap_size > hash_grid::kMaxLog2HashmapSize) {
    return Invalid("log2_hashmap_size must be in [", int(hash_grid::kMinLog2HashmapSize), ", ",
                   int(hash_grid::kMaxLog2HashmapSize), "], got ", a->log2_hashmap_size);
  }
  if (a->base_resolution < 1) return Invalid("base_resolution must be >= 1, got ", a->base_resolution);
  if (!(a->per_level_scale >= 1.0f) || std::isinf(a->per_level_scale)) {
    return Invalid("per_level_scale must be finite and >= 1, got ", a->per_level_scale);
  }
  a->log2_per_level_scale = log2_f(a->per_level_scale);
  // The finest level's vertex coordinates must fit the uint32 cell arithmetic.
  const float finest = hash_grid::level_scale(a->num_levels - 1, a->log2_per_level_scale, uint32(a->base_resolution));
  if (!(finest < 2147483520.0f)) {
    return Invalid("resolution of the finest level (base_resolution * per_level_scale^(num_levels-1) = ",
                   finest + 1.0f, ") must stay below 2^31: reduce base_resolution, per_level_scale or num_levels");
  }
  return Ok();
}

// The string attributes.
inline Result Modes(const std::string& interpolation, const std::string& out_of_range, GridAttrs* a) {
  if (interpolation == "linear") {
    a->interpolation = hash_grid::kLinear;
  } else if (interpolation == "smoothstep") {
    a->interpolation = hash_grid::kSmoothstep;
  } else {
    return Invalid("interpolation must be 'linear' or 'smoothstep', got '", interpolation, "'");
  }
  if (out_of_range == "clamp") {
    a->out_of_range = hash_grid::kClamp;
  } else if (out_of_range == "wrap") {
    a->out_of_range = hash_grid::kWrap;
  } else if (out_of_range == "zero") {
    a->out_of_range = hash_grid::kZero;
  } else {
    return Invalid("out_of_range must be 'clamp', 'wrap' or 'zero', got '", out_of_range, "'");
  }
  return Ok();
}

// The hash-grid ops, whose attributes differ.
enum class GridOp { kEncode, kEncodeGrad, kEncodeGradGrad, kOffsets };

// The attributes of a hash-grid op: the grid (every op; the modes
// interpolation and out_of_range all but HashGridOffsets), the gradient
// switches (HashEncodeGrad), input_dim (HashGridOffsets).
struct Attrs {
  GridAttrs grid;
  bool table_grad = true;
  bool input_grad = true;
  bool deterministic = false;
  int input_dim = 0;
};

// Reads (kernels/spec/checks.h ReadEach) and checks the attributes of `op`: the one
// attribute read of the shape functions, the kernel classes and the Metal
// kernels.
template <typename Get>
Result ReadAttrs(Get&& get, GridOp op, Attrs* a) {
  constexpr const char* name = "HashEncode";
  GridAttrs& g = a->grid;
  if (op == GridOp::kOffsets) {
    MO_RETURN_IF_INVALID(checks::ReadEach(get, name, "input_dim", &a->input_dim));
    if (a->input_dim < 1 || a->input_dim > hash_grid::kMaxDims) {
      return Invalid("input_dim must be in [1, 4], got ", a->input_dim);
    }
  }
  MO_RETURN_IF_INVALID(checks::ReadEach(get, name, "num_levels", &g.num_levels, "log2_hashmap_size",
                                        &g.log2_hashmap_size, "base_resolution", &g.base_resolution,
                                        "per_level_scale", &g.per_level_scale));
  if (op != GridOp::kOffsets) {
    std::string interpolation, out_of_range;
    MO_RETURN_IF_INVALID(
        checks::ReadEach(get, name, "interpolation", &interpolation, "out_of_range", &out_of_range));
    MO_RETURN_IF_INVALID(Modes(interpolation, out_of_range, &g));
  }
  if (op == GridOp::kEncodeGrad) {
    MO_RETURN_IF_INVALID(checks::ReadEach(get, name, "compute_table_grad", &a->table_grad, "compute_input_grad",
                                          &a->input_grad, "deterministic", &a->deterministic));
  }
  return Grid(&g);
}

// Table rows P of the grid (and the level offsets, offsets[0..num_levels]).
inline int64_t GridRows(int dims, const GridAttrs& a, int64_t* offsets) {
  return hash_grid::level_offsets(dims, a.num_levels, a.log2_hashmap_size, a.log2_per_level_scale,
                                  uint32(a.base_resolution), offsets);
}

// The kernels' Params for a grid, via hash_grid::make_params.
inline hash_grid::Params MakeParams(const GridAttrs& a, int dims, int64_t num_points) {
  hash_grid::Params p;
  hash_grid::make_params(dims, num_points, a.num_levels, a.log2_hashmap_size, uint32(a.base_resolution),
                         a.per_level_scale, a.interpolation, a.out_of_range, &p);
  return p;
}

// The pieces of InputsAndTable, also checked alone where a shape is partly known.
inline Result InputDim(int64_t d, const Dims& inputs) {
  if (d < 1 || d > hash_grid::kMaxDims) {
    return Invalid("inputs must be [N, D] with D in [1, 4], got D = ", d, " (shape ", ShapeString(inputs), ")");
  }
  return Ok();
}

inline Result Features(int64_t f) {
  if (f != 1 && f != 2 && f != 4 && f != 8) return Invalid("table must be [P, F] with F in {1, 2, 4, 8}, got F = ", f);
  return Ok();
}

inline Result RowsMatch(const GridAttrs& a, int64_t d, int64_t rows, int64_t expected) {
  if (rows != expected) {
    return Invalid("table has ", rows, " rows but the hash grid needs ", expected, " (hash_grid_size(input_dim=", d,
                   ", num_levels=", a.num_levels, ", log2_hashmap_size=", a.log2_hashmap_size,
                   ", base_resolution=", a.base_resolution, ", per_level_scale=", a.per_level_scale, "))");
  }
  return Ok();
}

// The table's row count against the grid's, where only shapes are known (shape functions).
inline Result TableRows(const GridAttrs& a, int64_t d, int64_t rows, int64_t* expected) {
  int64_t offsets[hash_grid::kMaxLevels + 1];
  *expected = GridRows(int(d), a, offsets);
  return RowsMatch(a, d, rows, *expected);
}

// inputs [N, D] and table [P, F] against the grid; sets D, F, P and the
// grid's Params for the kernels: the one geometry computation of a call.
inline Result InputsAndTable(const GridAttrs& a, const Dims& inputs, const Dims& table, int* dims, int* features,
                             int64_t* rows, hash_grid::Params* params) {
  if (inputs.size() != 2) return Invalid("inputs must be a rank-2 tensor [N, D], got shape ", ShapeString(inputs));
  MO_RETURN_IF_INVALID(InputDim(inputs[1], inputs));
  if (table.size() != 2) return Invalid("table must be a rank-2 tensor [P, F], got shape ", ShapeString(table));
  MO_RETURN_IF_INVALID(Features(table[1]));
  *params = MakeParams(a, int(inputs[1]), inputs[0]);
  *rows = params->level_offsets[a.num_levels];
  MO_RETURN_IF_INVALID(RowsMatch(a, inputs[1], table[0], *rows));
  *dims = int(inputs[1]);
  *features = int(table[1]);
  return Ok();
}

// D, F, P and the grid's Params, as InputsAndTable sets them.
struct TableGeometry {
  int dims = 0, features = 0;
  int64_t rows = 0;
  hash_grid::Params params;
};

inline Result InputsAndTable(const GridAttrs& a, const Dims& inputs, const Dims& table, TableGeometry* g) {
  return InputsAndTable(a, inputs, table, &g->dims, &g->features, &g->rows, &g->params);
}

// `name` ([rows, cols]: grad_encoded, grad_grad_inputs) has the expected shape.
inline Result Matrix(const char* name, const Dims& t, int64_t rows, int64_t cols) {
  if (t != Dims{rows, cols}) {
    return Invalid(name, " must have shape [", rows, ", ", cols, "], got ", ShapeString(t));
  }
  return Ok();
}

}  // namespace hash_encode
}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_SPEC_H_

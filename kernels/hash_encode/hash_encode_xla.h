// What HashEncode's XLA handlers (kernels/hash_encode/hash_encode_xla.cc: the host's;
// the CUDA ones take the same) need: the grid of the call's FFI attributes,
// rebuilt and checked by the spec's Grid(), and the sizes the buffers' shapes
// give.
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_XLA_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_XLA_H_

#include <cstdint>
#include <utility>

#include "kernels/hash_encode/hash_encode_spec.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

struct HashEncodeCall {
  hash_encode::GridAttrs grid;
  int dims = 0, features = 0;
  int64_t num_points = 0, rows = 0;  // inputs [N, D], table [P, F]
  hash_grid::Params params;          // the grid's geometry (InputsAndTable)
};

inline ffi::Error HashEncodeCallOf(int64_t num_levels, int64_t log2_hashmap_size, int64_t base_resolution,
                                   float per_level_scale, int64_t interpolation, int64_t out_of_range,
                                   const ffi::AnyBuffer& inputs, const ffi::AnyBuffer& table, HashEncodeCall* call) {
  hash_encode::GridAttrs& g = call->grid;
  g.num_levels = static_cast<int>(num_levels);
  g.log2_hashmap_size = static_cast<int>(log2_hashmap_size);
  g.base_resolution = static_cast<int>(base_resolution);
  g.per_level_scale = per_level_scale;
  g.interpolation = static_cast<int>(interpolation);
  g.out_of_range = static_cast<int>(out_of_range);
  ffi::Error error = ToError(hash_encode::Grid(&g));
  if (error.success()) {
    error = ToError(hash_encode::InputsAndTable(g, DimsOf(inputs), DimsOf(table), &call->dims, &call->features,
                                                &call->rows, &call->params));
  }
  if (error.success()) call->num_points = inputs.dimensions()[0];
  return error;
}

// A functor's arguments (HashEncodeForwardArgs, HashEncodeBackwardArgs,
// HashEncodeGradGradArgs): the call's sizes, the buffers in the struct's
// order, then the grid's geometry.
template <template <typename> class Args, typename T, typename... Buffers>
Args<T> GridArgsOf(const HashEncodeCall& c, Buffers... buffers) {
  return {c.dims, c.features, c.num_points, c.rows, buffers..., c.params};
}

// The bindings of the handlers: the grid's attributes after the buffers.
template <typename Binding>
auto BindGridAttrs(Binding binding) {
  return std::move(binding)
      .template Attr<int64_t>("num_levels")
      .template Attr<int64_t>("log2_hashmap_size")
      .template Attr<int64_t>("base_resolution")
      .template Attr<float>("per_level_scale")
      .template Attr<int64_t>("interpolation")
      .template Attr<int64_t>("out_of_range");
}

}  // namespace xla_ffi
}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_XLA_H_

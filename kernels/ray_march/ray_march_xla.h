// What RayMarchStatic's host handler (kernels/ray_march/ray_march_xla.cc) and its
// CUDA handler (kernels/ray_march/ray_march_xla_gpu.cc) share: the FFI attributes
// the XLA kernel emits, decoded by XLA into one struct (by name:
// XLA_FFI_REGISTER_STRUCT_ATTR_DECODING below); the march's attributes
// rebuilt from them and checked by the spec's AttrsFromValues, with the
// budget and the buffers' shapes; the kernels' inputs and outputs; and the
// handlers' binding.
#ifndef MO_KERNELS_RAY_MARCH_RAY_MARCH_XLA_H_
#define MO_KERNELS_RAY_MARCH_RAY_MARCH_XLA_H_

#include <cstdint>
#include <utility>

#include "kernels/ray_march/ray_march.h"
#include "kernels/ray_march/ray_march_spec.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

// The aabb as six floats, then the march's attributes and the budget.
struct RayMarchStaticCallAttrs {
  float aabb_min_x, aabb_min_y, aabb_min_z, aabb_max_x, aabb_max_y, aabb_max_z;
  int64_t grid_resolution;
  float step_size, cone_angle, max_step_size;
  int64_t max_samples, jitter, sample_budget;
};

// The march's attributes of the call (*a), checked with the budget and the
// inputs' shapes.
inline ffi::Error RayMarchStaticAttrsOf(const RayMarchStaticCallAttrs& c, const ffi::AnyBuffer& origins,
                                        const ffi::AnyBuffer& directions, const ffi::AnyBuffer& near,
                                        const ffi::AnyBuffer& far, const ffi::AnyBuffer& occupancy,
                                        const ffi::AnyBuffer& seed, ray_march::Attrs* a) {
  const float aabb[6] = {c.aabb_min_x, c.aabb_min_y, c.aabb_min_z, c.aabb_max_x, c.aabb_max_y, c.aabb_max_z};
  ffi::Error error = ToError(ray_march::AttrsFromValues(aabb, static_cast<int>(c.grid_resolution), c.step_size,
                                                        c.cone_angle, c.max_step_size, static_cast<int>(c.max_samples),
                                                        c.jitter != 0, a));
  if (error.failure()) return error;
  error = ToError(ray_march::CheckSampleBudget(c.sample_budget));
  if (error.failure()) return error;
  return ToError(ray_march::Shapes(DimsOf(origins), DimsOf(directions), DimsOf(near), DimsOf(far),
                                   DimsOf(occupancy), DimsOf(seed), *a));
}

// The kernels' inputs, with `seed` (the CUDA kernels read it from the seed's
// device buffer instead).
inline RayMarchInputs RayMarchInputsOf(const ffi::AnyBuffer& origins, const ffi::AnyBuffer& directions,
                                       const ffi::AnyBuffer& near, const ffi::AnyBuffer& far,
                                       const ffi::AnyBuffer& occupancy, uint32_t seed) {
  return {Data<float>(origins), Data<float>(directions), Data<float>(near), Data<float>(far),
          Data<uint8_t>(occupancy), seed};
}

inline RayMarchStaticOutputs RayMarchStaticOutputsOf(RetBuffer t_starts, RetBuffer t_ends, RetBuffer ray_indices,
                                                     RetBuffer ray_offsets, RetBuffer ray_counts,
                                                     RetBuffer num_samples, RetBuffer num_rays) {
  return {Data<float>(t_starts),    Data<float>(t_ends),       Data<int32_t>(ray_indices), Data<int32_t>(ray_offsets),
          Data<int32_t>(ray_counts), Data<int32_t>(num_samples), Data<int32_t>(num_rays)};
}

// `binding` (XLA's stream and scratch allocator bound, where the handler
// takes them) followed by the six inputs, the seven outputs and the
// attributes.
template <typename Binding>
auto BindRayMarchStatic(Binding&& binding) {
  return BindBuffersFrom<6, 7>(std::move(binding)).template Attrs<RayMarchStaticCallAttrs>();
}

}  // namespace xla_ffi
}  // namespace mo

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::mo::xla_ffi::RayMarchStaticCallAttrs,
                                      ::xla::ffi::StructMember<float>("aabb_min_x"),
                                      ::xla::ffi::StructMember<float>("aabb_min_y"),
                                      ::xla::ffi::StructMember<float>("aabb_min_z"),
                                      ::xla::ffi::StructMember<float>("aabb_max_x"),
                                      ::xla::ffi::StructMember<float>("aabb_max_y"),
                                      ::xla::ffi::StructMember<float>("aabb_max_z"),
                                      ::xla::ffi::StructMember<int64_t>("grid_resolution"),
                                      ::xla::ffi::StructMember<float>("step_size"),
                                      ::xla::ffi::StructMember<float>("cone_angle"),
                                      ::xla::ffi::StructMember<float>("max_step_size"),
                                      ::xla::ffi::StructMember<int64_t>("max_samples"),
                                      ::xla::ffi::StructMember<int64_t>("jitter"),
                                      ::xla::ffi::StructMember<int64_t>("sample_budget"));

#endif  // MO_KERNELS_RAY_MARCH_RAY_MARCH_XLA_H_

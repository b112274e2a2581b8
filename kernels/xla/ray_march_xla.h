// What RayMarchStatic's host handler (kernels/xla/ray_march_xla.cc) and its
// CUDA handler (kernels/xla/ray_march_xla_gpu.cc) share: the FFI attributes
// the XLA kernel emits, bound in the order both handlers take them.
#ifndef MO_KERNELS_XLA_RAY_MARCH_XLA_H_
#define MO_KERNELS_XLA_RAY_MARCH_XLA_H_

#include <cstdint>
#include <utility>

#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

// `binding` (the buffers bound) followed by RayMarchStatic's attributes:
// the aabb as six floats, then the march's attributes and the budget.
template <typename Binding>
auto BindRayMarchStaticAttrs(Binding&& binding) {
  return std::move(binding)
      .template Attr<float>("aabb_min_x")
      .template Attr<float>("aabb_min_y")
      .template Attr<float>("aabb_min_z")
      .template Attr<float>("aabb_max_x")
      .template Attr<float>("aabb_max_y")
      .template Attr<float>("aabb_max_z")
      .template Attr<int64_t>("grid_resolution")
      .template Attr<float>("step_size")
      .template Attr<float>("cone_angle")
      .template Attr<float>("max_step_size")
      .template Attr<int64_t>("max_samples")
      .template Attr<int64_t>("jitter")
      .template Attr<int64_t>("sample_budget");
}

}  // namespace xla_ffi
}  // namespace mo

#endif  // MO_KERNELS_XLA_RAY_MARCH_XLA_H_

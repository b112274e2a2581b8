// The XLA kernel of MetalOpsRayMarchStatic (kernels/xla/xla_kernel.h) and its
// host handler: the CPU functor of kernels/cpu/ray_march_cpu.h. The
// attributes travel as FFI attributes (aabb as six floats); the handler
// rebuilds and checks them with the spec's AttrsFromValues. MetalOpsRayMarch
// has no XLA kernel: its outputs' size depends on the data.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/tf_eigen.h

#include <cstdint>
#include <vector>

#include "kernels/cpu/ray_march_cpu.h"
#include "kernels/spec/ray_march_spec.h"
#include "kernels/xla/ray_march_xla.h"

namespace mo {
namespace xla_kernels {
namespace {

constexpr const char* kAabb[6] = {"aabb_min_x", "aabb_min_y", "aabb_min_z", "aabb_max_x", "aabb_max_y", "aabb_max_z"};

class RayMarchStaticXlaOp : public XlaOpKernel {
 public:
  explicit RayMarchStaticXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    const ray_march::Attrs& a = attrs_.march;
    OP_REQUIRES_OK(ctx, checks::ToStatus(ray_march::Shapes(InputDims(ctx, 0), InputDims(ctx, 1), InputDims(ctx, 2),
                                                           InputDims(ctx, 3), InputDims(ctx, 4), InputDims(ctx, 5),
                                                           a)));
    const int64_t rays = InputDims(ctx, 0)[0], budget = attrs_.sample_budget;
    FfiAttrs attrs;
    for (int i = 0; i < 6; ++i) attrs.Float(kAabb[i], a.aabb[i]);
    attrs.Int("grid_resolution", a.grid_resolution)
        .Float("step_size", a.step_size)
        .Float("cone_angle", a.cone_angle)
        .Float("max_step_size", a.max_step_size)
        .Int("max_samples", a.max_samples)
        .Int("jitter", a.jitter)
        .Int("sample_budget", budget);
    std::vector<::xla::XlaOp> inputs;
    for (int i = 0; i < 6; ++i) inputs.push_back(ctx->Input(i));
    EmitFfiCall(ctx, "MetalOpsRayMarchStatic", inputs,
                {ArrayShape(::xla::F32, {budget}), ArrayShape(::xla::F32, {budget}), ArrayShape(::xla::S32, {budget}),
                 ArrayShape(::xla::S32, {rays}), ArrayShape(::xla::S32, {rays}), ArrayShape(::xla::S32, {}),
                 ArrayShape(::xla::S32, {})},
                attrs);
  }

 private:
  ray_march::StaticAttrs attrs_;
};

MO_REGISTER_XLA_OP(Name("MetalOpsRayMarchStatic"), RayMarchStaticXlaOp);

namespace ffi = ::xla::ffi;
using xla_ffi::Data;
using xla_ffi::DimsOf;

ffi::Error Static(ffi::AnyBuffer origins, ffi::AnyBuffer directions, ffi::AnyBuffer near, ffi::AnyBuffer far,
                  ffi::AnyBuffer occupancy, ffi::AnyBuffer seed, ffi::Result<ffi::AnyBuffer> t_starts,
                  ffi::Result<ffi::AnyBuffer> t_ends, ffi::Result<ffi::AnyBuffer> ray_indices,
                  ffi::Result<ffi::AnyBuffer> ray_offsets, ffi::Result<ffi::AnyBuffer> ray_counts,
                  ffi::Result<ffi::AnyBuffer> num_samples, ffi::Result<ffi::AnyBuffer> num_rays, float aabb_min_x,
                  float aabb_min_y, float aabb_min_z, float aabb_max_x, float aabb_max_y, float aabb_max_z,
                  int64_t grid_resolution, float step_size, float cone_angle, float max_step_size, int64_t max_samples,
                  int64_t jitter, int64_t sample_budget) {
  const float aabb[6] = {aabb_min_x, aabb_min_y, aabb_min_z, aabb_max_x, aabb_max_y, aabb_max_z};
  ray_march::Attrs a;
  ffi::Error error = xla_ffi::ToError(ray_march::AttrsFromValues(
      aabb, static_cast<int>(grid_resolution), step_size, cone_angle, max_step_size, static_cast<int>(max_samples),
      jitter != 0, &a));
  if (error.failure()) return error;
  error = xla_ffi::ToError(ray_march::CheckSampleBudget(sample_budget));
  if (error.failure()) return error;
  error = xla_ffi::ToError(ray_march::Shapes(DimsOf(origins), DimsOf(directions), DimsOf(near), DimsOf(far),
                                             DimsOf(occupancy), DimsOf(seed), a));
  if (error.failure()) return error;
  const int64_t rays = origins.dimensions()[0];
  const RayMarchInputs in{Data<float>(origins), Data<float>(directions), Data<float>(near), Data<float>(far),
                          Data<uint8_t>(occupancy), static_cast<uint32_t>(*Data<int32_t>(seed))};
  const RayMarchStaticOutputs out = {Data<float>(t_starts),      Data<float>(t_ends),     Data<int32_t>(ray_indices),
                                     Data<int32_t>(ray_offsets), Data<int32_t>(ray_counts), Data<int32_t>(num_samples),
                                     Data<int32_t>(num_rays)};
  return xla_ffi::ToError(RayMarchFunctor<Eigen::ThreadPoolDevice>::Static(
      HostContext(), ray_march::MakeParams(a, rays, occupancy.dimensions()[0]), in, sample_budget, out));
}

XLA_FFI_DEFINE_HANDLER(kStatic, Static, xla_ffi::BindRayMarchStaticAttrs(xla_ffi::BindBuffers<6, 7>()));
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsRayMarchStatic", "Host", kStatic);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo

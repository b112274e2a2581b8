// The XLA kernels of MetalOpsPackedVolumeRender / MetalOpsPackedVolumeRenderGrad
// (kernels/xla/xla_kernel.h) and their host handlers: the CPU functor of
// kernels/cpu/packed_volume_render_cpu.h. The outputs' sizes follow from the
// inputs' shapes (R rays, N samples), so XLA compiles them as they are; the
// shape and attribute checks run while XLA compiles, the checks of the ray
// layout (offsets, counts) and of the samples' values in the handler, as in
// the CPU kernel, and come back as XLA errors naming the ray.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/tf_eigen.h

#include <cstdint>
#include <vector>

#include "kernels/common/render_args.h"
#include "kernels/cpu/packed_volume_render_cpu.h"
#include "kernels/spec/packed_volume_render_spec.h"
#include "kernels/xla/render_xla.h"

namespace mo {
namespace xla_kernels {
namespace {

constexpr ::tensorflow::DataType kTypes[] = {::tensorflow::DT_FLOAT, ::tensorflow::DT_DOUBLE};

// Inputs sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background (0 to 6).
absl::Status RayShapesOf(XlaOpKernelContext* ctx, const char* op, packed_volume_render::RayShapes* shapes) {
  return checks::ToStatus(packed_volume_render::InputShapes(op, InputDims(ctx, 0), InputDims(ctx, 1),
                                                            InputDims(ctx, 2), InputDims(ctx, 3), InputDims(ctx, 4),
                                                            InputDims(ctx, 5), InputDims(ctx, 6), shapes));
}

std::vector<::xla::XlaOp> Inputs(XlaOpKernelContext* ctx, int n) {
  std::vector<::xla::XlaOp> out;
  for (int i = 0; i < n; ++i) out.push_back(ctx->Input(i));
  return out;
}

class PackedVolumeRenderXlaOp : public XlaOpKernel {
 public:
  explicit PackedVolumeRenderXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, packed_volume_render::kForward, true, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    packed_volume_render::RayShapes s;
    OP_REQUIRES_OK(ctx, RayShapesOf(ctx, packed_volume_render::kForward, &s));
    const ::xla::PrimitiveType type = ElementType(ctx, 0);
    EmitFfiCall(ctx, "MetalOpsPackedVolumeRender", Inputs(ctx, 7),
                {ArrayShape(type, {s.rays, 3}), ArrayShape(type, {s.rays}), ArrayShape(type, {s.rays}),
                 ArrayShape(type, {attrs_.return_weights ? s.samples : 0})},
                FfiAttrs().Float("early_termination", attrs_.early_termination));
  }

 private:
  packed_volume_render::Attrs attrs_;
};

class PackedVolumeRenderGradXlaOp : public XlaOpKernel {
 public:
  explicit PackedVolumeRenderGradXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, packed_volume_render::kBackward, false, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    const char* op = packed_volume_render::kBackward;
    packed_volume_render::RayShapes s;
    OP_REQUIRES_OK(ctx, RayShapesOf(ctx, op, &s));
    bool has_weight_grad = false;
    OP_REQUIRES_OK(ctx, checks::ToStatus(packed_volume_render::GradInputShapes(
                            op, s, InputDims(ctx, 7), InputDims(ctx, 8), InputDims(ctx, 9), InputDims(ctx, 10),
                            InputDims(ctx, 11), InputDims(ctx, 12), InputDims(ctx, 13), InputDims(ctx, 14),
                            &has_weight_grad)));
    const ::xla::PrimitiveType type = ElementType(ctx, 0);
    EmitFfiCall(ctx, "MetalOpsPackedVolumeRenderGrad", Inputs(ctx, 15),
                {ArrayShape(type, InputDims(ctx, 0)), ArrayShape(type, InputDims(ctx, 1)),
                 ArrayShape(type, {s.rays, 3})},
                FfiAttrs().Float("early_termination", attrs_.early_termination));
  }

 private:
  packed_volume_render::Attrs attrs_;
};

MO_REGISTER_XLA_OP(Name("MetalOpsPackedVolumeRender").TypeConstraint("T", kTypes), PackedVolumeRenderXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsPackedVolumeRenderGrad").TypeConstraint("T", kTypes),
                   PackedVolumeRenderGradXlaOp);

namespace ffi = ::xla::ffi;
using xla_ffi::Data;

ffi::Error Forward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends,
                   ffi::AnyBuffer offsets, ffi::AnyBuffer counts, ffi::AnyBuffer background,
                   ffi::Result<ffi::AnyBuffer> out_rgb, ffi::Result<ffi::AnyBuffer> depth,
                   ffi::Result<ffi::AnyBuffer> opacity, ffi::Result<ffi::AnyBuffer> weights,
                   float early_termination) {
  return xla_ffi::ForType<float, double>(sigma.element_type(), "PackedVolumeRender", [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderForwardArgs<T> a = {
        xla_ffi::RenderArgsOf<T>(counts.dimensions()[0], sigma, rgb, background, early_termination),
        xla_ffi::PackedSamplesOf<T>(t_starts, t_ends, offsets, counts),
        xla_ffi::RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    if (a.rays == 0) return ffi::Error::Success();
    return xla_ffi::ToError(PackedVolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), a));
  });
}

ffi::Error Backward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends,
                    ffi::AnyBuffer offsets, ffi::AnyBuffer counts, ffi::AnyBuffer background,
                    ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity, ffi::AnyBuffer weights,
                    ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth, ffi::AnyBuffer grad_opacity,
                    ffi::AnyBuffer grad_weights, ffi::Result<ffi::AnyBuffer> grad_sigma,
                    ffi::Result<ffi::AnyBuffer> grad_samples_rgb, ffi::Result<ffi::AnyBuffer> grad_background,
                    float early_termination) {
  return xla_ffi::ForType<float, double>(sigma.element_type(), "PackedVolumeRenderGrad", [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderBackwardArgs<T> a = {
        xla_ffi::RenderArgsOf<T>(counts.dimensions()[0], sigma, rgb, background, early_termination),
        xla_ffi::PackedSamplesOf<T>(t_starts, t_ends, offsets, counts),
        xla_ffi::RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                                  grad_sigma, grad_samples_rgb, grad_background)};
    if (a.rays == 0) return ffi::Error::Success();
    return xla_ffi::ToError(PackedVolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), a));
  });
}

XLA_FFI_DEFINE_HANDLER(kForward, Forward,
                       (xla_ffi::BindBuffers<7, 4>())
                           .Attr<float>("early_termination"));
XLA_FFI_DEFINE_HANDLER(kBackward, Backward,
                       (xla_ffi::BindBuffers<15, 3>())
                           .Attr<float>("early_termination"));
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsPackedVolumeRender", "Host", kForward);
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsPackedVolumeRenderGrad", "Host", kBackward);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo

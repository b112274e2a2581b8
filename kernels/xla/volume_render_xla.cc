// The XLA kernels of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad
// (kernels/xla/xla_kernel.h) and their host handlers: the CPU functor of
// kernels/cpu/volume_render_functor.h. The shape and attribute checks run
// while XLA compiles; the checks of sigma's and t's values run in the handler
// (as in the CPU kernel) and come back as XLA errors naming the ray.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/tf_eigen.h

#include <cstdint>
#include <vector>

#include "kernels/common/render_args.h"
#include "kernels/cpu/volume_render_functor.h"
#include "kernels/spec/volume_render_spec.h"
#include "kernels/xla/render_xla.h"

namespace mo {
namespace xla_kernels {
namespace {

constexpr ::tensorflow::DataType kTypes[] = {::tensorflow::DT_FLOAT, ::tensorflow::DT_DOUBLE};

// Inputs sigma, rgb, t, background (0 to 3) against each other.
absl::Status RayShapesOf(XlaOpKernelContext* ctx, const char* op, volume_render::RayShapes* shapes) {
  return checks::ToStatus(volume_render::InputShapes(op, InputDims(ctx, 0), InputDims(ctx, 1), InputDims(ctx, 2),
                                                     InputDims(ctx, 3), shapes));
}

std::vector<::xla::XlaOp> Inputs(XlaOpKernelContext* ctx, int n) {
  std::vector<::xla::XlaOp> out;
  for (int i = 0; i < n; ++i) out.push_back(ctx->Input(i));
  return out;
}

class VolumeRenderXlaOp : public XlaOpKernel {
 public:
  explicit VolumeRenderXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, true, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    volume_render::RayShapes s;
    OP_REQUIRES_OK(ctx, RayShapesOf(ctx, volume_render::kForward, &s));
    const ::xla::PrimitiveType type = ElementType(ctx, 0);
    EmitFfiCall(ctx, "MetalOpsVolumeRender", Inputs(ctx, 4),
                {ArrayShape(type, {s.rays, 3}), ArrayShape(type, {s.rays}), ArrayShape(type, {s.rays}),
                 ArrayShape(type, {s.rays, attrs_.return_weights ? s.samples : 0})},
                FfiAttrs().Float("early_termination", attrs_.early_termination));
  }

 private:
  volume_render::Attrs attrs_;
};

class VolumeRenderGradXlaOp : public XlaOpKernel {
 public:
  explicit VolumeRenderGradXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, false, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    const char* op = volume_render::kBackward;
    volume_render::RayShapes s;
    OP_REQUIRES_OK(ctx, RayShapesOf(ctx, op, &s));
    bool has_weight_grad = false;
    OP_REQUIRES_OK(ctx, checks::ToStatus(volume_render::GradInputShapes(
                            op, s, InputDims(ctx, 4), InputDims(ctx, 5), InputDims(ctx, 6), InputDims(ctx, 7),
                            InputDims(ctx, 8), InputDims(ctx, 9), InputDims(ctx, 10), InputDims(ctx, 11),
                            &has_weight_grad)));
    const ::xla::PrimitiveType type = ElementType(ctx, 0);
    EmitFfiCall(ctx, "MetalOpsVolumeRenderGrad", Inputs(ctx, 12),
                {ArrayShape(type, InputDims(ctx, 0)), ArrayShape(type, InputDims(ctx, 1)),
                 ArrayShape(type, {s.rays, 3})},
                FfiAttrs().Float("early_termination", attrs_.early_termination));
  }

 private:
  volume_render::Attrs attrs_;
};

MO_REGISTER_XLA_OP(Name("MetalOpsVolumeRender").TypeConstraint("T", kTypes), VolumeRenderXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsVolumeRenderGrad").TypeConstraint("T", kTypes), VolumeRenderGradXlaOp);

namespace ffi = ::xla::ffi;
using xla_ffi::Data;

ffi::Error Forward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t, ffi::AnyBuffer background,
                   ffi::Result<ffi::AnyBuffer> out_rgb, ffi::Result<ffi::AnyBuffer> depth,
                   ffi::Result<ffi::AnyBuffer> opacity, ffi::Result<ffi::AnyBuffer> weights,
                   float early_termination) {
  return xla_ffi::ForType<float, double>(sigma.element_type(), "VolumeRender", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderForwardArgs<T> a = {
        xla_ffi::RenderArgsOf<T>(sigma.dimensions()[0], sigma, rgb, background, early_termination),
        {Data<T>(t)},
        xla_ffi::RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    if (a.rays == 0) return ffi::Error::Success();
    return xla_ffi::ToError(VolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), a));
  });
}

ffi::Error Backward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t, ffi::AnyBuffer background,
                    ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity, ffi::AnyBuffer weights,
                    ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth, ffi::AnyBuffer grad_opacity,
                    ffi::AnyBuffer grad_weights, ffi::Result<ffi::AnyBuffer> grad_sigma,
                    ffi::Result<ffi::AnyBuffer> grad_samples_rgb, ffi::Result<ffi::AnyBuffer> grad_background,
                    float early_termination) {
  return xla_ffi::ForType<float, double>(sigma.element_type(), "VolumeRenderGrad", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderBackwardArgs<T> a = {
        xla_ffi::RenderArgsOf<T>(sigma.dimensions()[0], sigma, rgb, background, early_termination),
        {Data<T>(t)},
        xla_ffi::RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                                  grad_sigma, grad_samples_rgb, grad_background)};
    if (a.rays == 0) return ffi::Error::Success();
    return xla_ffi::ToError(VolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), a));
  });
}

XLA_FFI_DEFINE_HANDLER(kForward, Forward,
                       (xla_ffi::BindBuffers<4, 4>())
                           .Attr<float>("early_termination"));
XLA_FFI_DEFINE_HANDLER(kBackward, Backward,
                       (xla_ffi::BindBuffers<12, 3>())
                           .Attr<float>("early_termination"));
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsVolumeRender", "Host", kForward);
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsVolumeRenderGrad", "Host", kBackward);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo

// SHEncode on Metal: the op's Metal plans (which shader of sh_encode.metal,
// one entry point per degree and dtype, which tensor slot at which buffer
// index, how many threads; every Metal path runs them: the CPU kernels'
// offload, the MSL shim, tensorflow-metal) and, on macOS, its kernels on the
// Metal PluggableDevice ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h), float32 and float16.
#include <string>

#include "kernels/sh_encode/sh_encode.h"

namespace mo::metal_plan {

namespace {
std::string SHName(const char* kind, int degree, Dtype dtype) {
  return std::string("sh_encode_") + kind + "_d" + std::to_string(degree) + "_" + DtypeSuffix(dtype);
}
}  // namespace

Plan SHEncodeForward(Dtype dtype, int64_t n, const sh_encode::Attrs& a) {
  return OnePass(kSHEncodeSlots, "sh_encode", SHName("forward", a.degree, dtype), static_cast<uint64_t>(n),
                 {{kSHEncodeDirs, kSHEncodeSlotDirs}}, {{kSHEncodeValues, kSHEncodeSlotValues}}, kSHEncodeParams,
                 SHEncodeParams{n});
}

Plan SHEncodeBackward(Dtype dtype, int64_t n, const sh_encode::Attrs& a) {
  return OnePass(kSHEncodeGradSlots, "sh_encode", SHName("backward", a.degree, dtype), static_cast<uint64_t>(n),
                 {{kSHEncodeGradGrad, kSHEncodeGradSlotGrad}, {kSHEncodeGradDirs, kSHEncodeGradSlotDirs}},
                 {{kSHEncodeGradOut, kSHEncodeGradSlotOut}}, kSHEncodeGradParams, SHEncodeParams{n});
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;
using mo::sh_encode::Attrs;

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* dirs = call.Input(0);
  if (!call.ok() || !call.Check(mo::sh_encode::DirsShape(DimsOf(dirs)))) return;
  call.RunPointwise(dirs, mo::sh_encode::OutputDims(DimsOf(dirs), a), mo::sh_encode::kPointSize, {dirs},
                    [&a](mo::metal_plan::Dtype dtype, int64_t n) {
                      return mo::metal_plan::SHEncodeForward(dtype, n, a);
                    });
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* dirs = call.Input(1);
  if (!call.ok() || !call.Check(mo::sh_encode::GradShapes(a, DimsOf(grad), DimsOf(dirs)))) return;
  call.RunPointwise(dirs, DimsOf(dirs), mo::sh_encode::kPointSize, {grad, dirs},
                    [&a](mo::metal_plan::Dtype dtype, int64_t n) {
                      return mo::metal_plan::SHEncodeBackward(dtype, n, a);
                    });
}

const bool registered_forward =
    mo::metal::RegisterWithAttrs<Attrs>("MetalOpsSHEncode", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward =
    mo::metal::RegisterWithAttrs<Attrs>("MetalOpsSHEncodeGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace
#endif  // __APPLE__

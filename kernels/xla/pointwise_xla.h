// XLA's handlers of the pointwise ops (kernels/framework/pointwise_kernel.h),
// one template for the host and CUDA: the functor that the op's TensorFlow
// kernels run, Functor<T>, on the call's buffers, n = x's elements /
// kPointSize points of one of the element types Ts, the attributes bound
// whole (MO_XLA_FFI_ATTRS). The functor's context is the library's host pool
// (kernels/xla/xla_host.h HostContext) on the host and the call's stream on
// CUDA; kOp and kGradOp name the forward and the gradient op in the errors.
// An op registers them with MO_XLA_POINTWISE_HANDLERS (below) in its
// <op>_cpu.cc (PLATFORM Host) and <op>_cuda.cc (PLATFORM CUDA); in a build
// without XLA (MO_XLA 0) the macros declare nothing.
#ifndef MO_KERNELS_XLA_POINTWISE_XLA_H_
#define MO_KERNELS_XLA_POINTWISE_XLA_H_

#include "kernels/xla/xla_host.h"  // MO_XLA

#if MO_XLA
#include <cstdint>

#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"
#if GOOGLE_CUDA
#include "kernels/xla/xla_ffi_cuda.h"
#endif

namespace mo {
namespace xla_ffi {

template <template <typename> class Functor, typename Attrs, int64_t kPointSize, const char* kOp,
          const char* kGradOp, typename... Ts>
struct Pointwise {
  // y = f(x), Functor<T>::Forward(ctx, x, n, a, y).
  template <typename Context>
  static ffi::Error Forward(Context ctx, ffi::AnyBuffer x, RetBuffer y, const Attrs& a) {
    const int64_t n = static_cast<int64_t>(x.element_count()) / kPointSize;
    return ForTypeUnlessEmpty<Ts...>(x.element_type(), n, kOp, [&](auto type) {
      using T = decltype(type);
      return ToError(Functor<T>::Forward(ctx, Data<T>(x), n, a, Data<T>(y)));
    });
  }

  // dx from the upstream gradient, Functor<T>::Backward(ctx, grad, x, n, a, dx).
  template <typename Context>
  static ffi::Error Backward(Context ctx, ffi::AnyBuffer grad, ffi::AnyBuffer x, RetBuffer dx, const Attrs& a) {
    const int64_t n = static_cast<int64_t>(x.element_count()) / kPointSize;
    return ForTypeUnlessEmpty<Ts...>(x.element_type(), n, kGradOp, [&](auto type) {
      using T = decltype(type);
      return ToError(Functor<T>::Backward(ctx, Data<T>(grad), Data<T>(x), n, a, Data<T>(dx)));
    });
  }

  // The handlers and their bindings, by platform.
  static ffi::Error HostForward(ffi::AnyBuffer x, RetBuffer y, Attrs a) {
    return Forward(xla_kernels::HostContext(), x, y, a);
  }
  static ffi::Error HostBackward(ffi::AnyBuffer grad, ffi::AnyBuffer x, RetBuffer dx, Attrs a) {
    return Backward(xla_kernels::HostContext(), grad, x, dx, a);
  }
  static auto HostForwardBinding() { return BindBuffers<1, 1>().template Attrs<Attrs>(); }
  static auto HostBackwardBinding() { return BindBuffers<2, 1>().template Attrs<Attrs>(); }
#if GOOGLE_CUDA
  static ffi::Error CUDAForward(cudaStream_t stream, ffi::AnyBuffer x, RetBuffer y, Attrs a) {
    return Forward(stream, x, y, a);
  }
  static ffi::Error CUDABackward(cudaStream_t stream, ffi::AnyBuffer grad, ffi::AnyBuffer x, RetBuffer dx, Attrs a) {
    return Backward(stream, grad, x, dx, a);
  }
  static auto CUDAForwardBinding() { return BindStreamBuffers<1, 1>().template Attrs<Attrs>(); }
  static auto CUDABackwardBinding() { return BindStreamBuffers<2, 1>().template Attrs<Attrs>(); }
#endif
};

}  // namespace xla_ffi
}  // namespace mo

// At namespace scope: the XLA handler of the pointwise op NAME (OP in its
// errors) on PLATFORM (Host or CUDA), FUNCTOR<T> of namespace NS (mo::<op>,
// with Attrs and kPointSize) for the element types given last.
#define MO_XLA_POINTWISE_HANDLER(NAME, OP, PLATFORM, FUNCTOR, NS, ...)                                         \
  MO_XLA_FFI_ATTRS(::NS::Attrs);                                                                                \
  namespace NS {                                                                                                \
  namespace {                                                                                                   \
  constexpr char kXla##PLATFORM##Op[] = OP;                                                                     \
  constexpr char kXla##PLATFORM##GradOp[] = OP "Grad";                                                         \
  using Xla##PLATFORM = ::mo::xla_ffi::Pointwise<FUNCTOR, Attrs, kPointSize, kXla##PLATFORM##Op,                \
                                                 kXla##PLATFORM##GradOp, __VA_ARGS__>;                          \
  MO_XLA_FFI_HANDLER(NAME, #PLATFORM, Xla##PLATFORM::PLATFORM##Forward, Xla##PLATFORM::PLATFORM##ForwardBinding()); \
  }                                                                                                             \
  }                                                                                                             \
  static_assert(true, "a declaration ends with a semicolon")

// MO_XLA_POINTWISE_HANDLER and the handler of its gradient op, NAME "Grad"
// (OP "Grad" in its errors).
#define MO_XLA_POINTWISE_HANDLERS(NAME, OP, PLATFORM, FUNCTOR, NS, ...)                              \
  MO_XLA_POINTWISE_HANDLER(NAME, OP, PLATFORM, FUNCTOR, NS, __VA_ARGS__);                            \
  namespace NS {                                                                                      \
  namespace {                                                                                         \
  MO_XLA_FFI_HANDLER(NAME "Grad", #PLATFORM, Xla##PLATFORM::PLATFORM##Backward,                       \
                     Xla##PLATFORM::PLATFORM##BackwardBinding());                                     \
  }                                                                                                   \
  }                                                                                                   \
  static_assert(true, "a declaration ends with a semicolon")
#else  // no XLA (macOS, Bazel): no handlers
#define MO_XLA_POINTWISE_HANDLER(...) static_assert(true, "a declaration ends with a semicolon")
#define MO_XLA_POINTWISE_HANDLERS(...) static_assert(true, "a declaration ends with a semicolon")
#endif  // MO_XLA

#endif  // MO_KERNELS_XLA_POINTWISE_XLA_H_

// ZeroOut: every element becomes zero except the one at `preserve_index`.
// The tutorial op; kept deliberately tiny so it shows the layering, not math.
// This header is the op's one description shared by every backend: the
// element rule (written once for the CPU kernel, CUDA, the Metal shader and
// the MSL shim), the op's declaration (its attribute list, MO_ZERO_OUT_ATTRS)
// and, in host code, the attributes and check that follow from it, the Metal
// plan's signature and the CUDA launcher's. The op's files (docs/ADDING_AN_OP.md):
//   zero_out_op.cc     REGISTER_OP                 zero_out_cpu.cc    CPU kernel, XLA host handler
//   zero_out.cu.cc     CUDA kernel, launcher       zero_out_cuda.cc   TF GPU kernel, XLA CUDA handler
//   zero_out.metal     Metal shader                zero_out_metal.cc  Metal plan, tensorflow-metal glue
//   zero_out_xla.cc    XLA op kernel
#ifndef MO_KERNELS_ZERO_OUT_ZERO_OUT_H_
#define MO_KERNELS_ZERO_OUT_ZERO_OUT_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of the Metal dispatch (same layout in the shader and on the host).
struct ZeroOutParams {
  int64 num_elements;
  int64 preserve_index;
};

// The shader's buffer indices (zero_out.metal, the plan of zero_out_metal.cc).
enum ZeroOutBuffers {
  kZeroOutIn = 0,
  kZeroOutOut = 1,
  kZeroOutParams = 2,  // ZeroOutParams
};

// Value of output element `i` given input element `x`.
template <typename T>
MO_FN T zero_out_element(T x, int64 i, int64 preserve_index) {
  return i == preserve_index ? x : T(0);
}

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// ZeroOut(to_zero) -> zeroed, T in {int32, int64, float, double}; its gradient
// is ZeroOut of the upstream gradient (python/metal_ops/zero_out.py).
#define MO_ZERO_OUT_ATTRS(ATTR) ATTR(preserve_index, Int64, 0, 0, INT64_MAX)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace zero_out {

// Attrs { int64_t preserve_index; }, ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("ZeroOut", MO_ZERO_OUT_ATTRS);

// A point of the kernel (kernels/framework/pointwise_kernel.h): one element.
constexpr int64_t kPointSize = 1;

// preserve_index names an element of an input of n elements (any index when
// the input is empty: there is nothing to keep). Written once for the
// TensorFlow kernels, the Metal glue and XLA's op kernel; tests match on the
// message.
inline Result PreserveIndex(int64_t preserve_index, int64_t n) {
  if (preserve_index < 0 || (n > 0 && preserve_index >= n)) {
    return Invalid("ZeroOut: preserve_index ", preserve_index, " is out of range for input 'to_zero' with ", n,
                   " elements");
  }
  return Ok();
}

// The kernels' check (kernels/framework/pointwise_kernel.h): the output has
// the input's shape, and preserve_index names one of its elements. The shape
// function leaves the index to the kernels (zero_out_op.cc).
inline Result Shapes(const Attrs& a, const Dims& to_zero, Dims* zeroed) {
  int64_t n = 1;
  for (int64_t d : to_zero) n *= d;
  MO_RETURN_IF_INVALID(PreserveIndex(a.preserve_index, n));
  *zeroed = to_zero;
  return Ok();
}

}  // namespace zero_out
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plan (zero_out_metal.cc): which shader, which tensor slot at
// which of its buffer indices (above), how many threads. Built from sizes and
// attributes only; every Metal path runs it (kernels/metal_plan/plan.h):
// slots {input, output}; n > 0 elements.
namespace mo::metal_plan {
enum ZeroOutSlots { kZeroOutInput, kZeroOutOutput, kZeroOutSlots };
Plan ZeroOut(Dtype dtype, int64_t n, const zero_out::Attrs& a);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>

// The CUDA launcher (zero_out.cu.cc), plain C++ (no TensorFlow): the TF GPU
// kernel and XLA's CUDA handler (zero_out_cuda.cc) and the C-ABI harness
// (tests/cuda/zero_out_harness.cu.cc). Writes zero_out_element(in[i], i,
// a.preserve_index) to out[i] for i < n.
namespace mo::cuda {
template <typename T>
cudaError_t LaunchZeroOut(const T* in, T* out, int64_t n, const zero_out::Attrs& a, cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA
#endif  // host code

#endif  // MO_KERNELS_ZERO_OUT_ZERO_OUT_H_

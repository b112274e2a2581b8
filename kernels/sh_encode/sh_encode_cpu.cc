// SHEncode on the CPU: the TensorFlow kernels of MetalOpsSHEncode /
// MetalOpsSHEncodeGrad (kernels/framework/pointwise_kernel.h over the CPU
// functor below) and XLA's host handlers of the same functor, for the calls
// sh_encode_xla.cc emits. The functor runs ranges of directions over the
// context's pool, the degree a compile-time constant; float16 tensors go
// through float32 scratch blocks, or the op's Metal plans where
// kernels/cpu/metal_offload.h sends the call. The formulas are sh_encode.h's.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/sh_encode/sh_encode.h"
#include "kernels/xla/pointwise_xla.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace sh_encode {
namespace {

constexpr int64_t kHalfBlock = 256;  // directions per float32 scratch block (float16 tensors)

template <int D>
void ForwardFloat(const float* dirs, int64_t n, float* values) {
  for (int64_t i = 0; i < n; ++i) {
    sh_encode_values(dirs[3 * i], dirs[3 * i + 1], dirs[3 * i + 2], D, values + i * D * D, 1);
  }
}

template <int D>
void BackwardFloat(const float* grad, const float* dirs, int64_t n, float* grad_dirs) {
  for (int64_t i = 0; i < n; ++i) {
    sh_encode_grad(dirs[3 * i], dirs[3 * i + 1], dirs[3 * i + 2], D, grad + i * D * D, 1, grad_dirs + 3 * i,
                   grad_dirs + 3 * i + 1, grad_dirs + 3 * i + 2);
  }
}

template <typename T>
void ToFloat(const T* in, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

template <typename T>
void FromFloat(const float* in, int64_t count, T* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(in[i]);
}

// Directions [begin, end).
template <int D, typename T>
void ForwardRange(const T* dirs, int64_t begin, int64_t end, T* values) {
  if constexpr (std::is_same<T, float>::value) {
    ForwardFloat<D>(dirs + 3 * begin, end - begin, values + D * D * begin);
  } else {
    float d[3 * kHalfBlock], v[D * D * kHalfBlock];
    for (int64_t b = begin; b < end; b += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, end - b);
      ToFloat(dirs + 3 * b, 3 * m, d);
      ForwardFloat<D>(d, m, v);
      FromFloat(v, D * D * m, values + D * D * b);
    }
  }
}

template <int D, typename T>
void BackwardRange(const T* grad, const T* dirs, int64_t begin, int64_t end, T* grad_dirs) {
  if constexpr (std::is_same<T, float>::value) {
    BackwardFloat<D>(grad + D * D * begin, dirs + 3 * begin, end - begin, grad_dirs + 3 * begin);
  } else {
    float g[D * D * kHalfBlock], d[3 * kHalfBlock], out[3 * kHalfBlock];
    for (int64_t b = begin; b < end; b += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, end - b);
      ToFloat(grad + D * D * b, D * D * m, g);
      ToFloat(dirs + 3 * b, 3 * m, d);
      BackwardFloat<D>(g, d, m, out);
      FromFloat(out, 3 * m, grad_dirs + 3 * b);
    }
  }
}

// fn(std::integral_constant<int, degree>) for degree in 1..4 (checked by the kernel class).
template <typename Fn>
void WithDegree(int degree, Fn&& fn) {
  switch (degree) {
    case 1: return fn(std::integral_constant<int, 1>());
    case 2: return fn(std::integral_constant<int, 2>());
    case 3: return fn(std::integral_constant<int, 3>());
    default: return fn(std::integral_constant<int, 4>());
  }
}

// The bytes of the directions [N, 3] and of the values [N, degree^2].
template <typename T>
struct Bytes {
  Bytes(int64_t n, int degree)
      : dirs(static_cast<uint64_t>(n) * 3 * sizeof(T)),
        values(static_cast<uint64_t>(n) * degree * degree * sizeof(T)) {}
  uint64_t dirs, values;
};

// One pass over the n directions: Metal's plan build() on `slots`, or on the
// CPU range(degree_constant, begin, end) over ranges of directions (the degree
// D a compile-time constant), `cycles` a value.
template <typename BuildPlan, typename Range>
absl::Status Pass(const cpu::Context& ctx, int64_t n, int degree, const BuildPlan& build,
                  std::initializer_list<metal_plan::HostTensor> slots, int cycles, const Range& range) {
  return cpu::MetalOrCpu(
      ctx, [&](const cpu::MetalRoute& metal) { return metal.Run(n * degree * degree, build, slots); },
      [&] {
        WithDegree(degree, [&](auto degree_constant) {
          constexpr int D = decltype(degree_constant)::value;
          cpu::ParallelFor(ctx, n, cycles * D * D,
                           [&](int64_t begin, int64_t end) { range(degree_constant, begin, end); });
        });
      });
}

// The functor, for n > 0 directions (dirs [n, 3], values [n, degree**2]).
template <typename T>
struct Cpu {
  static absl::Status Forward(cpu::Context ctx, const T* dirs, int64_t n, const Attrs& a, T* values) {
    const Bytes<T> b(n, a.degree);
    return Pass(
        ctx, n, a.degree, [&] { return metal_plan::SHEncodeForward(cpu::MetalDtype<T>(), n, a); },
        {cpu::Slot(dirs, b.dirs), cpu::Slot(values, b.values)}, 4,
        [&](auto d, int64_t begin, int64_t end) { ForwardRange<decltype(d)::value>(dirs, begin, end, values); });
  }

  static absl::Status Backward(cpu::Context ctx, const T* grad, const T* dirs, int64_t n, const Attrs& a,
                               T* grad_dirs) {
    const Bytes<T> b(n, a.degree);
    return Pass(
        ctx, n, a.degree, [&] { return metal_plan::SHEncodeBackward(cpu::MetalDtype<T>(), n, a); },
        {cpu::Slot(grad, b.values), cpu::Slot(dirs, b.dirs), cpu::Slot(grad_dirs, b.dirs)}, 6,
        [&](auto d, int64_t begin, int64_t end) {
          BackwardRange<decltype(d)::value>(grad, dirs, begin, end, grad_dirs);
        });
  }
};

}  // namespace
}  // namespace sh_encode
}  // namespace mo

MO_REGISTER_POINTWISE("MetalOpsSHEncode", DEVICE_CPU, ::mo::sh_encode::Cpu, ::mo::sh_encode);

// XLA's host handlers: the CPU functor above, the attributes bound whole.
MO_XLA_POINTWISE_HANDLERS("MetalOpsSHEncode", "SHEncode", Host, Cpu, mo::sh_encode, float, Eigen::half);

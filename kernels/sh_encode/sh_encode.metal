// SHEncode Metal shaders: one thread per direction (grid-stride), float32
// arithmetic for float and half tensors. The polynomials and their
// derivatives are kernels/sh_encode/sh_encode.h. Entry points, D in 1..4 and TN
// in float32 / float16, one per compile-time degree so every branch folds:
//   sh_encode_forward_d<D>_<TN>   dirs [N, 3] -> values [N, D*D]
//   sh_encode_backward_d<D>_<TN>  grad [N, D*D], dirs [N, 3] -> grad_dirs [N, 3]
#include "kernels/sh_encode/sh_encode.h"

namespace mo {
namespace sh_encode_metal {

template <int D, typename T>
inline void forward(const device T* dirs, device T* values, int64 n, uint gid, uint grid_size) {
  for (int64 i = gid; i < n; i += grid_size) {
    float v[MO_SH_MAX_OUTPUTS];
    sh_encode_values(float(dirs[3 * i]), float(dirs[3 * i + 1]), float(dirs[3 * i + 2]), D, v, 1);
    for (int k = 0; k < D * D; ++k) values[i * D * D + k] = T(v[k]);
  }
}

template <int D, typename T>
inline void backward(const device T* grad, const device T* dirs, device T* grad_dirs, int64 n, uint gid,
                     uint grid_size) {
  for (int64 i = gid; i < n; i += grid_size) {
    float g[MO_SH_MAX_OUTPUTS];
    for (int k = 0; k < D * D; ++k) g[k] = float(grad[i * D * D + k]);
    float dx, dy, dz;
    sh_encode_grad(float(dirs[3 * i]), float(dirs[3 * i + 1]), float(dirs[3 * i + 2]), D, g, 1, &dx, &dy, &dz);
    grad_dirs[3 * i] = T(dx);
    grad_dirs[3 * i + 1] = T(dy);
    grad_dirs[3 * i + 2] = T(dz);
  }
}

}  // namespace sh_encode_metal
}  // namespace mo

template <int D, typename T>
[[kernel]] void sh_encode_forward(device const T* dirs [[buffer(mo::kSHEncodeDirs)]], device T* values [[buffer(mo::kSHEncodeValues)]],
                                  constant mo::SHEncodeParams& p [[buffer(mo::kSHEncodeParams)]], uint gid [[thread_position_in_grid]],
                                  uint grid_size [[threads_per_grid]]) {
  mo::sh_encode_metal::forward<D, T>(dirs, values, p.num_points, gid, grid_size);
}

template <int D, typename T>
[[kernel]] void sh_encode_backward(device const T* grad [[buffer(mo::kSHEncodeGradGrad)]], device const T* dirs [[buffer(mo::kSHEncodeGradDirs)]],
                                   device T* grad_dirs [[buffer(mo::kSHEncodeGradOut)]],
                                   constant mo::SHEncodeParams& p [[buffer(mo::kSHEncodeGradParams)]],
                                   uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  mo::sh_encode_metal::backward<D, T>(grad, dirs, grad_dirs, p.num_points, gid, grid_size);
}

// Host names sh_encode_<kind>_d<D>_<TN>, the names the plans of sh_encode_metal.cc ask for.
template [[host_name("sh_encode_forward_d1_float32")]] [[kernel]] decltype(sh_encode_forward<1, float>) sh_encode_forward<1, float>;
template [[host_name("sh_encode_forward_d2_float32")]] [[kernel]] decltype(sh_encode_forward<2, float>) sh_encode_forward<2, float>;
template [[host_name("sh_encode_forward_d3_float32")]] [[kernel]] decltype(sh_encode_forward<3, float>) sh_encode_forward<3, float>;
template [[host_name("sh_encode_forward_d4_float32")]] [[kernel]] decltype(sh_encode_forward<4, float>) sh_encode_forward<4, float>;
template [[host_name("sh_encode_backward_d1_float32")]] [[kernel]] decltype(sh_encode_backward<1, float>) sh_encode_backward<1, float>;
template [[host_name("sh_encode_backward_d2_float32")]] [[kernel]] decltype(sh_encode_backward<2, float>) sh_encode_backward<2, float>;
template [[host_name("sh_encode_backward_d3_float32")]] [[kernel]] decltype(sh_encode_backward<3, float>) sh_encode_backward<3, float>;
template [[host_name("sh_encode_backward_d4_float32")]] [[kernel]] decltype(sh_encode_backward<4, float>) sh_encode_backward<4, float>;
template [[host_name("sh_encode_forward_d1_float16")]] [[kernel]] decltype(sh_encode_forward<1, half>) sh_encode_forward<1, half>;
template [[host_name("sh_encode_forward_d2_float16")]] [[kernel]] decltype(sh_encode_forward<2, half>) sh_encode_forward<2, half>;
template [[host_name("sh_encode_forward_d3_float16")]] [[kernel]] decltype(sh_encode_forward<3, half>) sh_encode_forward<3, half>;
template [[host_name("sh_encode_forward_d4_float16")]] [[kernel]] decltype(sh_encode_forward<4, half>) sh_encode_forward<4, half>;
template [[host_name("sh_encode_backward_d1_float16")]] [[kernel]] decltype(sh_encode_backward<1, half>) sh_encode_backward<1, half>;
template [[host_name("sh_encode_backward_d2_float16")]] [[kernel]] decltype(sh_encode_backward<2, half>) sh_encode_backward<2, half>;
template [[host_name("sh_encode_backward_d3_float16")]] [[kernel]] decltype(sh_encode_backward<3, half>) sh_encode_backward<3, half>;
template [[host_name("sh_encode_backward_d4_float16")]] [[kernel]] decltype(sh_encode_backward<4, half>) sh_encode_backward<4, half>;

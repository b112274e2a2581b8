// SHEncode Metal shaders: one thread per direction (grid-stride), float32
// arithmetic for float and half tensors. The polynomials and their
// derivatives are kernels/common/sh_encode.h. Entry points, D in 1..4 and TN
// in float32 / float16, one per compile-time degree so every branch folds:
//   sh_encode_forward_d<D>_<TN>   dirs [N, 3] -> values [N, D*D]
//   sh_encode_backward_d<D>_<TN>  grad [N, D*D], dirs [N, 3] -> grad_dirs [N, 3]
#include "kernels/common/sh_encode.h"

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

#define MO_SH_ENCODE_KERNELS(D, T, TN)                                                                  \
  kernel void sh_encode_forward_d##D##_##TN(device const T* dirs [[buffer(0)]], device T* values [[buffer(1)]],  \
                                            constant mo::SHEncodeParams& p [[buffer(2)]],                     \
                                            uint gid [[thread_position_in_grid]],                             \
                                            uint grid_size [[threads_per_grid]]) {                            \
    mo::sh_encode_metal::forward<D, T>(dirs, values, p.num_points, gid, grid_size);                            \
  }                                                                                                            \
  kernel void sh_encode_backward_d##D##_##TN(device const T* grad [[buffer(0)]], device const T* dirs [[buffer(1)]], \
                                             device T* grad_dirs [[buffer(2)]],                                \
                                             constant mo::SHEncodeParams& p [[buffer(3)]],                     \
                                             uint gid [[thread_position_in_grid]],                             \
                                             uint grid_size [[threads_per_grid]]) {                            \
    mo::sh_encode_metal::backward<D, T>(grad, dirs, grad_dirs, p.num_points, gid, grid_size);                  \
  }

#define MO_SH_ENCODE_DTYPE(T, TN) \
  MO_SH_ENCODE_KERNELS(1, T, TN)  \
  MO_SH_ENCODE_KERNELS(2, T, TN)  \
  MO_SH_ENCODE_KERNELS(3, T, TN)  \
  MO_SH_ENCODE_KERNELS(4, T, TN)

MO_SH_ENCODE_DTYPE(float, float32)
MO_SH_ENCODE_DTYPE(half, float16)

// SceneContract Metal shaders: one thread per point (grid-stride), float32
// arithmetic for float and half tensors; the formula is
// kernels/scene_contract/scene_contract.h. Entry points, NORM in l2 / linf and TN in
// float32 / float16, one per norm so its branch folds:
//   scene_contract_forward_<NORM>_<TN>   x [N, 3] -> y [N, 3]
//   scene_contract_backward_<NORM>_<TN>  grad [N, 3], x [N, 3] -> dx [N, 3]
#include "kernels/scene_contract/scene_contract.h"

template <int Norm, typename T>
[[kernel]] void scene_contract_forward(device const T* x [[buffer(mo::kSceneContractX)]],
                                       device T* y [[buffer(mo::kSceneContractY)]],
                                       constant mo::SceneContractParams& p [[buffer(mo::kSceneContractParams)]],
                                       uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  for (mo::int64 i = gid; i < p.num_points; i += grid_size) {
    float out[3];
    mo::scene_contract_forward(float(x[3 * i]), float(x[3 * i + 1]), float(x[3 * i + 2]), Norm, out);
    for (int k = 0; k < 3; ++k) y[3 * i + k] = T(out[k]);
  }
}

template <int Norm, typename T>
[[kernel]] void scene_contract_backward(device const T* grad [[buffer(mo::kSceneContractGradGrad)]],
                                        device const T* x [[buffer(mo::kSceneContractGradX)]],
                                        device T* dx [[buffer(mo::kSceneContractGradDx)]],
                                        constant mo::SceneContractParams& p [[buffer(mo::kSceneContractGradParams)]],
                                        uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  for (mo::int64 i = gid; i < p.num_points; i += grid_size) {
    float out[3];
    mo::scene_contract_grad(float(x[3 * i]), float(x[3 * i + 1]), float(x[3 * i + 2]), Norm, float(grad[3 * i]),
                            float(grad[3 * i + 1]), float(grad[3 * i + 2]), out);
    for (int k = 0; k < 3; ++k) dx[3 * i + k] = T(out[k]);
  }
}

// Host names scene_contract_<kind>_<NORM>_<TN>, the names kernels/scene_contract/scene_contract_metal.cc asks for;
// the norm as its value (0: kSceneContractL2, 1: kSceneContractLinf), as the compiled names spell it.
template [[host_name("scene_contract_forward_l2_float32")]] [[kernel]] decltype(scene_contract_forward<0, float>) scene_contract_forward<0, float>;
template [[host_name("scene_contract_forward_linf_float32")]] [[kernel]] decltype(scene_contract_forward<1, float>) scene_contract_forward<1, float>;
template [[host_name("scene_contract_forward_l2_float16")]] [[kernel]] decltype(scene_contract_forward<0, half>) scene_contract_forward<0, half>;
template [[host_name("scene_contract_forward_linf_float16")]] [[kernel]] decltype(scene_contract_forward<1, half>) scene_contract_forward<1, half>;
template [[host_name("scene_contract_backward_l2_float32")]] [[kernel]] decltype(scene_contract_backward<0, float>) scene_contract_backward<0, float>;
template [[host_name("scene_contract_backward_linf_float32")]] [[kernel]] decltype(scene_contract_backward<1, float>) scene_contract_backward<1, float>;
template [[host_name("scene_contract_backward_l2_float16")]] [[kernel]] decltype(scene_contract_backward<0, half>) scene_contract_backward<0, half>;
template [[host_name("scene_contract_backward_linf_float16")]] [[kernel]] decltype(scene_contract_backward<1, half>) scene_contract_backward<1, half>;

// CPU kernels of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad (C++ API).
// Rays are split over TensorFlow's intra-op thread pool. Each ray runs in
// three phases so the transcendental functions vectorise along the ray:
//   A (sequential adds): tau_i and the exclusive prefix sums cum_i,
//   B (SIMD, Eigen packets): alpha_i = vr_alpha(tau_i), T_i = vr_transmittance(cum_i),
//   C (sequential): K (early termination), then the sums / the suffix-trick
//     backward.
// Every formula is a function of kernels/common/volume_render.h; the GPU
// backends run the same functions one sample at a time (VrWalk).
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include "kernels/common/volume_render.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/volume_render_cpu.h"
#include "kernels/volume_render_kernel.h"
#include "kernels/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/volume_render_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace mo {
namespace {

using namespace ::mo::volume_render_cpu;  // NOLINT: the per-ray bodies
using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

// Cost of one ray for the thread-pool sharder (cycles, roughly).
int64_t RayCost(int64_t samples) { return 20 + 60 * samples; }

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct VolumeRenderFunctor<CPUDevice, T> {
  static absl::Status Forward(OpKernelContext* ctx, const VolumeRenderForwardArgs<T>& a) {
    const int64_t S = a.samples;
    const bool write_weights = a.weights != nullptr;
    // The smallest invalid ray (if any) is reported; threads race only to lower it.
    std::mutex error_mutex;
    int64_t bad_ray = std::numeric_limits<int64_t>::max();
    VrCheck bad_check = {kVrOk, 0};
    cpu::ParallelFor(ctx, a.rays, RayCost(S), [&](int64_t begin, int64_t end) {
      RayScratch<T> scratch(S);
      for (int64_t r = begin; r < end; ++r) {
        const T* sigma_r = a.sigma + r * S;
        const T* t_r = a.t + r * (S + 1);
        T* out_rgb_r = a.out_rgb + r * 3;
        T* weights_r = write_weights ? a.weights + r * S : nullptr;
        if (!AllValid(sigma_r, t_r, S)) {
          const VrCheck check = vr_check_ray(sigma_r, t_r, S);
          vr_write_invalid(out_rgb_r, a.depth + r, a.opacity + r, weights_r, S, write_weights);
          std::lock_guard<std::mutex> lock(error_mutex);
          if (r < bad_ray) {
            bad_ray = r;
            bad_check = check;
          }
          continue;
        }
        ForwardRay(&scratch, a, r);
      }
    });
    if (bad_check.code == kVrOk) return absl::OkStatus();
    return checks::ToStatus(volume_render::BadRay(bad_check, bad_ray, a.sigma + bad_ray * S, a.t + bad_ray * (S + 1)));
  }

  static absl::Status Backward(OpKernelContext* ctx, const VolumeRenderBackwardArgs<T>& a) {
    const int64_t S = a.samples;
    cpu::ParallelFor(ctx, a.rays, RayCost(S), [&](int64_t begin, int64_t end) {
      RayScratch<T> scratch(S);
      for (int64_t r = begin; r < end; ++r) BackwardRay(&scratch, a, r);
    });
    return absl::OkStatus();
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_CPU, CPUDevice, double);

}  // namespace mo

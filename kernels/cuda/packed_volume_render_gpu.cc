// The CUDA functor of MetalOpsPackedVolumeRender / ...Grad (the kernel
// classes are kernels/packed_volume_render_kernel.h) and the GPU registrations.
// Compiled only when the installed TensorFlow is a CUDA build: the Makefile
// then defines GOOGLE_CUDA and links kernels/cuda/packed_volume_render.cu.cc.
// The launchers are tested through the harness (tests/cuda).
#if GOOGLE_CUDA
#define EIGEN_USE_GPU
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <vector>

#include "kernels/common/packed_volume_render.h"
#include "kernels/cuda/packed_volume_render.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/packed_volume_render_kernel.h"
#include "kernels/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/packed_volume_render_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {
namespace {

// A device word for the first invalid ray, set to UINT64_MAX.
absl::Status AllocateBadRay(::tensorflow::OpKernelContext* ctx, ::tensorflow::Tensor* word,
                            unsigned long long** bad) {
  TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), word));
  *bad = reinterpret_cast<unsigned long long*>(word->flat<int64_t>().data());
  return cuda::CudaStatus("MetalOpsPackedVolumeRender CUDA check",
                          cudaMemsetAsync(*bad, 0xFF, sizeof(unsigned long long), cuda::Stream(ctx)));
}

// After the launch: reads the first invalid ray back and, when there is one,
// copies the few values its message needs to the host and runs the CPU
// kernel's checks on them (the same message on both devices).
template <typename T>
absl::Status FirstBadRay(::tensorflow::OpKernelContext* ctx, const char* op, cudaError_t err,
                         const unsigned long long* bad, int64_t R, int64_t N, const int32_t* offsets,
                         const int32_t* counts, const T* sigma, const T* t_starts, const T* t_ends) {
  const cudaStream_t stream = cuda::Stream(ctx);
  unsigned long long host_bad = ~0ull;
  if (err == cudaSuccess) err = cuda::CopyToHost(&host_bad, bad, sizeof(host_bad), stream);
  TF_RETURN_IF_ERROR(cuda::LaunchStatus(op, err));
  if (host_bad == ~0ull) return absl::OkStatus();
  const int64_t r = static_cast<int64_t>(host_bad);
  const int64_t first = r > 0 ? r - 1 : r;
  const size_t n = r > 0 ? 2 : 1;
  int32_t off[2] = {0, 0}, cnt[2] = {0, 0};
  err = cuda::CopyToHost(off, offsets + first, n * sizeof(int32_t), stream);
  if (err == cudaSuccess) err = cuda::CopyToHost(cnt, counts + first, n * sizeof(int32_t), stream);
  TF_RETURN_IF_ERROR(cuda::CudaStatus("MetalOpsPackedVolumeRender CUDA check", err));
  const int64_t prev_end = r > 0 ? int64_t{off[0]} + cnt[0] : 0;
  const int64_t offset = off[n - 1], count = cnt[n - 1];
  const int32_t code = pvr_layout_code(r, R, N, prev_end, offset, count);
  if (code != kVrOk) return checks::ToStatus(packed_volume_render::BadLayout(op, code, r, N, prev_end, offset, count));
  std::vector<T> s(count), t0(count), t1(count);
  err = cuda::CopyToHost(s.data(), sigma + offset, count * sizeof(T), stream);
  if (err == cudaSuccess) err = cuda::CopyToHost(t0.data(), t_starts + offset, count * sizeof(T), stream);
  if (err == cudaSuccess) err = cuda::CopyToHost(t1.data(), t_ends + offset, count * sizeof(T), stream);
  TF_RETURN_IF_ERROR(cuda::CudaStatus("MetalOpsPackedVolumeRender CUDA check", err));
  const VrCheck check = vr_check_samples(s.data(), t0.data(), t1.data(), count);
  if (check.code == kVrOk) return ::tensorflow::errors::Internal(op, ": ray ", r, " was reported invalid");
  const int64_t i = check.sample;
  return checks::ToStatus(packed_volume_render::BadSample(check.code, r, offset + i, s[i], t0[i], t1[i]));
}

// Launches launch(a, bad_ray, stream) with a device word for the first
// invalid ray, and returns FirstBadRay's verdict.
template <typename Args, typename Launch>
absl::Status LaunchChecked(::tensorflow::OpKernelContext* ctx, const char* op, const Args& a, Launch launch) {
  ::tensorflow::Tensor word;
  unsigned long long* bad = nullptr;
  TF_RETURN_IF_ERROR(AllocateBadRay(ctx, &word, &bad));
  const cudaError_t err = launch(a, bad, cuda::Stream(ctx));
  return FirstBadRay(ctx, op, err, bad, a.rays, a.samples, a.offsets, a.counts, a.sigma, a.t_starts, a.t_ends);
}

}  // namespace

template <typename T>
struct PackedVolumeRenderFunctor<GPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderForwardArgs<T>& a) {
    return LaunchChecked(ctx, packed_volume_render::kForward, a, cuda::LaunchPackedVolumeRenderForward<T>);
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderBackwardArgs<T>& a) {
    return LaunchChecked(ctx, packed_volume_render::kBackward, a, cuda::LaunchPackedVolumeRenderBackward<T>);
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_GPU, GPUDevice, double);

}  // namespace mo

#endif  // GOOGLE_CUDA

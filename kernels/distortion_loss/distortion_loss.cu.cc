// DistortionLoss's CUDA kernels and their launchers (declared in
// distortion_loss.h): one warp per ray, 32 samples per round, warp
// prefix sums with shuffles (coalesced loads, O(S) work per ray). The
// per-sample arithmetic is kernels/distortion_loss/distortion_loss.h.
#include "kernels/distortion_loss/distortion_loss.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/warp.h"

namespace mo {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;

__device__ __forceinline__ float WarpInclusiveScan(float v, int lane) {
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float other = __shfl_up_sync(kFullWarp, v, offset);
    if (lane >= offset) v += other;
  }
  return v;
}

// The 64-bit warp-stride loop over rays, one warp per ray.
__device__ __forceinline__ int64_t GlobalWarpIndex() { return GlobalThreadIndex() >> 5; }
__device__ __forceinline__ int64_t GlobalWarpCount() { return GlobalThreadCount() >> 5; }

unsigned int WarpBlocks(int64_t rays) {
  const int64_t wanted = (rays + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(wanted, 65535LL * 32)));
}

__global__ void DistortionCheckKernel(const float* __restrict__ t, int64_t rays, int64_t samples,
                                      unsigned long long* first_bad) {
  for (int64_t r = GlobalThreadIndex(); r < rays; r += GlobalThreadCount()) {
    if (dl_first_decrease(t + r * (samples + 1), samples) >= 0) {
      atomicMin(first_bad, static_cast<unsigned long long>(r));
    }
  }
}

// Lane `lane`'s sample i = base + lane of one round of a ray (zeros past the
// end, `samples`): its weight, midpoint (dl_mid) and width, whether t
// decreases there, and the sums of w and w * m over the ray's samples before
// it (carry_*: the rounds before). round_*: the round's totals, for the carry.
struct RoundSample {
  float w, m, d, wm;
  bool decreasing;
  float w_below, wm_below, round_w, round_wm;
};

__device__ __forceinline__ RoundSample LoadRound(const float* wr, const float* tr, float t_first, int64_t i,
                                                 int64_t samples, int lane, float carry_w, float carry_wm) {
  RoundSample s = {0.0f, 0.0f, 0.0f, 0.0f, false, 0.0f, 0.0f, 0.0f, 0.0f};
  if (i < samples) {
    const float ta = tr[i], tb = tr[i + 1];
    s.decreasing = !(tb >= ta);
    s.w = wr[i];
    s.m = dl_mid(ta, tb, t_first);
    s.d = tb - ta;
  }
  s.wm = s.w * s.m;
  const float inc_w = WarpInclusiveScan(s.w, lane);
  const float inc_wm = WarpInclusiveScan(s.wm, lane);
  float exc_w = __shfl_up_sync(kFullWarp, inc_w, 1);
  float exc_wm = __shfl_up_sync(kFullWarp, inc_wm, 1);
  if (lane == 0) exc_w = exc_wm = 0.0f;
  s.w_below = carry_w + exc_w;
  s.wm_below = carry_wm + exc_wm;
  s.round_w = __shfl_sync(kFullWarp, inc_w, 31);
  s.round_wm = __shfl_sync(kFullWarp, inc_wm, 31);
  return s;
}

__global__ void DistortionForwardKernel(const float* __restrict__ w, const float* __restrict__ t,
                                        float* __restrict__ loss, int64_t rays, int64_t samples) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = GlobalWarpIndex(); r < rays; r += GlobalWarpCount()) {
    const float* wr = w + r * samples;
    const float* tr = t + r * (samples + 1);
    const float t_first = tr[0];
    float carry_w = 0.0f, carry_wm = 0.0f, acc = 0.0f;
    bool bad = false;
    for (int64_t base = 0; base < samples; base += 32) {
      const int64_t i = base + lane;
      const RoundSample smp = LoadRound(wr, tr, t_first, i, samples, lane, carry_w, carry_wm);
      bad |= smp.decreasing;
      if (i < samples) acc += dl_sample_loss(smp.w, smp.m, smp.d, smp.w_below, smp.wm_below);
      carry_w += smp.round_w;
      carry_wm += smp.round_wm;
    }
    acc = WarpSum(acc);
    bad = __any_sync(kFullWarp, bad);
    if (lane == 0) loss[r] = bad ? NAN : acc;
  }
}

__global__ void DistortionBackwardKernel(const float* __restrict__ grad, const float* __restrict__ w,
                                         const float* __restrict__ t, float* __restrict__ grad_w,
                                         float* __restrict__ grad_t, int64_t rays, int64_t samples) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = GlobalWarpIndex(); r < rays; r += GlobalWarpCount()) {
    const float* wr = w + r * samples;
    const float* tr = t + r * (samples + 1);
    float* gwr = grad_w + r * samples;
    float* gtr = grad_t + r * (samples + 1);
    const float g = grad[r];
    const float t_first = tr[0];
    // Pass 1: totals and the sortedness check.
    float tot_w = 0.0f, tot_wm = 0.0f;
    bool bad = false;
    for (int64_t i = lane; i < samples; i += 32) {
      const float ta = tr[i], tb = tr[i + 1];
      bad |= !(tb >= ta);
      tot_w += wr[i];
      tot_wm += wr[i] * dl_mid(ta, tb, t_first);
    }
    tot_w = WarpSum(tot_w);
    tot_wm = WarpSum(tot_wm);
    if (__any_sync(kFullWarp, bad)) {
      for (int64_t i = lane; i < samples; i += 32) gwr[i] = NAN;
      for (int64_t k = lane; k <= samples; k += 32) gtr[k] = NAN;
      continue;
    }
    // Pass 2: per-sample terms with running prefix sums; dL/dt_i needs the
    // left neighbour's dL/dm, dL/dd (previous lane, or the previous round).
    float carry_w = 0.0f, carry_wm = 0.0f, carry_gm = 0.0f, carry_gd = 0.0f;
    for (int64_t base = 0; base < samples; base += 32) {
      const int64_t i = base + lane;
      const RoundSample smp = LoadRound(wr, tr, t_first, i, samples, lane, carry_w, carry_wm);
      const float w_above = tot_w - smp.w_below - smp.w, wm_above = tot_wm - smp.wm_below - smp.wm;
      float gm = 0.0f, gd = 0.0f;
      if (i < samples) {
        gwr[i] = g * dl_sample_grad_w(smp.w, smp.m, smp.d, smp.w_below, smp.wm_below, w_above, wm_above);
        gm = dl_sample_grad_m(smp.w, smp.w_below, w_above);
        gd = dl_sample_grad_d(smp.w);
      }
      float gm_left = __shfl_up_sync(kFullWarp, gm, 1);
      float gd_left = __shfl_up_sync(kFullWarp, gd, 1);
      if (lane == 0) {
        gm_left = carry_gm;
        gd_left = carry_gd;
      }
      if (i < samples) gtr[i] = g * dl_grad_t(gm_left, gd_left, gm, gd);
      const int64_t rest = samples - 1 - base;
      const int last = rest < 31 ? static_cast<int>(rest) : 31;
      carry_gm = __shfl_sync(kFullWarp, gm, last);
      carry_gd = __shfl_sync(kFullWarp, gd, last);
      carry_w += smp.round_w;
      carry_wm += smp.round_wm;
    }
    if (lane == 0) gtr[samples] = g * dl_grad_t(carry_gm, carry_gd, 0.0f, 0.0f);
  }
}

}  // namespace

cudaError_t LaunchDistortionLossCheck(const float* t, int64_t rays, int64_t samples,
                                      unsigned long long* first_bad, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream);
  if (err != cudaSuccess || rays == 0) return err;
  DistortionCheckKernel<<<GridStrideBlocks(rays), kThreadsPerBlock, 0, stream>>>(t, rays, samples, first_bad);
  return cudaGetLastError();
}

cudaError_t LaunchDistortionLossForward(const float* weights, const float* t, float* loss,
                                        int64_t rays, int64_t samples, cudaStream_t stream) {
  if (rays == 0) return cudaSuccess;
  DistortionForwardKernel<<<WarpBlocks(rays), kThreadsPerBlock, 0, stream>>>(weights, t, loss, rays, samples);
  return cudaGetLastError();
}

cudaError_t LaunchDistortionLossBackward(const float* grad, const float* weights, const float* t,
                                         float* grad_weights, float* grad_t, int64_t rays,
                                         int64_t samples, cudaStream_t stream) {
  if (rays == 0) return cudaSuccess;
  DistortionBackwardKernel<<<WarpBlocks(rays), kThreadsPerBlock, 0, stream>>>(
      grad, weights, t, grad_weights, grad_t, rays, samples);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo

// Reductions over a whole warp (every lane of the warp calls them, the
// 32-lane shuffles of CUDA's sm_30 and later). Device code only.
#ifndef MO_KERNELS_CUDA_WARP_H_
#define MO_KERNELS_CUDA_WARP_H_

#include <type_traits>

namespace mo {
namespace cuda {

constexpr unsigned kFullWarp = 0xffffffffu;

// The warp's sum of v, in every lane.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

// The warp's largest v, in every lane.
__device__ __forceinline__ int WarpMax(int v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

// How many of kN values are still held apart before round r (offset 16 >> r)
// of WarpSumSpread: each round pairs them off, an odd one out kept whole.
constexpr int SpreadCount(int n, int r) { return r == 0 ? n : SpreadCount(n, r - 1) / 2 + SpreadCount(n, r - 1) % 2; }

// One round of WarpSumSpread, then the rounds after it. T is float (the
// sums: a kept value plus the partner's sent one) or int (WarpSpreadIndex:
// which value each slot holds, following the kept values without shuffles).
template <int kN, int kRound, typename T>
__device__ __forceinline__ void SpreadRounds(T (&v)[kN], int lane) {
  if constexpr (kRound < 5) {
    constexpr int offset = 16 >> kRound, count = SpreadCount(kN, kRound), half = count / 2;
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int k = 0; k < half; ++k) {
      const T send = upper ? v[k] : v[k + half];
      const T keep = upper ? v[k + half] : v[k];
      if constexpr (std::is_same_v<T, float>) {
        v[k] = keep + __shfl_xor_sync(kFullWarp, send, offset);
      } else {
        v[k] = keep;
      }
    }
    if constexpr (count % 2 == 1) {
      if constexpr (std::is_same_v<T, float>) {
        v[half] = v[count - 1] + __shfl_xor_sync(kFullWarp, v[count - 1], offset);
      } else {
        v[half] = v[count - 1];
      }
    }
    SpreadRounds<kN, kRound + 1>(v, lane);
  }
}

// The warp's sums of kN values per lane, spread over the lanes: each lane's
// v[0] ends as the sum over the warp of value WarpSpreadIndex<kN>(lane).
// Each round sends half of the values still held to the lane `offset` away
// and keeps the other half (lanes above take the upper half), so the kN sums
// take about kN + 5 shuffles where kN separate sums take 5 kN, and the sums
// end in kN different lanes, ready for one store or atomic per lane.
template <int kN>
__device__ __forceinline__ void WarpSumSpread(float (&v)[kN]) {
  SpreadRounds<kN, 0>(v, static_cast<int>(threadIdx.x) & 31);
}

// Which of WarpSumSpread's kN sums lane `lane` holds.
template <int kN>
__device__ __forceinline__ int WarpSpreadIndex(int lane) {
  int index[kN];
#pragma unroll
  for (int k = 0; k < kN; ++k) index[k] = k;
  SpreadRounds<kN, 0>(index, lane);
  return index[0];
}

// Whether `lane` is the lowest lane holding its sum of WarpSumSpread<kN>:
// the one lane per sum that stores it.
template <int kN>
__device__ __forceinline__ bool WarpSpreadHolder(int lane) {
  const int index = WarpSpreadIndex<kN>(lane);
  const unsigned same = __match_any_sync(kFullWarp, index);
  return (same & ((1u << lane) - 1u)) == 0;
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_WARP_H_

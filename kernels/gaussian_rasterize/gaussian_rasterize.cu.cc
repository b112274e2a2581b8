// GaussianRasterize CUDA kernels and their launchers (declared in gaussian_rasterize.h),
// laid out as gsplat's rasterize_to_pixels: one block per tile, one thread per
// pixel; the tile's Gaussians are loaded in batches of one per thread into
// shared memory (id, mean, conic, opacity) and every thread walks the batch.
// The forward stops loading once every pixel of the tile is done; the
// backward walks the batches back to front from the block's largest
// last_ids (a warp starts at its own largest), with the batch's colours in
// shared memory too. A warp none of whose pixels a Gaussian touches skips it,
// as gsplat's does; otherwise the warp sums the Gaussian's whole gradient row
// at once (kernels/cuda/warp.h's WarpSumSpread: about 12 shuffles for 9
// values where separate sums take 45) and the row's sums, left in different
// lanes, go out in one atomicAdd instruction (per thread where the tile is
// not a whole number of warps). The per-pixel arithmetic is
// kernels/gaussian_rasterize/gaussian_rasterize.h's. Colours are templated on
// 1 to 4 channels (held in registers); more channels are read and summed in
// global memory.
#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/warp.h"
#include "kernels/gaussian_rasterize/gaussian_rasterize.h"

namespace mo {
namespace cuda {
namespace {

// A tile's pixels and its range of gaussian_ids, clamped into [0, m].
struct TileView {
  int64_t tile;
  int i, j;       // this thread's pixel
  bool inside;    // the pixel lies in the image
  int start, end;
};

__device__ __forceinline__ TileView ViewOf(const int32_t* ranges, int64_t m, const gaussian_rasterize::Attrs& a,
                                           int tiles_x) {
  TileView v;
  v.tile = blockIdx.x;
  const int ts = a.tile_size;
  v.i = static_cast<int>(v.tile / tiles_x) * ts + static_cast<int>(threadIdx.x) / ts;
  v.j = static_cast<int>(v.tile % tiles_x) * ts + static_cast<int>(threadIdx.x) % ts;
  v.inside = v.i < a.height && v.j < a.width;
  const int64_t s = ranges[2 * v.tile], e = ranges[2 * v.tile + 1];
  v.start = static_cast<int>(s < 0 ? 0 : s > m ? m : s);
  v.end = static_cast<int>(e < v.start ? v.start : e > m ? m : e);
  return v;
}

// The shared batch: ids, means, conics and opacities, and (the backward's)
// `colors` channels of colour per Gaussian. An id out of [0, n) is loaded as
// Gaussian 0 with opacity 0, which every pixel skips (alpha 0): the loops
// need no test of their own.
struct Batch {
  int32_t* id;
  float2* mean;
  float4* conic_opacity;  // a, b, c, opacity
  float* color;           // [block, colors]
};

__device__ __forceinline__ Batch BatchOf(void* shared, int block) {
  Batch b;
  b.conic_opacity = static_cast<float4*>(shared);
  b.mean = reinterpret_cast<float2*>(b.conic_opacity + block);
  b.id = reinterpret_cast<int32_t*>(b.mean + block);
  b.color = reinterpret_cast<float*>(b.id + block);
  return b;
}

inline size_t BatchBytes(int block, int colors) {
  return static_cast<size_t>(block) * (sizeof(float4) + sizeof(float2) + 4 + 4 * static_cast<size_t>(colors));
}

template <int kColors = 0>
__device__ __forceinline__ void Load(const Batch& b, int slot, int k, const int32_t* ids, const float* means2d,
                                     const float* conics, const float* opacities, const float* colors, int64_t n) {
  const int32_t g = ids[k];
  if (g < 0 || g >= n) {
    b.id[slot] = 0;
    b.mean[slot] = make_float2(0.0f, 0.0f);
    b.conic_opacity[slot] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int c = 0; c < kColors; ++c) b.color[slot * kColors + c] = 0.0f;
    return;
  }
  b.id[slot] = g;
  b.mean[slot] = make_float2(means2d[2 * g], means2d[2 * g + 1]);
  b.conic_opacity[slot] = make_float4(conics[3 * g], conics[3 * g + 1], conics[3 * g + 2], opacities[g]);
  for (int c = 0; c < kColors; ++c) b.color[slot * kColors + c] = colors[static_cast<int64_t>(g) * kColors + c];
}

// kC channels in registers, or (kC 0) `channels` accumulated in the image.
template <int kC>
__global__ void GaussianRasterizeForwardKernel(const float* __restrict__ means2d, const float* __restrict__ conics,
                                               const float* __restrict__ colors, const float* __restrict__ opacities,
                                               const float* __restrict__ background, const int32_t* __restrict__ ids,
                                               const int32_t* __restrict__ ranges, int64_t n, int channels, int64_t m,
                                               gaussian_rasterize::Attrs a, int tiles_x, float* __restrict__ image,
                                               float* __restrict__ alpha, int32_t* __restrict__ last_ids) {
  extern __shared__ float4 shared[];
  const int block = a.tile_size * a.tile_size;
  const Batch batch = BatchOf(shared, block);
  const TileView v = ViewOf(ranges, m, a, tiles_x);
  const int C = kC > 0 ? kC : channels;
  const int64_t p = static_cast<int64_t>(v.i) * a.width + v.j;
  float local[kC > 0 ? kC : 1];
  float* acc = kC > 0 ? local : image + p * C;
  if (kC > 0 || v.inside) {
    for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  }
  const float px = static_cast<float>(v.j) + 0.5f, py = static_cast<float>(v.i) + 0.5f;
  float t = 1.0f;
  int last = v.start;
  bool done = !v.inside;
  for (int base = v.start; base < v.end; base += block) {
    if (__syncthreads_count(done) == block) break;
    if (base + static_cast<int>(threadIdx.x) < v.end) {
      Load(batch, threadIdx.x, base + threadIdx.x, ids, means2d, conics, opacities, colors, n);
    }
    __syncthreads();
    const int count = min(block, v.end - base);
    for (int b = 0; b < count && !done; ++b) {
      const float2 xy = batch.mean[b];
      const float4 co = batch.conic_opacity[b];
      const int step = gs_forward_step(xy.x, xy.y, co.x, co.y, co.z, co.w,
                                       colors + static_cast<int64_t>(batch.id[b]) * C, C, px, py, &t, acc);
      if (step == kGsDone) done = true;
      if (step == kGsComposited) last = base + b + 1;
    }
  }
  if (!v.inside) return;
  float* out = image + p * C;
  for (int c = 0; c < C; ++c) out[c] = acc[c] + t * background[c];
  alpha[p] = 1.0f - t;
  last_ids[p] = last;
}

// A row of floats that `row[k] += x` adds to atomically (wide colours' gradients).
struct AtomicRef {
  float* p;
  __device__ __forceinline__ void operator+=(float x) const { atomicAdd(p, x); }
};
struct AtomicRow {
  float* p;
  __device__ __forceinline__ AtomicRef operator[](int k) const { return AtomicRef{p + k}; }
};

// Where entry `index` of a Gaussian's gradient row (GsRow: means 2, conic 3,
// opacity, then kC colours) goes: out + g * stride.
struct RowTarget {
  float* out;
  int stride;
};

template <int kC>
__device__ __forceinline__ RowTarget TargetOf(int index, float* grad_means2d, float* grad_conics,
                                              float* grad_opacities, float* grad_colors) {
  if (index < kGsRowConic) return RowTarget{grad_means2d + index, 2};
  if (index < kGsRowOpacity) return RowTarget{grad_conics + index - kGsRowConic, 3};
  if (index == kGsRowOpacity) return RowTarget{grad_opacities, 1};
  return RowTarget{grad_colors + index - kGsRowColor, kC};
}

__device__ __forceinline__ void AddTo(const RowTarget& t, int32_t g, float value) {
  if (value != 0.0f) atomicAdd(t.out + static_cast<int64_t>(g) * t.stride, value);
}

// The backward's blocks of at most 256 threads (16-pixel tiles and smaller)
// are held to the registers that let five of them share an SM of 64K
// registers (48 a thread, nothing spilled) where the compiler's own choice
// (51 to 61) leaves four: more warps to hide the shuffles' and shared
// memory's latency.
constexpr int kSmallBlock = 256;
constexpr int MinBlocksPerSm(int max_threads) { return max_threads <= kSmallBlock ? 5 : 1; }

// kC as the forward's (with kC 0 the colours' gradients are added per thread
// as they are computed). kWhole: the block is whole warps, and each
// Gaussian's gradient row is summed over a warp (WarpSumSpread: the row's
// sums end in different lanes, each added with one atomicAdd by the lane that
// holds it); else every thread adds its own. kMaxThreads: the block's threads
// are at most this.
template <int kC, bool kWhole, int kMaxThreads>
__global__ void __launch_bounds__(kMaxThreads, MinBlocksPerSm(kMaxThreads)) GaussianRasterizeBackwardKernel(
    const float* __restrict__ means2d, const float* __restrict__ conics, const float* __restrict__ colors,
    const float* __restrict__ opacities, const float* __restrict__ background, const int32_t* __restrict__ ids,
    const int32_t* __restrict__ ranges, const float* __restrict__ alpha, const int32_t* __restrict__ last_ids,
    const float* __restrict__ grad_image, const float* __restrict__ grad_alpha, int64_t n, int channels, int64_t m,
    gaussian_rasterize::Attrs a, int tiles_x, float* __restrict__ grad_means2d, float* __restrict__ grad_conics,
    float* __restrict__ grad_colors, float* __restrict__ grad_opacities, float* __restrict__ grad_background) {
  constexpr int kRow = kGsRowColor + kC;  // the summed row; kC 0: colours apart
  extern __shared__ float4 shared[];
  __shared__ int block_last;
  __shared__ float block_background[4];
  const int block = a.tile_size * a.tile_size;
  const Batch batch = BatchOf(shared, block);
  const TileView v = ViewOf(ranges, m, a, tiles_x);
  const int C = kC > 0 ? kC : channels;
  const int64_t p = static_cast<int64_t>(v.i) * a.width + v.j;
  const float px = static_cast<float>(v.j) + 0.5f, py = static_cast<float>(v.i) + 0.5f;
  const int lane = static_cast<int>(threadIdx.x) & 31;

  // The pixel's upstream gradients (zero outside the image), its last Gaussian.
  float v_local[kC > 0 ? kC : 1];
  const float* v_image = grad_image + (v.inside ? p * C : 0);
  if (kC > 0) {
    for (int c = 0; c < C; ++c) v_local[c] = v.inside ? grad_image[p * C + c] : 0.0f;
  }
  const float t_final = v.inside ? 1.0f - alpha[p] : 1.0f;
  if (threadIdx.x < 4) block_background[threadIdx.x] = 0.0f;
  int last = v.start;
  if (v.inside) {
    const int l = last_ids[p];
    last = l < v.start ? v.start : l > v.end ? v.end : l;
  }
  if (threadIdx.x == 0) block_last = v.start;
  __syncthreads();
  // The background's gradient, sum of t_final v_image: over the warp, then
  // (C <= 4) the block in shared memory and one global atomicAdd per channel
  // and block below; wider colours add each warp's sum to the output.
  float background_dot = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float vc = kC > 0 ? v_local[c] : (v.inside ? v_image[c] : 0.0f);
    background_dot += background[c] * vc;
    if constexpr (kWhole) {
      const float sum = WarpSum(t_final * vc);
      if (lane == 0 && sum != 0.0f) atomicAdd(kC > 0 ? &block_background[c] : grad_background + c, sum);
    } else if (t_final * vc != 0.0f) {
      atomicAdd(grad_background + c, t_final * vc);
    }
  }
  atomicMax(&block_last, last);
  __syncthreads();
  if (kC > 0 && kWhole && static_cast<int>(threadIdx.x) < C) {
    atomicAdd(grad_background + threadIdx.x, block_background[threadIdx.x]);
  }
  const int end = block_last;
  // The warp's largest last id: its lanes have nothing to do above it.
  const int warp_last = kWhole ? WarpMax(last) : end;
  // The row entry this lane adds (kWhole), and whether it is the one to add it.
  const bool holder = kWhole && WarpSpreadHolder<kRow>(lane);
  const RowTarget target =
      TargetOf<kC>(kWhole ? WarpSpreadIndex<kRow>(lane) : 0, grad_means2d, grad_conics, grad_opacities, grad_colors);

  GsPixelGrad<const float*> up{kC > 0 ? v_local : v_image, v.inside ? grad_alpha[p] : 0.0f, t_final, background_dot};
  GsBackState state{t_final, 0.0f};
  for (int top = end; top > v.start; top -= block) {
    const int count = min(block, top - v.start);
    __syncthreads();  // the previous batch is no longer read
    if (static_cast<int>(threadIdx.x) < count) {
      Load<kC>(batch, threadIdx.x, top - 1 - threadIdx.x, ids, means2d, conics, opacities, colors, n);
    }
    __syncthreads();
    // Index k = top - 1 - b: the warp's lanes start at their largest last id (uniform over the warp).
    for (int b = max(0, top - warp_last); b < count; ++b) {
      const int k = top - 1 - b;
      const int32_t g = batch.id[b];
      const float2 xy = batch.mean[b];
      const float4 co = batch.conic_opacity[b];
      float row[kRow];
      for (int q = 0; q < kRow; ++q) row[q] = 0.0f;
      bool touched;
      if constexpr (kC > 0) {
        touched = k < last && gs_backward_step(xy.x, xy.y, co.x, co.y, co.z, co.w, batch.color + b * kC, kC, px, py,
                                               up, &state, row + kGsRowColor, row + kGsRowMean,
                                               row + kGsRowConic, row + kGsRowOpacity);
      } else {
        touched = k < last && gs_backward_step(xy.x, xy.y, co.x, co.y, co.z, co.w,
                                               colors + static_cast<int64_t>(g) * C, C, px, py, up, &state,
                                               AtomicRow{grad_colors + static_cast<int64_t>(g) * C},
                                               row + kGsRowMean, row + kGsRowConic, row + kGsRowOpacity);
      }
      if constexpr (kWhole) {
        // Most of a tile's Gaussians cover few of its pixels: a warp with
        // nothing to add skips the sums (the loop is the same for the whole warp).
        if (!__any_sync(kFullWarp, touched)) continue;
        WarpSumSpread(row);
        if (holder) AddTo(target, g, row[0]);
      } else if (touched) {
        for (int q = 0; q < kRow; ++q) {
          AddTo(TargetOf<kC>(q, grad_means2d, grad_conics, grad_opacities, grad_colors), g, row[q]);
        }
      }
    }
  }
}

// A launch over the tiles: one block per tile, one thread per pixel, the
// batch in dynamic shared memory.
struct TileGrid {
  unsigned tiles;
  int block;
  int tiles_x;
};

// launch(std::integral_constant<int, kC>(), grid) with kC the channels held
// in registers: 1 to 4, or 0 for more (read and summed in global memory).
template <int kC, typename Launch>
void WithChannels(int64_t channels, const TileGrid& grid, Launch&& launch) {
  if constexpr (kC == 0) {
    launch(std::integral_constant<int, 0>(), grid);
  } else if (channels == kC) {
    launch(std::integral_constant<int, kC>(), grid);
  } else {
    WithChannels<kC - 1>(channels, grid, launch);
  }
}

// cudaErrorInvalidValue where the sizes do not fit the kernels' int indices;
// else the launch, and its error.
template <typename Launch>
cudaError_t OverTiles(const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a, Launch&& launch) {
  const int64_t tiles = gaussian_rasterize::TilesX(a) * gaussian_rasterize::TilesY(a);
  if (tiles > INT_MAX || s.m > INT_MAX || s.channels < 1 || s.channels > INT_MAX || a.tile_size < 1 ||
      a.tile_size > MO_GS_MAX_TILE_SIZE) {
    return cudaErrorInvalidValue;
  }
  const int block = a.tile_size * a.tile_size;
  WithChannels<4>(s.channels, TileGrid{static_cast<unsigned>(tiles), block, static_cast<int>(gaussian_rasterize::TilesX(a))},
                  launch);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGaussianRasterizeForward(const gaussian_rasterize::ForwardArgs& t, const gaussian_rasterize::Sizes& s,
                                           const gaussian_rasterize::Attrs& a, cudaStream_t stream) {
  return OverTiles(s, a, [&](auto channels, const TileGrid& g) {
    GaussianRasterizeForwardKernel<decltype(channels)::value><<<g.tiles, g.block, BatchBytes(g.block, 0), stream>>>(
        t.means2d, t.conics, t.colors, t.opacities, t.background, t.ids, t.ranges, s.n, static_cast<int>(s.channels),
        s.m, a, g.tiles_x, t.image, t.alpha, t.last_ids);
  });
}

cudaError_t LaunchGaussianRasterizeBackward(const gaussian_rasterize::BackwardArgs& t,
                                            const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a,
                                            cudaStream_t stream) {
  const size_t n = s.n > 0 ? static_cast<size_t>(s.n) : 0, c = s.channels > 0 ? static_cast<size_t>(s.channels) : 0;
  const struct {
    float* p;
    size_t count;
  } outputs[] = {{t.grad_means2d, 2 * n}, {t.grad_conics, 3 * n}, {t.grad_colors, n * c}, {t.grad_opacities, n},
                 {t.grad_background, c}};
  for (const auto& o : outputs) {
    if (o.count == 0) continue;
    const cudaError_t e = cudaMemsetAsync(o.p, 0, o.count * sizeof(float), stream);
    if (e != cudaSuccess) return e;
  }
  return OverTiles(s, a, [&](auto channels, const TileGrid& g) {
    constexpr int kC = decltype(channels)::value;
    constexpr int kMax = MO_GS_MAX_TILE_SIZE * MO_GS_MAX_TILE_SIZE;
    const bool whole = g.block % 32 == 0, small = g.block <= kSmallBlock;
    auto* kernel = whole ? (small ? GaussianRasterizeBackwardKernel<kC, true, kSmallBlock>
                                  : GaussianRasterizeBackwardKernel<kC, true, kMax>)
                         : (small ? GaussianRasterizeBackwardKernel<kC, false, kSmallBlock>
                                  : GaussianRasterizeBackwardKernel<kC, false, kMax>);
    kernel<<<g.tiles, g.block, BatchBytes(g.block, kC), stream>>>(
        t.means2d, t.conics, t.colors, t.opacities, t.background, t.ids, t.ranges, t.alpha, t.last_ids, t.grad_image,
        t.grad_alpha, s.n, static_cast<int>(s.channels), s.m, a, g.tiles_x, t.grad_means2d, t.grad_conics,
        t.grad_colors, t.grad_opacities, t.grad_background);
  });
}

}  // namespace cuda
}  // namespace mo

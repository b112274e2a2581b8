// GaussianRasterize on the CPU: the TensorFlow kernels of MetalOpsGaussianRasterize /
// MetalOpsGaussianRasterizeGrad (the kernel classes of gaussian_rasterize.h over the
// CPU functor below). Both run the tiles over the context's pool, one tile's
// pixels one after the other, or the op's Metal plans where
// kernels/cpu/metal_offload.h sends the call; the per-pixel arithmetic is
// gaussian_rasterize.h's. The backward is deterministic: each intersection
// (an index into gaussian_ids, owned by one tile) sums its pixels' gradients
// in a scratch row of its own, and one pass then adds the rows into the
// Gaussians' gradients in index order. XLA's host handlers (for the calls
// gaussian_rasterize_xla.cc emits) run the same functor.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA; before gaussian_rasterize.h: its XLA handlers' helpers
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_TF_KERNEL  // gaussian_rasterize.h's kernel classes
#include "kernels/gaussian_rasterize/gaussian_rasterize.h"

namespace mo {
namespace gaussian_rasterize_cpu {

namespace gr = gaussian_rasterize;

// The checks of the index inputs' values, before any work.
inline absl::Status CheckIndices(const char* op, const int32_t* ids, const int32_t* ranges, const gr::Sizes& s,
                                 const gr::Attrs& a) {
  const int64_t tiles = gr::TilesX(a) * gr::TilesY(a);
  TF_RETURN_IF_ERROR(checks::ToStatus(gr::TileRanges(op, ranges, tiles, s.m)));
  return checks::ToStatus(gr::GaussianIds(op, ids, ranges, tiles, s.n));
}

// fn(tile, pixel index, px, py) for each pixel of tiles [begin, end) over the
// pool; `cycles_per_pair` the cost of one (pixel, Gaussian) pair.
template <typename PixelFn>
void ForEachPixel(const cpu::Context& ctx, const gr::Sizes& s, const gr::Attrs& a, int64_t cycles_per_pair,
                  const PixelFn& fn) {
  const int64_t tiles_x = gr::TilesX(a), tiles = tiles_x * gr::TilesY(a);
  const int64_t per_tile = int64_t{a.tile_size} * a.tile_size * (s.m / std::max<int64_t>(tiles, 1) + 1);
  cpu::ParallelFor(ctx, tiles, cycles_per_pair * per_tile, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t i0 = (tile / tiles_x) * a.tile_size, j0 = (tile % tiles_x) * a.tile_size;
      const int64_t i1 = std::min<int64_t>(i0 + a.tile_size, a.height), j1 = std::min<int64_t>(j0 + a.tile_size, a.width);
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t j = j0; j < j1; ++j) {
          fn(tile, i * a.width + j, static_cast<float>(j) + 0.5f, static_cast<float>(i) + 0.5f);
        }
      }
    }
  });
}

// The bytes of a [n, k] float or int32 tensor.
inline uint64_t Bytes(int64_t n, int64_t k) { return static_cast<uint64_t>(n * k) * sizeof(float); }

// The Metal plans' slots of the seven inputs (ForwardArgs or BackwardArgs),
// which both plans take first, then `rest`.
template <typename Args>
std::vector<metal_plan::HostTensor> Slots(const gr::Sizes& s, const gr::Attrs& a, const Args& t,
                                          std::initializer_list<metal_plan::HostTensor> rest) {
  std::vector<metal_plan::HostTensor> slots = {
      cpu::Slot(t.means2d, Bytes(s.n, 2)),           cpu::Slot(t.conics, Bytes(s.n, 3)),
      cpu::Slot(t.colors, Bytes(s.n, s.channels)),   cpu::Slot(t.opacities, Bytes(s.n, 1)),
      cpu::Slot(t.background, Bytes(1, s.channels)), cpu::Slot(t.ids, Bytes(s.m, 1)),
      cpu::Slot(t.ranges, Bytes(gr::TilesX(a) * gr::TilesY(a), 2))};
  slots.insert(slots.end(), rest);
  return slots;
}

}  // namespace gaussian_rasterize_cpu

template <>
struct GaussianRasterizeFunctor<Eigen::ThreadPoolDevice> {
  static absl::Status Forward(const cpu::Context& ctx, const gaussian_rasterize::Sizes& s,
                              const gaussian_rasterize::Attrs& a, const gaussian_rasterize::ForwardArgs& t) {
    namespace g = gaussian_rasterize_cpu;
    TF_RETURN_IF_ERROR(g::CheckIndices("GaussianRasterize", t.ids, t.ranges, s, a));
    const int64_t pixels = int64_t{a.width} * a.height;
    const auto metal = [&](const cpu::MetalRoute& route) {
      using g::Bytes;
      return route.Run(pixels, [&] { return metal_plan::GaussianRasterizeForward(s, a); },
                       g::Slots(s, a, t,
                                {cpu::Slot(t.image, Bytes(pixels, s.channels)), cpu::Slot(t.alpha, Bytes(pixels, 1)),
                                 cpu::Slot(t.last_ids, Bytes(pixels, 1))}));
    };
    return cpu::MetalOrCpu(ctx, metal, [&] { ForwardLoops(ctx, s, a, t); });
  }

  static void ForwardLoops(const cpu::Context& ctx, const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a,
                    const gaussian_rasterize::ForwardArgs& t) {
    namespace g = gaussian_rasterize_cpu;
    const int channels = static_cast<int>(s.channels);
    g::ForEachPixel(ctx, s, a, 30, [&](int64_t tile, int64_t p, float px, float py) {
      float* acc = t.image + p * channels;
      std::fill(acc, acc + channels, 0.0f);
      float transmittance = 1.0f;
      const int32_t start = t.ranges[2 * tile], end = t.ranges[2 * tile + 1];
      int32_t last = start;
      for (int32_t k = start; k < end; ++k) {
        const int64_t id = t.ids[k];
        const int step = gs_forward_step(t.means2d[2 * id], t.means2d[2 * id + 1], t.conics[3 * id],
                                         t.conics[3 * id + 1], t.conics[3 * id + 2], t.opacities[id],
                                         t.colors + id * channels, channels, px, py, &transmittance, acc);
        if (step == kGsDone) break;
        if (step == kGsComposited) last = k + 1;
      }
      for (int c = 0; c < channels; ++c) acc[c] += transmittance * t.background[c];
      t.alpha[p] = 1.0f - transmittance;
      t.last_ids[p] = last;
    });
  }

  static absl::Status Backward(const cpu::Context& ctx, const gaussian_rasterize::Sizes& s,
                               const gaussian_rasterize::Attrs& a, const gaussian_rasterize::BackwardArgs& t) {
    namespace g = gaussian_rasterize_cpu;
    TF_RETURN_IF_ERROR(g::CheckIndices("GaussianRasterizeGrad", t.ids, t.ranges, s, a));
    TF_RETURN_IF_ERROR(checks::ToStatus(gaussian_rasterize::LastIds(t.last_ids, t.ranges, a)));
    const int64_t pixels = int64_t{a.width} * a.height, c = s.channels;
    const auto metal = [&](const cpu::MetalRoute& route) {
      using g::Bytes;
      return route.Run(pixels, [&] { return metal_plan::GaussianRasterizeBackward(s, a); },
                       g::Slots(s, a, t,
                                {cpu::Slot(t.alpha, Bytes(pixels, 1)), cpu::Slot(t.last_ids, Bytes(pixels, 1)),
                                 cpu::Slot(t.grad_image, Bytes(pixels, c)), cpu::Slot(t.grad_alpha, Bytes(pixels, 1)),
                                 cpu::Slot(t.grad_means2d, Bytes(s.n, 2)), cpu::Slot(t.grad_conics, Bytes(s.n, 3)),
                                 cpu::Slot(t.grad_colors, Bytes(s.n, c)), cpu::Slot(t.grad_opacities, Bytes(s.n, 1)),
                                 cpu::Slot(t.grad_background, Bytes(1, c))}));
    };
    return cpu::MetalOrCpu(ctx, metal, [&] { return BackwardLoops(ctx, s, a, t); });
  }

  static absl::Status BackwardLoops(const cpu::Context& ctx, const gaussian_rasterize::Sizes& s,
                                    const gaussian_rasterize::Attrs& a, const gaussian_rasterize::BackwardArgs& t) {
    namespace g = gaussian_rasterize_cpu;
    const int channels = static_cast<int>(s.channels);
    const int64_t row = gs_row_width(channels);
    const int64_t tiles = gaussian_rasterize::TilesX(a) * gaussian_rasterize::TilesY(a);
    // rows [M, 6 + C] of the intersections, then [tiles, C] of the background's partial sums.
    ::tensorflow::Tensor scratch;
    TF_RETURN_IF_ERROR(ctx.AllocateTemp(::tensorflow::DT_FLOAT, ::tensorflow::TensorShape({s.m * row + tiles * channels}),
                                        &scratch));
    float* rows = scratch.flat<float>().data();
    float* background_sums = rows + s.m * row;
    std::fill(rows, rows + s.m * row + tiles * channels, 0.0f);
    g::ForEachPixel(ctx, s, a, 60, [&](int64_t tile, int64_t p, float px, float py) {
      const float* v_image = t.grad_image + p * channels;
      const float t_final = 1.0f - t.alpha[p];
      float background_dot = 0.0f;
      float* sums = background_sums + tile * channels;
      for (int c = 0; c < channels; ++c) {
        background_dot += t.background[c] * v_image[c];
        sums[c] += t_final * v_image[c];
      }
      const GsPixelGrad<const float*> up{v_image, t.grad_alpha[p], t_final, background_dot};
      GsBackState state{t_final, 0.0f};
      const int32_t start = t.ranges[2 * tile];
      for (int32_t k = t.last_ids[p] - 1; k >= start; --k) {
        const int64_t id = t.ids[k];
        float* r = rows + k * row;
        gs_backward_step(t.means2d[2 * id], t.means2d[2 * id + 1], t.conics[3 * id], t.conics[3 * id + 1],
                         t.conics[3 * id + 2], t.opacities[id], t.colors + id * channels, channels, px, py, up,
                         &state, r + kGsRowColor, r + kGsRowMean, r + kGsRowConic, r + kGsRowOpacity);
      }
    });
    std::fill(t.grad_means2d, t.grad_means2d + 2 * s.n, 0.0f);
    std::fill(t.grad_conics, t.grad_conics + 3 * s.n, 0.0f);
    std::fill(t.grad_colors, t.grad_colors + channels * s.n, 0.0f);
    std::fill(t.grad_opacities, t.grad_opacities + s.n, 0.0f);
    for (int64_t k = 0; k < s.m; ++k) {
      const int64_t id = t.ids[k];
      if (id < 0 || id >= s.n) continue;  // covered by no tile (CheckIndices): its row is zero
      const float* r = rows + k * row;
      t.grad_means2d[2 * id] += r[kGsRowMean];
      t.grad_means2d[2 * id + 1] += r[kGsRowMean + 1];
      for (int q = 0; q < 3; ++q) t.grad_conics[3 * id + q] += r[kGsRowConic + q];
      t.grad_opacities[id] += r[kGsRowOpacity];
      for (int c = 0; c < channels; ++c) t.grad_colors[id * channels + c] += r[kGsRowColor + c];
    }
    std::fill(t.grad_background, t.grad_background + channels, 0.0f);
    for (int64_t tile = 0; tile < tiles; ++tile) {
      for (int c = 0; c < channels; ++c) t.grad_background[c] += background_sums[tile * channels + c];
    }
    return absl::OkStatus();
  }
};

}  // namespace mo

REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianRasterize").Device(::tensorflow::DEVICE_CPU),
                        ::mo::GaussianRasterizeKernel<Eigen::ThreadPoolDevice, false>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianRasterizeGrad").Device(::tensorflow::DEVICE_CPU),
                        ::mo::GaussianRasterizeKernel<Eigen::ThreadPoolDevice, true>);

#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"

MO_XLA_FFI_ATTRS(::mo::gaussian_rasterize::Attrs);

// XLA's host handlers of the same functor (kGrad: the gradient op's), for the
// calls gaussian_rasterize_xla.cc emits: the attributes bound whole
// (kernels/xla/xla_ffi.h), the shapes checked, the index values checked by
// the functor as in the TensorFlow kernels.
namespace mo::xla_kernels {
namespace {

template <bool kGrad>
ffi::Error GaussianRasterizeHost(ffi::RemainingArgs args, ffi::RemainingRets rets, gaussian_rasterize::Attrs a) {
  using Functor = GaussianRasterizeFunctor<Eigen::ThreadPoolDevice>;
  return xla_ffi::GaussianRasterizeXla(args, rets, a, kGrad, [&](const xla_ffi::GaussianRasterizeXlaCall& c) {
    return xla_ffi::ToError(kGrad ? Functor::Backward(HostContext(), c.sizes, a, c.backward)
                                  : Functor::Forward(HostContext(), c.sizes, a, c.forward));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsGaussianRasterize", "Host", GaussianRasterizeHost<false>,
                   xla_ffi::BindCallBuffers<gaussian_rasterize::Attrs>(ffi::Ffi::Bind()));
MO_XLA_FFI_HANDLER("MetalOpsGaussianRasterizeGrad", "Host", GaussianRasterizeHost<true>,
                   xla_ffi::BindCallBuffers<gaussian_rasterize::Attrs>(ffi::Ffi::Bind()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA

// GaussianTileBin on the CPU: the TensorFlow kernel of
// MetalOpsGaussianTileBin (the kernel class of gaussian_tile_bin.h over the
// CPU functor below). A counting sort by tile, then each tile's Gaussians
// sorted by depth: every Gaussian's tile count on the context's pool, their
// sum, each tile's count and start, the Gaussians placed in index
// order into their tiles (serial: O(intersections)), and each tile's range
// stably sorted by depth key on the pool. The order is the radix sort's of
// the CUDA kernel and the Metal plans (gaussian_tile_bin.h: tile, depth key,
// index). Both steps run the op's Metal plans (gaussian_tile_bin_metal.cc)
// where kernels/cpu/metal_offload.h sends them. MetalOpsGaussianTileBinStatic
// (its CPU kernel and XLA's host handler, for the calls
// gaussian_tile_bin_xla.cc emits) runs the count, cuts at the budget
// (gtb_static_kept) and bins the kept Gaussians with Bin's loops, or runs its
// Metal plan (gaussian_tile_bin_metal.cc) where metal_offload.h sends it.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before gaussian_tile_bin.h: its kernel class
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA; before gaussian_tile_bin.h: its XLA handler's helpers
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"  // before gaussian_tile_bin.h: its XLA handlers' attributes
#endif
#define MO_TF_KERNEL  // gaussian_tile_bin.h's kernel class
#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"

namespace mo {

template <>
struct GaussianTileBinFunctor<Eigen::ThreadPoolDevice> {
  struct State {};  // Bin walks the rectangles again

  static absl::Status Count(cpu::Context ctx, const float* means2d, const int32_t* radii, int64_t n,
                            const gaussian_tile_bin::Attrs& a, State* /*state*/, int64_t* m) {
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          uint64_t metal_total = 0;
          cpu::OnMetal status = metal.Run(
              n, [&] { return metal_plan::GaussianTileBinCount(n, a); },
              {cpu::Slot(means2d, uint64_t(n) * 2 * sizeof(float)),
               cpu::Slot(radii, uint64_t(n) * 2 * sizeof(int32_t)),
               cpu::Slot(&metal_total, sizeof(metal_total))});
          if (status.has_value()) *m = static_cast<int64_t>(metal_total);
          return status;
        },
        [&] {
          std::vector<int64_t> ends(static_cast<size_t>(n));
          *m = Ends(ctx, means2d, radii, n, a, ends.data());
        });
  }

  // MetalOpsGaussianTileBinStatic: its Metal plan, or the cut
  // (gtb_static_kept), Bin's loops for the kept Gaussians alone and the padding.
  static absl::Status Static(cpu::Context ctx, const float* means2d, const int32_t* radii, const float* depths,
                             int64_t n, const gaussian_tile_bin::StaticAttrs& a,
                             const GaussianTileBinStaticOutputs& out) {
    const int64_t budget = a.max_intersections;
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(
              n, [&] { return metal_plan::GaussianTileBinStatic(n, a); },
              {cpu::Slot(means2d, uint64_t(n) * 2 * sizeof(float)),
               cpu::Slot(radii, uint64_t(n) * 2 * sizeof(int32_t)), cpu::Slot(depths, uint64_t(n) * sizeof(float)),
               cpu::Slot(out.gaussian_ids, uint64_t(budget) * sizeof(int32_t)),
               cpu::Slot(out.tile_ranges, uint64_t(gaussian_tile_bin::Tiles(a)) * 2 * sizeof(int32_t)),
               cpu::Slot(out.num_intersections, sizeof(int32_t)), cpu::Slot(out.num_gaussians, sizeof(int32_t))});
        },
        [&] {
          std::vector<int64_t> ends(static_cast<size_t>(n));
          Ends(ctx, means2d, radii, n, a, ends.data());
          const int64_t kept = gtb_static_kept(ends.data(), n, budget);
          const int64_t m = kept > 0 ? ends[kept - 1] : 0;
          absl::Status status = Loops(ctx, means2d, radii, depths, kept, a, m, out.gaussian_ids, out.tile_ranges);
          std::fill(out.gaussian_ids + m, out.gaussian_ids + budget, int32_t{kGtbStaticPadId});
          *out.num_intersections = static_cast<int32_t>(m);
          *out.num_gaussians = static_cast<int32_t>(kept);
          return status;
        });
  }

  static absl::Status Bin(cpu::Context ctx, const float* means2d, const int32_t* radii, const float* depths,
                          int64_t n, const gaussian_tile_bin::Attrs& a, State* /*state*/, int64_t m,
                          int32_t* gaussian_ids, int32_t* tile_ranges) {
    // No intersection: nothing to sort, only the ranges' zeros to write.
    if (m == 0) return Loops(ctx, means2d, radii, depths, n, a, m, gaussian_ids, tile_ranges);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(
              n, [&] { return metal_plan::GaussianTileBinFill(n, m, a); },
              {cpu::Slot(means2d, uint64_t(n) * 2 * sizeof(float)),
               cpu::Slot(radii, uint64_t(n) * 2 * sizeof(int32_t)),
               cpu::Slot(depths, uint64_t(n) * sizeof(float)), cpu::Slot(gaussian_ids, uint64_t(m) * sizeof(int32_t)),
               cpu::Slot(tile_ranges, uint64_t(gaussian_tile_bin::Tiles(a)) * 2 * sizeof(int32_t))});
        },
        [&] { return Loops(ctx, means2d, radii, depths, n, a, m, gaussian_ids, tile_ranges); });
  }

 private:
  // ends [n]: the inclusive prefix sum of the Gaussians' tile counts (the
  // counts on the pool); returns the total.
  static int64_t Ends(const cpu::Context& ctx, const float* means2d, const int32_t* radii, int64_t n,
                      const gaussian_tile_bin::Attrs& a, int64_t* ends) {
    const int tiles_x = gaussian_tile_bin::TilesX(a), tiles_y = gaussian_tile_bin::TilesY(a);
    cpu::ParallelFor(ctx, n, 40, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        ends[i] = gtb_tile_count(means2d[2 * i], means2d[2 * i + 1], radii[2 * i], radii[2 * i + 1], a.tile_size,
                                 tiles_x, tiles_y);
      }
    });
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) ends[i] = total += ends[i];
    return total;
  }

  // Bin's CPU loops.
  static absl::Status Loops(cpu::Context ctx, const float* means2d, const int32_t* radii, const float* depths,
                            int64_t n, const gaussian_tile_bin::Attrs& a, int64_t m, int32_t* gaussian_ids,
                            int32_t* tile_ranges) {
    const int tiles_x = gaussian_tile_bin::TilesX(a), tiles_y = gaussian_tile_bin::TilesY(a);
    const int64_t tiles = gaussian_tile_bin::Tiles(a);
    // Each tile's start (its count first), then the Gaussians in index order.
    std::vector<int64_t> start(static_cast<size_t>(tiles) + 1, 0);
    auto each_tile = [&](int64_t i, auto&& fn) {
      int x0, x1, y0, y1;
      gtb_tile_rect(means2d[2 * i], means2d[2 * i + 1], radii[2 * i], radii[2 * i + 1], a.tile_size, tiles_x,
                    tiles_y, &x0, &x1, &y0, &y1);
      for (int y = y0; y < y1; ++y) {
        for (int x = x0; x < x1; ++x) fn(int64_t{y} * tiles_x + x);
      }
    };
    if (m > 0) {
      for (int64_t i = 0; i < n; ++i) each_tile(i, [&](int64_t t) { ++start[t + 1]; });
    }
    for (int64_t t = 0; t < tiles; ++t) start[t + 1] += start[t];
    if (m > 0) {
      std::vector<int64_t> cursor(start.begin(), start.end() - 1);
      for (int64_t i = 0; i < n; ++i) {
        each_tile(i, [&](int64_t t) { gaussian_ids[cursor[t]++] = static_cast<int32_t>(i); });
      }
      cpu::ParallelFor(ctx, tiles, 200, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          std::stable_sort(gaussian_ids + start[t], gaussian_ids + start[t + 1], [&](int32_t x, int32_t y) {
            return gtb_depth_key(depths[x]) < gtb_depth_key(depths[y]);
          });
        }
      });
    }
    for (int64_t t = 0; t < tiles; ++t) {
      tile_ranges[2 * t] = static_cast<int32_t>(start[t]);
      tile_ranges[2 * t + 1] = static_cast<int32_t>(start[t + 1]);
    }
    return absl::OkStatus();
  }
};

}  // namespace mo

#if MO_XLA
// XLA's host handler of MetalOpsGaussianTileBinStatic: the same functor, the
// attributes bound whole (kernels/xla/xla_ffi.h), the buffers' shapes checked.
namespace mo::xla_kernels {
namespace {

ffi::Error GaussianTileBinStaticHost(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                     gaussian_tile_bin::StaticAttrs a) {
  using Functor = GaussianTileBinFunctor<Eigen::ThreadPoolDevice>;
  return xla_ffi::GaussianTileBinStaticXla(args, rets, [&](auto means2d, auto radii, auto depths, int64_t n, auto out) {
    return xla_ffi::ToError(Functor::Static(HostContext(), means2d, radii, depths, n, a, out));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsGaussianTileBinStatic", "Host", GaussianTileBinStaticHost,
                   xla_ffi::BindCallBuffers<gaussian_tile_bin::StaticAttrs>(ffi::Ffi::Bind()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA

REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianTileBin").Device(::tensorflow::DEVICE_CPU),
                        ::mo::GaussianTileBinKernel<::Eigen::ThreadPoolDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianTileBinStatic").Device(::tensorflow::DEVICE_CPU),
                        ::mo::GaussianTileBinStaticKernel<::Eigen::ThreadPoolDevice>);

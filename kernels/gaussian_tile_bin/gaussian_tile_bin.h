// GaussianTileBin: the projected Gaussians (GaussianProject's means2d,
// radii, depths) binned into the image's tiles of tile_size x tile_size
// pixels, each tile's Gaussians sorted front to back, for the rasterizer.
// This header is the op's one description shared by its backends: the
// formulas (written once for the CPU kernel, CUDA, the Metal shaders and the
// MSL shim), the op's declaration (MO_GAUSSIAN_TILE_BIN_ATTRS) and, in host
// code, the checks, the Metal plans' and CUDA launchers' signatures and the
// TensorFlow kernel class. The op's files (docs/ADDING_AN_OP.md):
//   gaussian_tile_bin_op.cc     REGISTER_OP                 gaussian_tile_bin_cpu.cc    CPU kernel
//   gaussian_tile_bin.cu.cc     CUDA kernels, launchers     gaussian_tile_bin_cuda.cc   TF GPU kernel
//   gaussian_tile_bin.metal     Metal shaders               gaussian_tile_bin_metal.cc  Metal plans, tensorflow-metal glue
//   gaussian_tile_bin_xla.cc    XLA op kernel (GaussianTileBinStatic)
// GaussianTileBin's outputs' size depends on the data: no XLA kernel.
// GaussianTileBinStatic bins into outputs of a static size instead (what XLA
// compiles): gaussian_ids [max_intersections], see gtb_static_kept.
//
// The image has tiles_x = ceil(width / tile_size) by tiles_y =
// ceil(height / tile_size) tiles, tile (tx, ty) with id ty * tiles_x + tx. A
// Gaussian with radius r > 0 and mean (u, v) touches the tiles
//   [floor((u - r) / tile_size), ceil((u + r) / tile_size)) x
//   [floor((v - r) / tile_size), ceil((v + r) / tile_size))
// clamped to [0, tiles_x) x [0, tiles_y) (gsplat's isect_tiles; float32
// arithmetic); a Gaussian with radius 0 (culled) touches none. Each
// (tile, Gaussian) intersection is keyed (tile id << 32) | depth key, the
// depth key the float's bits mapped to an unsigned integer of the same
// order (gtb_depth_key), and the intersections are sorted by key, stably:
// by tile, then depth ascending, then Gaussian index. Outputs: gaussian_ids
// [M] int32, the Gaussian of each intersection in that order, and
// tile_ranges [tiles_y * tiles_x, 2] int32, each tile's [start, end) in it
// (start = end for a tile no Gaussian touches).
#ifndef MO_KERNELS_GAUSSIAN_TILE_BIN_GAUSSIAN_TILE_BIN_H_
#define MO_KERNELS_GAUSSIAN_TILE_BIN_GAUSSIAN_TILE_BIN_H_

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)
#include <cstdint>  // host
#include <cstring>  // host
#endif

#include "kernels/common/platform.h"

// The largest image side (width, height): every tile id fits the key's high 32 bits.
#define MO_GTB_MAX_IMAGE_SIDE 65536

namespace mo {

// The tiles a Gaussian of radii (radius_x, radius_y) touches: [*x0, *x1) x
// [*y0, *y1), empty when either radius is <= 0.
MO_FN void gtb_tile_rect(float u, float v, int32 radius_x, int32 radius_y, int tile_size, int tiles_x, int tiles_y,
                         MO_THREAD int* x0, MO_THREAD int* x1, MO_THREAD int* y0, MO_THREAD int* y1) {
  *x0 = *x1 = *y0 = *y1 = 0;
  if (radius_x <= 0 || radius_y <= 0) return;
  const float rx = float(radius_x), ry = float(radius_y), ts = float(tile_size);
  const float tx = float(tiles_x), ty = float(tiles_y);
  // fmax / fmin return the number for a NaN mean: its rectangle is empty.
  *x0 = int(fmin_f(fmax_f(floor_f((u - rx) / ts), 0.0f), tx));
  *x1 = int(fmin_f(fmax_f(ceil_f((u + rx) / ts), 0.0f), tx));
  *y0 = int(fmin_f(fmax_f(floor_f((v - ry) / ts), 0.0f), ty));
  *y1 = int(fmin_f(fmax_f(ceil_f((v + ry) / ts), 0.0f), ty));
  if (*x1 < *x0) *x1 = *x0;
  if (*y1 < *y0) *y1 = *y0;
}

// The number of tiles a Gaussian touches.
MO_FN int64 gtb_tile_count(float u, float v, int32 radius_x, int32 radius_y, int tile_size, int tiles_x,
                           int tiles_y) {
  int x0, x1, y0, y1;
  gtb_tile_rect(u, v, radius_x, radius_y, tile_size, tiles_x, tiles_y, &x0, &x1, &y0, &y1);
  return int64(x1 - x0) * int64(y1 - y0);
}

// A depth's sort key: its bits, flipped so that unsigned order is the
// floats' order (negative floats reversed below the positive ones).
MO_FN uint32 gtb_depth_key(float depth) {
#if defined(__METAL_VERSION__) || defined(MO_MSL_SHIM)
  const uint32 bits = as_type<uint32>(depth);
#elif defined(__CUDA_ARCH__)
  const uint32 bits = __float_as_uint(depth);
#else
  uint32 bits;
  std::memcpy(&bits, &depth, sizeof(bits));
#endif
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// An intersection's key: the tile id in the high 32 bits, the depth key below.
MO_FN uint64 gtb_key(int64 tile, float depth) { return (uint64(tile) << 32) | uint64(gtb_depth_key(depth)); }

// The key bits a sort of `tiles` tiles' keys looks at: the depth key's 32 and
// enough for every tile id (at least one).
MO_FN int gtb_key_bits(int64 tiles) {
  int bits = 1;
  while (bits < 32 && (int64(1) << bits) < tiles) ++bits;
  return 32 + bits;
}

// The first index in sorted keys[0, m) whose tile id is >= tile.
template <typename Key>
MO_FN int64 gtb_first_of_tile(const MO_DEVICE Key* keys, int64 m, int64 tile) {
  int64 lo = 0, hi = m;
  while (lo < hi) {
    const int64 mid = lo + ((hi - lo) >> 1);
    if (int64(keys[mid] >> 32) < tile) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// GaussianTileBinStatic's cut: the Gaussians kept, whole and in index order
// while their intersections fit in `budget` (the ones after the first that
// does not fit get none, as RayMarchStatic does with rays), from `ends`, the
// inclusive prefix sum of the n Gaussians' tile counts. Gaussian i is kept
// exactly when ends[i] <= budget; the kept intersections are GaussianTileBin's
// of the kept Gaussians alone, and gaussian_ids past them hold
// kGtbStaticPadId. (The CPU's and CUDA's ends are int64, Metal's uint64.)
template <typename End>
MO_FN int64 gtb_static_kept(const MO_DEVICE End* ends, int64 n, int64 budget) {
  int64 lo = 0, hi = n;
  while (lo < hi) {
    const int64 mid = lo + ((hi - lo) >> 1);
    if (int64(ends[mid]) <= budget) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}
enum GaussianTileBinStaticPad { kGtbStaticPadId = -1 };

// GaussianTileBinStatic's outputs: gaussian_ids [max_intersections],
// tile_ranges [tiles, 2] and the two counts (scalars).
struct GaussianTileBinStaticOutputs {
  MO_DEVICE int32* gaussian_ids;
  MO_DEVICE int32* tile_ranges;
  MO_DEVICE int32* num_intersections;
  MO_DEVICE int32* num_gaussians;
};

// ---- Metal (gaussian_tile_bin.metal, the plans of gaussian_tile_bin_metal.cc) ----
// Count: each Gaussian's tile count (one thread per Gaussian), their
// exclusive scan in place and the total (gaussian_tile_bin_scan: one
// threadgroup of kGtbScanThreads threads, each summing a chunk). Fill: the
// count and scan again, each Gaussian's keys from its offset on
// (gtb_key; the Gaussian's index as value), a stable LSD radix sort of the
// keys over gtb_key_bits in 8-bit digits, and the tile ranges by
// gtb_first_of_tile. Each radix pass: per-threadgroup digit counts
// (gaussian_tile_bin_digits: kGtbSortThreads threads of kGtbSortItems
// consecutive keys each, their counts in threadgroup memory), the exclusive
// scan of those counts in digit-major order (digit, threadgroup), and the
// scatter (gaussian_tile_bin_scatter: each thread its keys in order, after
// those of the earlier threads and threadgroups with the same digit: stable).
// GaussianTileBinStatic's one plan: the count and scan, the cut
// (gaussian_tile_bin_cut, one thread: gtb_static_kept, the kept Gaussians
// and their intersections m into `limits` and the count outputs), the kept
// Gaussians' keys (gaussian_tile_bin_keys_kept), the budget's last B - m
// keys all ones with kGtbStaticPadId (gaussian_tile_bin_pad), the radix
// sort of all B keys (the padding sorts last) and the ranges of the m kept
// keys. `limits` holds {m, kept Gaussians}; the ranges read their m there,
// and the fill's from its total.
struct GaussianTileBinParams {
  int64 num_gaussians;
  int64 num_intersections;  // the fill's m; the static plan's budget B
  int64 tiles;
  int32 tile_size, tiles_x, tiles_y, pad;
};
// The in-place exclusive scan of `length` uint64 in chunks of `chunk` per thread.
struct GtbScanParams {
  uint64 length;
  uint64 chunk;
};
// One radix pass over m keys: `groups` threadgroups, the digit at bit `shift`.
struct GtbSortParams {
  uint32 m;
  uint32 groups;
  uint32 shift;
  uint32 pad;
};
// The shaders' threadgroup geometry.
enum GaussianTileBinSizes {
  kGtbScanThreads = 256,  // the scan's one threadgroup
  kGtbSortThreads = 32,   // threads per radix threadgroup
  kGtbSortItems = 32,     // consecutive keys per radix thread
  kGtbRadix = 256         // 8-bit digits
};

// The shaders' buffer indices.
enum GaussianTileBinBuffers {
  kGtbMeans2d = 0, kGtbRadii, kGtbDepths, kGtbOffsets, kGtbKeys, kGtbIds, kGtbParams,  // count, keys
  kGtbKeysLimits,                                                                     // keys_kept: keys', then limits
  kGtbScanData = 0, kGtbScanTotal, kGtbScanParams,                                    // scan
  kGtbSortKeys = 0, kGtbSortIds, kGtbSortHist, kGtbSortKeysOut, kGtbSortIdsOut, kGtbSortParams,  // digits, scatter
  kGtbRangesKeys = 0, kGtbRangesOut, kGtbRangesParams, kGtbRangesCount,             // ranges
  kGtbCutOffsets = 0, kGtbCutTotal, kGtbCutLimits, kGtbCutNumIntersections, kGtbCutNumGaussians,
  kGtbCutParams,                                                                      // cut
  kGtbPadKeys = 0, kGtbPadIds, kGtbPadLimits, kGtbPadParams                           // pad
};

// A key's radix digit at bit `shift`.
MO_FN uint32 gtb_digit(uint64 key, uint32 shift) { return uint32((key >> shift) & uint64(kGtbRadix - 1)); }

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsGaussianTileBin(means2d [N, 2], radii [N, 2] int32, depths [N])
//   -> gaussian_ids [M] int32, tile_ranges [tiles_y * tiles_x, 2] int32; no gradient.
#define MO_GAUSSIAN_TILE_BIN_ATTRS(ATTR)                \
  ATTR(width, RequiredInt, 1, MO_GTB_MAX_IMAGE_SIDE)     \
  ATTR(height, RequiredInt, 1, MO_GTB_MAX_IMAGE_SIDE)    \
  ATTR(tile_size, Int, 16, 1, 256)
// MetalOpsGaussianTileBinStatic(means2d, radii, depths) -> gaussian_ids
//   [max_intersections] int32, tile_ranges, num_intersections, num_gaussians:
//   GaussianTileBin's attributes, then its budget.
#define MO_GAUSSIAN_TILE_BIN_STATIC_ATTRS(ATTR) ATTR(max_intersections, RequiredInt, 1, 2147483647)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace gaussian_tile_bin {

// Attrs { int width, height, tile_size; }, ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("GaussianTileBin", MO_GAUSSIAN_TILE_BIN_ATTRS);

// GaussianTileBinStatic's: GaussianTileBin's, then max_intersections
// ("GaussianTileBinStatic: 'max_intersections' must be in [1, 2147483647], got 0").
namespace declared_static {
MO_DECLARE_ATTRS("GaussianTileBinStatic", MO_GAUSSIAN_TILE_BIN_STATIC_ATTRS);
}  // namespace declared_static
MO_EXTEND_ATTRS(StaticAttrs, Attrs, declared_static);

inline int TilesX(const Attrs& a) { return (a.width + a.tile_size - 1) / a.tile_size; }
inline int TilesY(const Attrs& a) { return (a.height + a.tile_size - 1) / a.tile_size; }
inline int64_t Tiles(const Attrs& a) { return int64_t{TilesX(a)} * TilesY(a); }

// The checks, written once for the shape function and the TensorFlow
// kernels. -1 is an unknown dimension (shape functions) and matches any size.
// means2d [N, 2], radii [N, 2], depths [N].
inline Result Shapes(const Dims& means2d, const Dims& radii, const Dims& depths) {
  if (means2d.size() != 2 || (means2d[1] != 2 && means2d[1] != -1)) {
    return Invalid("GaussianTileBin: 'means2d' must be [N, 2], got shape ", ShapeString(means2d));
  }
  const int64_t n = means2d[0];
  const auto same = [n](int64_t d) { return d == n || d == -1 || n == -1; };
  if (radii.size() != 2 || !same(radii[0]) || (radii[1] != 2 && radii[1] != -1)) {
    return Invalid("GaussianTileBin: 'radii' must be [N, 2] = ", ShapeString({n, 2}), " for 'means2d' of shape ",
                   ShapeString(means2d), ", got shape ", ShapeString(radii));
  }
  if (depths.size() != 1 || !same(depths[0])) {
    return Invalid("GaussianTileBin: 'depths' must be [N] = [", n, "] for 'means2d' of shape ",
                   ShapeString(means2d), ", got shape ", ShapeString(depths));
  }
  return Ok();
}

// The number of intersections, which gaussian_ids' int32 entries index.
inline Result Intersections(int64_t m) {
  if (m > INT32_MAX) {
    return Invalid("GaussianTileBin: the Gaussians touch ", m, " tiles in all, more than 2^31 - 1 (int32 indices)");
  }
  return Ok();
}

}  // namespace gaussian_tile_bin
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (gaussian_tile_bin_metal.cc; shaders gaussian_tile_bin.metal),
// GaussianTileBin's two because the number of intersections decides gaussian_ids' shape:
//   GaussianTileBinCount (n > 0): the total, in one uint64;
//   the caller reads it once that plan has completed, allocates the outputs, then
//   GaussianTileBinFill: gaussian_ids and tile_ranges (m = 0: the ranges zeroed).
// Every Metal path runs them (kernels/metal_plan/plan.h).
namespace mo::metal_plan {
enum GaussianTileBinCountSlots { kGtbSlotMeans2d, kGtbSlotRadii, kGtbSlotTotal, kGtbCountSlots };
enum GaussianTileBinFillSlots {
  kGtbFillSlotMeans2d,
  kGtbFillSlotRadii,
  kGtbFillSlotDepths,
  kGtbFillSlotGaussianIds,  // int32 [m]
  kGtbFillSlotTileRanges,   // int32 [tiles, 2]
  kGtbFillSlots
};
Plan GaussianTileBinCount(int64_t n, const gaussian_tile_bin::Attrs& a);
Plan GaussianTileBinFill(int64_t n, int64_t m, const gaussian_tile_bin::Attrs& a);
// GaussianTileBinStatic's one plan, for n >= 0 Gaussians (nothing read back).
enum GaussianTileBinStaticSlots {
  kGtbStaticSlotMeans2d,
  kGtbStaticSlotRadii,
  kGtbStaticSlotDepths,
  kGtbStaticSlotGaussianIds,       // int32 [max_intersections]
  kGtbStaticSlotTileRanges,        // int32 [tiles, 2]
  kGtbStaticSlotNumIntersections,  // int32 []
  kGtbStaticSlotNumGaussians,      // int32 []
  kGtbStaticSlots
};
Plan GaussianTileBinStatic(int64_t n, const gaussian_tile_bin::StaticAttrs& a);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>

// The CUDA launchers (gaussian_tile_bin.cu.cc), plain C++ (no TensorFlow):
// the TF GPU kernel (gaussian_tile_bin_cuda.cc) and the C-ABI harness
// (tests/cuda/gaussian_tile_bin_harness.cu.cc). Pointers are device memory;
// the scratch is the caller's, of the bytes the *ScratchBytes functions say.
namespace mo::cuda {
// Pass 1: offsets[i] = the intersections of Gaussians 0..i (inclusive), and
// *total (device) = offsets[n - 1]; n > 0.
size_t GaussianTileBinCountScratchBytes(int64_t n);
cudaError_t LaunchGaussianTileBinCount(const float* means2d, const int32_t* radii, int64_t n,
                                       const gaussian_tile_bin::Attrs& a, int64_t* offsets, long long* total,
                                       void* scratch, size_t scratch_bytes, cudaStream_t stream);
// Pass 2, for m > 0 intersections: the keys, their radix sort (CUB, stable)
// into gaussian_ids, and tile_ranges [tiles, 2].
size_t GaussianTileBinSortScratchBytes(int64_t m, const gaussian_tile_bin::Attrs& a);
cudaError_t LaunchGaussianTileBinSort(const float* means2d, const int32_t* radii, const float* depths, int64_t n,
                                      const gaussian_tile_bin::Attrs& a, const int64_t* offsets, int64_t m,
                                      int32_t* gaussian_ids, int32_t* tile_ranges, void* scratch,
                                      size_t scratch_bytes, cudaStream_t stream);
// GaussianTileBinStatic on the device, no read-back (n >= 0): pass 1, the cut
// (gtb_static_kept), the kept Gaussians' keys and max_intersections -
// num_intersections padding keys that sort last, their radix sort into
// gaussian_ids (the padding kGtbStaticPadId), and the kept keys' tile ranges.
size_t GaussianTileBinStaticScratchBytes(int64_t n, const gaussian_tile_bin::StaticAttrs& a);
cudaError_t LaunchGaussianTileBinStatic(const float* means2d, const int32_t* radii, const float* depths, int64_t n,
                                        const gaussian_tile_bin::StaticAttrs& a,
                                        const GaussianTileBinStaticOutputs& out, void* scratch,
                                        size_t scratch_bytes, cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_TF_KERNEL)
// The TensorFlow kernel of MetalOpsGaussianTileBin, once for every C++-API
// device: the checks and the output allocation here;
// GaussianTileBinFunctor<Device> does the work in two steps, the count of
// intersections (which sizes gaussian_ids), then the bins.
namespace mo {

// Specialised per device (gaussian_tile_bin_cpu.cc, gaussian_tile_bin_cuda.cc):
//   struct State;  what Count leaves for Bin
//   static absl::Status Count(OpKernelContext*, const float* means2d, const int32_t* radii, int64_t n,
//                             const gaussian_tile_bin::Attrs&, State*, int64_t* m);
//     *m = the number of intersections of n > 0 Gaussians;
//   static absl::Status Bin(OpKernelContext*, const float* means2d, const int32_t* radii, const float* depths,
//                           int64_t n, const gaussian_tile_bin::Attrs&, State*, int64_t m,
//                           int32_t* gaussian_ids, int32_t* tile_ranges);
//     gaussian_ids [m] and tile_ranges [tiles, 2], for n >= 0 Gaussians (Count run first when n > 0);
//   static absl::Status Static(OpKernelContext*, const float* means2d, const int32_t* radii,
//                              const float* depths, int64_t n, const gaussian_tile_bin::StaticAttrs&,
//                              const GaussianTileBinStaticOutputs&);
//     MetalOpsGaussianTileBinStatic's outputs (gtb_static_kept), for n >= 0 Gaussians.
template <typename Device>
struct GaussianTileBinFunctor;

template <typename Device>
class GaussianTileBinKernel : public OpKernelWithAttrs<gaussian_tile_bin::Attrs> {
 public:
  using OpKernelWithAttrs::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using Functor = GaussianTileBinFunctor<Device>;
    const ::tensorflow::Tensor& means2d = ctx->input(0);
    const ::tensorflow::Tensor& radii = ctx->input(1);
    const ::tensorflow::Tensor& depths = ctx->input(2);
    OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_tile_bin::Shapes(checks::DimsOf(means2d), checks::DimsOf(radii),
                                                                    checks::DimsOf(depths))));
    const int64_t n = means2d.dim_size(0);
    typename Functor::State state;
    int64_t m = 0;
    if (n > 0) {
      OP_REQUIRES_OK(ctx, Functor::Count(ctx, means2d.flat<float>().data(), radii.flat<int32_t>().data(), n, attrs_,
                                         &state, &m));
    }
    OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_tile_bin::Intersections(m)));
    ::tensorflow::Tensor *ids = nullptr, *ranges = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({m}), &ids));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ::tensorflow::TensorShape({gaussian_tile_bin::Tiles(attrs_), 2}),
                                             &ranges));
    OP_REQUIRES_OK(ctx, Functor::Bin(ctx, means2d.flat<float>().data(), radii.flat<int32_t>().data(),
                                     depths.flat<float>().data(), n, attrs_, &state, m, ids->flat<int32_t>().data(),
                                     ranges->flat<int32_t>().data()));
  }
};

// MetalOpsGaussianTileBinStatic: outputs of a static size, for every C++-API device (the CPU
// and CUDA); XLA's handlers run the same CPU functor and CUDA launcher.
template <typename Device>
class GaussianTileBinStaticKernel : public OpKernelWithAttrs<gaussian_tile_bin::StaticAttrs> {
 public:
  using OpKernelWithAttrs::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::TensorShape;
    const ::tensorflow::Tensor& means2d = ctx->input(0);
    OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_tile_bin::Shapes(checks::DimsOf(means2d), checks::DimsOf(ctx->input(1)),
                                                                    checks::DimsOf(ctx->input(2)))));
    const TensorShape shapes[4] = {TensorShape({attrs_.max_intersections}),
                                   TensorShape({gaussian_tile_bin::Tiles(attrs_), 2}), TensorShape({}),
                                   TensorShape({})};
    ::tensorflow::Tensor* t[4];
    for (int i = 0; i < 4; ++i) OP_REQUIRES_OK(ctx, ctx->allocate_output(i, shapes[i], &t[i]));
    const GaussianTileBinStaticOutputs out = {t[0]->flat<int32_t>().data(), t[1]->flat<int32_t>().data(),
                                              t[2]->flat<int32_t>().data(), t[3]->flat<int32_t>().data()};
    OP_REQUIRES_OK(ctx, GaussianTileBinFunctor<Device>::Static(ctx, means2d.flat<float>().data(),
                                                               ctx->input(1).flat<int32_t>().data(),
                                                               ctx->input(2).flat<float>().data(),
                                                               means2d.dim_size(0), attrs_, out));
  }
};

}  // namespace mo

#if MO_XLA
// What GaussianTileBinStatic's XLA handlers (host: gaussian_tile_bin_cpu.cc,
// CUDA: gaussian_tile_bin_cuda.cc, each of which includes kernels/xla/xla_ffi.h
// and kernels/xla/xla_ffi_attrs.h first) share: the attributes' decoding, and
// fn(means2d, radii, depths, n, outputs) for the call's buffers (three
// operands, four results), their shapes checked (else the error).
MO_XLA_FFI_ATTRS(::mo::gaussian_tile_bin::StaticAttrs);

namespace mo::xla_ffi {

template <typename Fn>
ffi::Error GaussianTileBinStaticXla(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets, Fn&& fn) {
  return WithCallBuffers(args, rets, 3, 4, "GaussianTileBinStatic", [&](const auto& in, const auto& out) {
    const ffi::Error error = ToError(gaussian_tile_bin::Shapes(DimsOf(in[0]), DimsOf(in[1]), DimsOf(in[2])));
    if (error.failure()) return error;
    return fn(Data<float>(in[0]), Data<int32_t>(in[1]), Data<float>(in[2]), DimsOf(in[0])[0],
              GaussianTileBinStaticOutputs{Data<int32_t>(out[0]), Data<int32_t>(out[1]), Data<int32_t>(out[2]),
                                           Data<int32_t>(out[3])});
  });
}

}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_GAUSSIAN_TILE_BIN_GAUSSIAN_TILE_BIN_H_

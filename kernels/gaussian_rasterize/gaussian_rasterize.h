// GaussianRasterize: 3D Gaussian splatting's rasterization (Kerbl et al. 2023,
// gsplat's rasterize_to_pixels in its "classic" mode), front-to-back alpha
// compositing of depth-sorted 2D Gaussians per image tile, and its gradient.
// This header is the op's one description shared by every backend: the
// per-pixel arithmetic (written once for the CPU kernels and CUDA), the op's
// declaration (its attribute list, MO_GAUSSIAN_RASTERIZE_ATTRS) and, in host
// code, the attributes and checks that follow from it, the TensorFlow kernel
// class, the Metal plans' and the CUDA launchers' signatures. The op's files (docs/ADDING_AN_OP.md):
//   gaussian_rasterize_op.cc     REGISTER_OP                 gaussian_rasterize_cpu.cc    CPU kernels
//   gaussian_rasterize.cu.cc     CUDA kernels, launchers     gaussian_rasterize_cuda.cc   TF GPU kernels
//   gaussian_rasterize.metal     Metal shaders               gaussian_rasterize_metal.cc  Metal plans, tensorflow-metal glue
//
// Pixel (row i, column j) has its centre at (j + 0.5, i + 0.5) and lies in
// tile (i / tile_size, j / tile_size), tile id ty * tiles_x + tx. Its tile's
// Gaussians are gaussian_ids[tile_ranges[tile, 0] : tile_ranges[tile, 1]],
// front to back. With T = 1 and colour 0, for each of them in order:
//   d = means2d - pixel centre, sigma = 0.5 (a dx^2 + c dy^2) + b dx dy
//     (conic (a, b, c), the inverse 2D covariance [[a, b], [b, c]]);
//   skipped when sigma < 0 (or NaN);
//   alpha = min(0.99, opacity exp(-sigma)); skipped when alpha < 1/255 (or NaN);
//   next_T = T (1 - alpha); when next_T <= 1e-4 the pixel stops (this
//   Gaussian is not composited);
//   colour += alpha T colors[g]; T = next_T.
// image = colour + T background, alpha = 1 - T, last_ids = one past the
// index (into gaussian_ids) of the last Gaussian composited, the tile's start
// when none is. The backward walks the same Gaussians in reverse from
// last_ids, recovering each one's T by dividing by (1 - alpha), as gsplat's
// rasterize_to_pixels_bwd does. On a CUDA device exp(-sigma) and that
// 1 / (1 - alpha) are the hardware's approximations (platform.h's fast_exp_f,
// fast_rcp_f), as in gsplat's build: the hottest arithmetic of both passes.
#ifndef MO_KERNELS_GAUSSIAN_RASTERIZE_GAUSSIAN_RASTERIZE_H_
#define MO_KERNELS_GAUSSIAN_RASTERIZE_GAUSSIAN_RASTERIZE_H_

#include "kernels/common/gaussian_splat.h"
#include "kernels/common/platform.h"

#define MO_GS_ALPHA_MAX 0.99f                // alpha is clamped here
#define MO_GS_TRANSMITTANCE_MIN 1e-4f        // a pixel stops where T would fall to this
#define MO_GS_MAX_TILE_SIZE 32               // a CUDA block holds tile_size^2 threads

namespace mo {

// One Gaussian at one pixel centre (px, py): its offset (dx, dy), exp(-sigma)
// (*vis) and alpha; false when the Gaussian is skipped there.
MO_FN bool gs_alpha(float mx, float my, float a, float b, float c, float opacity, float px, float py,
                    MO_THREAD float* dx, MO_THREAD float* dy, MO_THREAD float* vis, MO_THREAD float* alpha) {
  const float x = mx - px, y = my - py;
  const float sigma = 0.5f * (a * x * x + c * y * y) + b * x * y;
  // Computed before the tests, so that a GPU evaluates this without branches.
  const float v = fast_exp_f(-sigma);
  const float raw = opacity * v;
  const float al = raw > MO_GS_ALPHA_MAX ? MO_GS_ALPHA_MAX : raw;
  *dx = x;
  *dy = y;
  *vis = v;
  *alpha = al;
  return sigma >= 0.0f && al >= MO_GS_ALPHA_MIN;
}

// What one front-to-back step did.
enum GsStep { kGsSkipped = 0, kGsComposited = 1, kGsDone = 2 };

// Composites one Gaussian (its colour color[0 .. channels)) into a pixel's
// colour acc[0 .. channels) and transmittance *t.
template <typename ColorPtr, typename AccPtr>
MO_FN int gs_forward_step(float mx, float my, float a, float b, float c, float opacity, ColorPtr color,
                          int channels, float px, float py, MO_THREAD float* t, AccPtr acc) {
  float dx, dy, vis, alpha;
  if (!gs_alpha(mx, my, a, b, c, opacity, px, py, &dx, &dy, &vis, &alpha)) return kGsSkipped;
  const float next_t = *t * (1.0f - alpha);
  if (next_t <= MO_GS_TRANSMITTANCE_MIN) return kGsDone;
  const float w = alpha * *t;
  for (int k = 0; k < channels; ++k) acc[k] += w * color[k];
  *t = next_t;
  return kGsComposited;
}

// A pixel's state in the backward: T of the Gaussian being visited (starts at
// the final T), and behind = sum_k (colour composited behind it)_k v_image_k.
struct GsBackState {
  float t;
  float behind;
};

// The pixel's upstream gradients: v_image[0 .. channels), v_alpha, and the
// constants of the background term (the final T, sum_k background_k v_image_k).
template <typename GradPtr>
struct GsPixelGrad {
  GradPtr v_image;
  float v_alpha;
  float t_final;
  float background_dot;
};

// The gradient of one Gaussian's contribution to a pixel, visited back to
// front: adds it to g_color[0 .. channels), g_mean[0..1], g_conic[0..2]
// (a, b, c) and g_opacity[0] (g_color: anything with `g_color[k] += x`);
// false when the Gaussian is skipped at this pixel
// (nothing added). Where alpha is clamped at 0.99 the means, conic and
// opacity get no gradient from it.
template <typename ColorPtr, typename GradPtr, typename ColorOut, typename OutPtr>
MO_FN bool gs_backward_step(float mx, float my, float a, float b, float c, float opacity, ColorPtr color,
                            int channels, float px, float py, const MO_THREAD GsPixelGrad<GradPtr>& up,
                            MO_THREAD GsBackState* s, ColorOut g_color, OutPtr g_mean, OutPtr g_conic,
                            OutPtr g_opacity) {
  float dx, dy, vis, alpha;
  if (!gs_alpha(mx, my, a, b, c, opacity, px, py, &dx, &dy, &vis, &alpha)) return false;
  const float ra = fast_rcp_f(1.0f - alpha);
  s->t *= ra;
  const float fac = alpha * s->t;
  float cv = 0.0f;
  for (int k = 0; k < channels; ++k) {
    cv += color[k] * up.v_image[k];
    g_color[k] += fac * up.v_image[k];
  }
  const float v_alpha =
      cv * s->t - s->behind * ra + up.t_final * ra * up.v_alpha - up.t_final * ra * up.background_dot;
  if (opacity * vis <= MO_GS_ALPHA_MAX) {
    const float v_sigma = -opacity * vis * v_alpha;
    g_conic[0] += 0.5f * v_sigma * dx * dx;
    g_conic[1] += v_sigma * dx * dy;
    g_conic[2] += 0.5f * v_sigma * dy * dy;
    g_mean[0] += v_sigma * (a * dx + b * dy);
    g_mean[1] += v_sigma * (b * dx + c * dy);
    g_opacity[0] += vis * v_alpha;
  }
  s->behind += fac * cv;
  return true;
}

// The backward's gradient row of one intersection (an index into
// gaussian_ids): means (2), conic (3), opacity, colour (C), summed over the
// tile's pixels; the rows are then added into the Gaussians' gradients in
// index order (the CPU kernels and the Metal shaders).
enum GsRow { kGsRowMean = 0, kGsRowConic = 2, kGsRowOpacity = 5, kGsRowColor = 6 };
MO_FN int gs_row_width(int channels) { return kGsRowColor + channels; }

// The tiles along an image side of `side` pixels.
MO_FN int gs_tiles(int side, int tile_size) { return (side + tile_size - 1) / tile_size; }

// ---- Metal (gaussian_rasterize.metal, the plans of gaussian_rasterize_metal.cc) ----
// One threadgroup per tile, thread t of it the tile's pixel (t / tile_size,
// t % tile_size); tile_size^2 rounded up to whole SIMD-groups of 32.
MO_FN int gs_threads_per_tile(int tile_size) { return (tile_size * tile_size + 31) / 32 * 32; }
// The forward's threadgroup memory per thread: one Gaussian of a batch
// (means2d 2, conic 3, opacity as floats), then its id and the thread's
// pixel's "done" flag as ints (32 KiB for tile_size 32).
#define MO_GS_FORWARD_TG_FLOATS 6
MO_FN uint32 gs_forward_tg_bytes(int tile_size) {
  return uint32(gs_threads_per_tile(tile_size)) * 4u * (MO_GS_FORWARD_TG_FLOATS + 2u);
}
// The backward tile pass's threadgroup memory: the tile's largest last_ids.
#define MO_GS_BACKWARD_TG_BYTES 16
// The backward's lists pass: a threadgroup per MO_GS_LISTS_THREADS Gaussians,
// their counts' exclusive scan and the group's place in threadgroup memory.
#define MO_GS_LISTS_THREADS 256
#define MO_GS_LISTS_TG_BYTES (4 * (MO_GS_LISTS_THREADS + 4))

// Arguments of a dispatch (same layout in the shaders and on the host).
struct GaussianRasterizeParams {
  int64 num_gaussians;  // N
  int64 num_ids;        // M: gaussian_ids
  int32 width;
  int32 height;
  int32 tile_size;
  int32 tiles_x;
  int32 tiles_y;
  int32 channels;  // C
  int32 threads;   // per threadgroup: gs_threads_per_tile(tile_size)
  int32 pad;
};

// The dispatch arguments of a call of n Gaussians and m intersections.
MO_FN GaussianRasterizeParams gs_params(int64 n, int64 m, int channels, int width, int height, int tile_size) {
  GaussianRasterizeParams p;
  p.num_gaussians = n;
  p.num_ids = m;
  p.width = width;
  p.height = height;
  p.tile_size = tile_size;
  p.tiles_x = gs_tiles(width, tile_size);
  p.tiles_y = gs_tiles(height, tile_size);
  p.channels = channels;
  p.threads = gs_threads_per_tile(tile_size);
  p.pad = 0;
  return p;
}

// The shaders' buffer indices, in order: the forward's inputs, its outputs and
// its GaussianRasterizeParams;
enum GaussianRasterizeBuffers {
  kGaussianRasterizeMeans2d, kGaussianRasterizeConics, kGaussianRasterizeColors, kGaussianRasterizeOpacities,
  kGaussianRasterizeBackground, kGaussianRasterizeIds, kGaussianRasterizeRanges,
  kGaussianRasterizeImage, kGaussianRasterizeAlpha, kGaussianRasterizeLastIds,
  kGaussianRasterizeParams,
};
// the backward's tile pass: the forward's inputs (at the forward's indices),
// its alpha and last_ids, the upstream gradients, the intersections' rows
// [M, 6 + C], the pixels' rows [tiles * threads, 6 + C], the tiles'
// background sums [tiles, C];
enum GaussianRasterizeGradBuffers {
  kGaussianRasterizeGradAlpha = kGaussianRasterizeImage, kGaussianRasterizeGradLastIds,
  kGaussianRasterizeGradImage, kGaussianRasterizeGradAlphaIn,
  kGaussianRasterizeGradRows, kGaussianRasterizeGradPixelRows, kGaussianRasterizeGradBackgroundSums,
  kGaussianRasterizeGradParams,
};
// the backward's list and sum passes: the ids, the rows and background sums,
// the five gradients, then each Gaussian's list of its intersections: the
// cursors [N + 1] (uint: a Gaussian's count, then its list's next place, then
// its list's end; the last the lists' running total), the lists' starts [N],
// the lists [M] (indices into gaussian_ids).
enum GaussianRasterizeSumBuffers {
  kGaussianRasterizeSumIds, kGaussianRasterizeSumRows, kGaussianRasterizeSumBackgroundSums,
  kGaussianRasterizeSumMeans2d, kGaussianRasterizeSumConics, kGaussianRasterizeSumColors,
  kGaussianRasterizeSumOpacities, kGaussianRasterizeSumBackground,
  kGaussianRasterizeSumParams,
  kGaussianRasterizeSumCursors, kGaussianRasterizeSumStarts, kGaussianRasterizeSumLists,
};

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsGaussianRasterize(means2d, conics, colors, opacities, background,
// gaussian_ids, tile_ranges) -> image, alpha, last_ids and
// MetalOpsGaussianRasterizeGrad(..., alpha, last_ids, grad_image, grad_alpha)
// -> grad_means2d, grad_conics, grad_colors, grad_opacities, grad_background.
#define MO_GAUSSIAN_RASTERIZE_ATTRS(ATTR)                                                    \
  ATTR(width, RequiredInt, 1, 65536) ATTR(height, RequiredInt, 1, 65536) \
  ATTR(tile_size, Int, 16, 1, MO_GS_MAX_TILE_SIZE)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace gaussian_rasterize {

// Attrs { int width, height, tile_size; }, ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("GaussianRasterize", MO_GAUSSIAN_RASTERIZE_ATTRS);

inline int64_t TilesX(const Attrs& a) { return gs_tiles(a.width, a.tile_size); }
inline int64_t TilesY(const Attrs& a) { return gs_tiles(a.height, a.tile_size); }

// The checks, written once for the shape functions and the TensorFlow
// kernels. No TensorFlow API: sizes in, kernels/spec/checks.h's Result out;
// -1 is an unknown dimension (shape functions) and matches any size.
// Messages name the argument; tests match on them.
namespace detail {

inline bool Match(int64_t have, int64_t want) { return have == want || have == -1 || want == -1; }

// `dims` has the rank of `want`, each dimension matching (-1 matches anything).
inline Result Shaped(const char* op, const char* name, const Dims& dims, const Dims& want, const char* what) {
  bool same = dims.size() == want.size();
  for (size_t d = 0; same && d < want.size(); ++d) same = Match(dims[d], want[d]);
  if (!same) return Invalid(op, ": '", name, "' must be ", what, ", got shape ", ShapeString(dims));
  return Ok();
}

// A known size of dimension d of `dims` (rank already checked), else -1.
inline int64_t Dim(const Dims& dims, size_t d) { return d < dims.size() ? dims[d] : -1; }

// The first known of two sizes.
inline int64_t Known(int64_t x, int64_t y) { return x >= 0 ? x : y; }

}  // namespace detail

// The inputs shared by the op and its gradient, in their order.
struct InputDims {
  Dims means2d, conics, colors, opacities, background, gaussian_ids, tile_ranges;
};

// Every input's shape: means2d [N, 2], conics [N, 3], colors [N, C] (C >= 1),
// opacities [N], background [C], gaussian_ids [M], tile_ranges [tiles_y *
// tiles_x, 2] for the image and tile size. *n and *c: the sizes (-1 unknown).
inline Result CheckInputs(const char* op, const Attrs& a, const InputDims& in, int64_t* n, int64_t* c) {
  using detail::Dim;
  using detail::Known;
  using detail::Shaped;
  MO_RETURN_IF_INVALID(Shaped(op, "means2d", in.means2d, {-1, 2}, "[N, 2] (u, v in pixels)"));
  const int64_t n0 = Dim(in.means2d, 0);
  MO_RETURN_IF_INVALID(Shaped(op, "conics", in.conics, {n0, 3}, "[N, 3] (a, b, c), N as in 'means2d'"));
  const int64_t n1 = Known(n0, Dim(in.conics, 0));
  MO_RETURN_IF_INVALID(Shaped(op, "colors", in.colors, {n1, -1}, "[N, C], N as in 'means2d'"));
  if (Dim(in.colors, 1) == 0) return Invalid(op, ": 'colors' must have at least one channel, got shape ", ShapeString(in.colors));
  const int64_t n2 = Known(n1, Dim(in.colors, 0));
  MO_RETURN_IF_INVALID(Shaped(op, "opacities", in.opacities, {n2}, "[N], N as in 'means2d'"));
  const int64_t channels = Dim(in.colors, 1);
  MO_RETURN_IF_INVALID(Shaped(op, "background", in.background, {channels}, "[C], C the channels of 'colors'"));
  MO_RETURN_IF_INVALID(Shaped(op, "gaussian_ids", in.gaussian_ids, {-1}, "[M] (a vector)"));
  const int64_t tiles = TilesX(a) * TilesY(a);
  if (!detail::Match(Dim(in.tile_ranges, 0), tiles) || in.tile_ranges.size() != 2 || !detail::Match(Dim(in.tile_ranges, 1), 2)) {
    return Invalid(op, ": 'tile_ranges' must be [tiles_y * tiles_x, 2] = [", tiles, ", 2] for width ", a.width,
                   ", height ", a.height, " and tile_size ", a.tile_size, ", got shape ", ShapeString(in.tile_ranges));
  }
  *n = Known(n2, Dim(in.opacities, 0));
  *c = Known(channels, Dim(in.background, 0));
  return Ok();
}

// The image [H, W, C] and the per-pixel [H, W] outputs' dims.
inline Dims ImageDims(const Attrs& a, int64_t channels) { return {a.height, a.width, channels}; }
inline Dims PixelDims(const Attrs& a) { return {a.height, a.width}; }

// MetalOpsGaussianRasterize's checks: its inputs; the outputs' dims.
inline Result Shapes(const Attrs& a, const InputDims& in, Dims* image, Dims* pixels) {
  int64_t n = 0, c = 0;
  MO_RETURN_IF_INVALID(CheckInputs("GaussianRasterize", a, in, &n, &c));
  *image = ImageDims(a, c);
  *pixels = PixelDims(a);
  return Ok();
}

// MetalOpsGaussianRasterizeGrad's: the inputs, then the forward's alpha and
// last_ids [H, W] and the upstream gradients (grad_image [H, W, C],
// grad_alpha [H, W]).
inline Result GradShapes(const Attrs& a, const InputDims& in, const Dims& alpha, const Dims& last_ids,
                         const Dims& grad_image, const Dims& grad_alpha) {
  constexpr const char* op = "GaussianRasterizeGrad";
  int64_t n = 0, c = 0;
  MO_RETURN_IF_INVALID(CheckInputs(op, a, in, &n, &c));
  const Dims pixels = PixelDims(a);
  MO_RETURN_IF_INVALID(detail::Shaped(op, "alpha", alpha, pixels, "[height, width], the forward's alpha"));
  MO_RETURN_IF_INVALID(detail::Shaped(op, "last_ids", last_ids, pixels, "[height, width], the forward's last_ids"));
  MO_RETURN_IF_INVALID(detail::Shaped(op, "grad_image", grad_image, ImageDims(a, c), "[height, width, C]"));
  return detail::Shaped(op, "grad_alpha", grad_alpha, pixels, "[height, width]");
}

// The values of the index inputs (checked by the CPU kernels before any
// work): every tile's range 0 <= start <= end <= m (TileRanges), then every
// id a tile's range covers in [0, n). No kernel reads an id that no range
// covers (GaussianTileBinStatic's padding, -1).
inline Result GaussianIds(const char* op, const int32_t* ids, const int32_t* ranges, int64_t tiles, int64_t n) {
  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t i = ranges[2 * t]; i < ranges[2 * t + 1]; ++i) {
      if (ids[i] < 0 || ids[i] >= n) {
        return Invalid(op, ": 'gaussian_ids' must index the ", n, " Gaussians, got gaussian_ids[", i, "] = ", ids[i]);
      }
    }
  }
  return Ok();
}

inline Result TileRanges(const char* op, const int32_t* ranges, int64_t tiles, int64_t m) {
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t start = ranges[2 * t], end = ranges[2 * t + 1];
    if (start < 0 || start > end || end > m) {
      return Invalid(op, ": 'tile_ranges' must hold ranges 0 <= start <= end <= ", m,
                     " into 'gaussian_ids', got [", start, ", ", end, ") for tile ", t);
    }
  }
  return Ok();
}

// last_ids (the gradient op's input, the forward's output): each pixel's
// within its tile's range.
inline Result LastIds(const int32_t* last_ids, const int32_t* ranges, const Attrs& a) {
  const int64_t tiles_x = TilesX(a);
  for (int64_t i = 0; i < a.height; ++i) {
    for (int64_t j = 0; j < a.width; ++j) {
      const int64_t tile = (i / a.tile_size) * tiles_x + j / a.tile_size;
      const int32_t last = last_ids[i * a.width + j];
      if (last < ranges[2 * tile] || last > ranges[2 * tile + 1]) {
        return Invalid("GaussianRasterizeGrad: 'last_ids' must be the forward's, got ", last, " at pixel (", i, ", ",
                       j, ") outside its tile's range [", ranges[2 * tile], ", ", ranges[2 * tile + 1], ")");
      }
    }
  }
  return Ok();
}

// The sizes of a call.
struct Sizes {
  int64_t n = 0;         // Gaussians
  int64_t channels = 0;  // C
  int64_t m = 0;         // intersections (gaussian_ids)
};

// The tensors of one call, as the functors and launchers take them.
struct ForwardArgs {
  const float *means2d, *conics, *colors, *opacities, *background;
  const int32_t *ids, *ranges;
  float *image, *alpha;
  int32_t* last_ids;
};

struct BackwardArgs {
  const float *means2d, *conics, *colors, *opacities, *background;
  const int32_t *ids, *ranges;
  const float* alpha;
  const int32_t* last_ids;
  const float *grad_image, *grad_alpha;
  float *grad_means2d, *grad_conics, *grad_colors, *grad_opacities, *grad_background;
};

}  // namespace gaussian_rasterize
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (gaussian_rasterize_metal.cc), every Metal path's
// (kernels/metal_plan/plan.h): float32, one threadgroup per tile. The
// backward is deterministic (no float atomics): its tile pass writes each
// intersection's row summed over the tile's pixels in order, its list passes
// gather each Gaussian's intersections, and its sum pass, one thread per
// Gaussian, adds that Gaussian's rows in index order, as the CPU kernels do.
namespace mo::metal_plan {
enum GaussianRasterizeSlots {
  kGaussianRasterizeSlotMeans2d,
  kGaussianRasterizeSlotConics,
  kGaussianRasterizeSlotColors,
  kGaussianRasterizeSlotOpacities,
  kGaussianRasterizeSlotBackground,
  kGaussianRasterizeSlotIds,
  kGaussianRasterizeSlotRanges,
  kGaussianRasterizeSlotImage,
  kGaussianRasterizeSlotAlpha,
  kGaussianRasterizeSlotLastIds,
  kGaussianRasterizeSlots
};
// The gradient op's: the forward's inputs at the forward's slots, then these.
enum GaussianRasterizeGradSlots {
  kGaussianRasterizeGradSlotAlpha = kGaussianRasterizeSlotImage,
  kGaussianRasterizeGradSlotLastIds,
  kGaussianRasterizeGradSlotGradImage,
  kGaussianRasterizeGradSlotGradAlpha,
  kGaussianRasterizeGradSlotOutMeans2d,
  kGaussianRasterizeGradSlotOutConics,
  kGaussianRasterizeGradSlotOutColors,
  kGaussianRasterizeGradSlotOutOpacities,
  kGaussianRasterizeGradSlotOutBackground,
  kGaussianRasterizeGradSlots
};
Plan GaussianRasterizeForward(const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a);
Plan GaussianRasterizeBackward(const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>

// The CUDA launchers (gaussian_rasterize.cu.cc), plain C++ (no TensorFlow): the TF GPU
// kernels (gaussian_rasterize_cuda.cc) and the C-ABI harness
// (tests/cuda/gaussian_rasterize_harness.cu.cc). One block per tile, one thread
// per pixel; ids and ranges outside their bounds are skipped on the device
// (the CPU kernels check them). The backward accumulates the per-Gaussian
// gradients with atomicAdd into outputs it zeroes first.
namespace mo::cuda {
cudaError_t LaunchGaussianRasterizeForward(const gaussian_rasterize::ForwardArgs& t, const gaussian_rasterize::Sizes& s,
                                           const gaussian_rasterize::Attrs& a, cudaStream_t stream);
cudaError_t LaunchGaussianRasterizeBackward(const gaussian_rasterize::BackwardArgs& t,
                                            const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a,
                                            cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels of MetalOpsGaussianRasterize / MetalOpsGaussianRasterizeGrad,
// once for every C++-API device (one kernel class templated on the device, a
// functor per device): the checks above and the output allocation here;
// GaussianRasterizeFunctor<Device> does the work. gaussian_rasterize_cpu.cc and
// gaussian_rasterize_cuda.cc define MO_TF_KERNEL and include TensorFlow's
// op_kernel.h and kernels/framework/op_kernel_with_attrs.h before this header,
// and register GaussianRasterizeKernel<Device, false> and <Device, true> for
// the op and its gradient.
namespace mo {
namespace gaussian_rasterize {

inline InputDims InputDimsOf(::tensorflow::OpKernelContext* ctx) {
  return {checks::DimsOf(ctx->input(0)), checks::DimsOf(ctx->input(1)), checks::DimsOf(ctx->input(2)),
          checks::DimsOf(ctx->input(3)), checks::DimsOf(ctx->input(4)), checks::DimsOf(ctx->input(5)),
          checks::DimsOf(ctx->input(6))};
}

// Once the inputs' shapes are checked.
inline Sizes SizesOf(::tensorflow::OpKernelContext* ctx) {
  Sizes s;
  s.n = ctx->input(0).dim_size(0);
  s.channels = ctx->input(2).dim_size(1);
  s.m = ctx->input(5).dim_size(0);
  return s;
}

}  // namespace gaussian_rasterize

// Defined per device; the inputs are checked, the image not empty.
template <typename Device>
struct GaussianRasterizeFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const gaussian_rasterize::Sizes& s,
                              const gaussian_rasterize::Attrs& a, const gaussian_rasterize::ForwardArgs& t);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const gaussian_rasterize::Sizes& s,
                               const gaussian_rasterize::Attrs& a, const gaussian_rasterize::BackwardArgs& t);
};

// The forward (kGrad false) or the gradient op (kGrad true).
template <typename Device, bool kGrad>
class GaussianRasterizeKernel : public OpKernelWithAttrs<gaussian_rasterize::Attrs> {
 public:
  using OpKernelWithAttrs::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    namespace gr = gaussian_rasterize;
    using ::tensorflow::TensorShape;
    const gr::Attrs& a = attrs_;
    const gr::InputDims in = gr::InputDimsOf(ctx);
    if constexpr (kGrad) {
      OP_REQUIRES_OK(ctx, checks::ToStatus(gr::GradShapes(a, in, Dims(ctx, 7), Dims(ctx, 8), Dims(ctx, 9),
                                                          Dims(ctx, 10))));
      float* out[5] = {};
      for (int i = 0; i < 5; ++i) OP_REQUIRES_OK(ctx, AllocateOutput(ctx, i, ctx->input(i).shape(), &out[i]));
      const gr::BackwardArgs t{Float(ctx, 0), Float(ctx, 1), Float(ctx, 2), Float(ctx, 3), Float(ctx, 4),
                               Int(ctx, 5),   Int(ctx, 6),   Float(ctx, 7), Int(ctx, 8),   Float(ctx, 9),
                               Float(ctx, 10), out[0],       out[1],        out[2],        out[3],
                               out[4]};
      OP_REQUIRES_OK(ctx, GaussianRasterizeFunctor<Device>::Backward(ctx, gr::SizesOf(ctx), a, t));
    } else {
      checks::Dims image_dims, pixel_dims;
      OP_REQUIRES_OK(ctx, checks::ToStatus(gr::Shapes(a, in, &image_dims, &pixel_dims)));
      float *image = nullptr, *alpha = nullptr;
      int32_t* last_ids = nullptr;
      OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 0, TensorShape(image_dims), &image));
      OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 1, TensorShape(pixel_dims), &alpha));
      OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 2, TensorShape(pixel_dims), &last_ids));
      const gr::ForwardArgs t{Float(ctx, 0), Float(ctx, 1), Float(ctx, 2), Float(ctx, 3), Float(ctx, 4),
                              Int(ctx, 5),   Int(ctx, 6),   image,         alpha,         last_ids};
      OP_REQUIRES_OK(ctx, GaussianRasterizeFunctor<Device>::Forward(ctx, gr::SizesOf(ctx), a, t));
    }
  }

 private:
  static checks::Dims Dims(::tensorflow::OpKernelContext* ctx, int i) { return checks::DimsOf(ctx->input(i)); }
  static const float* Float(::tensorflow::OpKernelContext* ctx, int i) { return ctx->input(i).flat<float>().data(); }
  static const int32_t* Int(::tensorflow::OpKernelContext* ctx, int i) {
    return ctx->input(i).flat<int32_t>().data();
  }
};

}  // namespace mo

#if MO_XLA
// What the XLA handlers (host: gaussian_rasterize_cpu.cc, CUDA:
// gaussian_rasterize_cuda.cc, each of which includes kernels/xla/xla_ffi.h
// first) share: the call's buffers (the seven inputs, the gradient op's four
// more, then the outputs), their shapes checked as the TensorFlow kernels
// check them, as the functors and launchers take them.
namespace mo::xla_ffi {

struct GaussianRasterizeXlaCall {
  gaussian_rasterize::Sizes sizes;
  gaussian_rasterize::ForwardArgs forward{};    // the op's call
  gaussian_rasterize::BackwardArgs backward{};  // the gradient op's (grad)
};

// fn(call) for the call's buffers, their shapes checked (else the error).
template <typename Fn>
ffi::Error GaussianRasterizeXla(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                                const gaussian_rasterize::Attrs& a, bool grad, Fn&& fn) {
  const auto call = [&](const std::vector<ffi::AnyBuffer>& in, const std::vector<RetBuffer>& out) {
    const gaussian_rasterize::InputDims dims = {DimsOf(in[0]), DimsOf(in[1]), DimsOf(in[2]), DimsOf(in[3]),
                                                DimsOf(in[4]), DimsOf(in[5]), DimsOf(in[6])};
    checks::Dims image, pixels;
    const ffi::Error error = ToError(grad ? gaussian_rasterize::GradShapes(a, dims, DimsOf(in[7]), DimsOf(in[8]),
                                                                           DimsOf(in[9]), DimsOf(in[10]))
                                          : gaussian_rasterize::Shapes(a, dims, &image, &pixels));
    if (error.failure()) return error;
    GaussianRasterizeXlaCall c;
    c.sizes.n = dims.means2d[0];
    c.sizes.channels = dims.colors[1];
    c.sizes.m = dims.gaussian_ids[0];
    const float* f[5];
    for (int i = 0; i < 5; ++i) f[i] = Data<float>(in[i]);
    const int32_t *ids = Data<int32_t>(in[5]), *ranges = Data<int32_t>(in[6]);
    if (grad) {
      c.backward = {f[0], f[1], f[2], f[3], f[4], ids, ranges, Data<float>(in[7]), Data<int32_t>(in[8]),
                    Data<float>(in[9]), Data<float>(in[10]), Data<float>(out[0]), Data<float>(out[1]),
                    Data<float>(out[2]), Data<float>(out[3]), Data<float>(out[4])};
    } else {
      c.forward = {f[0], f[1], f[2], f[3], f[4], ids, ranges, Data<float>(out[0]), Data<float>(out[1]),
                   Data<int32_t>(out[2])};
    }
    return fn(c);
  };
  return WithCallBuffers(args, rets, grad ? 11 : 7, grad ? 5 : 3, "GaussianRasterize", call);
}

}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_GAUSSIAN_RASTERIZE_GAUSSIAN_RASTERIZE_H_

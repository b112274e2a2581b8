// GaussianRasterize on Metal: the op's Metal plans (which shader of
// gaussian_rasterize.metal, one threadgroup per tile, which tensor slot at
// which buffer index; every Metal path runs them: the CPU kernels' offload,
// the MSL shim, tensorflow-metal) and, on macOS, its kernels on the Metal
// PluggableDevice ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h), float32.
//
// The backward has no float atomics: its tile pass writes each
// intersection's gradient row (summed over the tile's pixels in order); three
// passes gather each Gaussian's intersections into a list of its own
// (integer atomics: the lists' places and their order vary with the order
// in which threads run); the sum pass, one thread per Gaussian, sorts its
// list and adds its rows into its gradients in index order. So the results
// are reproducible run to run, and the same sums as the CPU kernels'. The
// index inputs' values are not checked on Metal (that would need a read-back
// and a wait on the command buffer): the shaders skip ids outside [0, N) and
// clamp the ranges to [0, M).
#include "kernels/gaussian_rasterize/gaussian_rasterize.h"

namespace mo::metal_plan {

namespace {
uint64_t Floats(int64_t count) { return static_cast<uint64_t>(count) * sizeof(float); }

GaussianRasterizeParams ParamsOf(const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a) {
  return gs_params(s.n, s.m, static_cast<int>(s.channels), a.width, a.height, a.tile_size);
}

// The seven inputs of the op, which the forward and the tile pass of the
// backward read at the same buffer indices and slots.
PlanBuilder& ReadInputs(PlanBuilder& b) {
  return b.Tensors({{kGaussianRasterizeMeans2d, kGaussianRasterizeSlotMeans2d},
                    {kGaussianRasterizeConics, kGaussianRasterizeSlotConics},
                    {kGaussianRasterizeColors, kGaussianRasterizeSlotColors},
                    {kGaussianRasterizeOpacities, kGaussianRasterizeSlotOpacities},
                    {kGaussianRasterizeBackground, kGaussianRasterizeSlotBackground},
                    {kGaussianRasterizeIds, kGaussianRasterizeSlotIds},
                    {kGaussianRasterizeRanges, kGaussianRasterizeSlotRanges}},
                   {});
}
}  // namespace

Plan GaussianRasterizeForward(const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a) {
  const GaussianRasterizeParams p = ParamsOf(s, a);
  PlanBuilder b(kGaussianRasterizeSlots);
  ReadInputs(b.Threadgroups("gaussian_rasterize", "gaussian_rasterize_forward",
                            uint64_t(p.tiles_x) * uint64_t(p.tiles_y), uint32_t(p.threads),
                            gs_forward_tg_bytes(a.tile_size)))
      .Output(kGaussianRasterizeImage, kGaussianRasterizeSlotImage)
      .Output(kGaussianRasterizeAlpha, kGaussianRasterizeSlotAlpha)
      .Output(kGaussianRasterizeLastIds, kGaussianRasterizeSlotLastIds)
      .Value(kGaussianRasterizeParams, p);
  return b.Finish();
}

Plan GaussianRasterizeBackward(const gaussian_rasterize::Sizes& s, const gaussian_rasterize::Attrs& a) {
  const GaussianRasterizeParams p = ParamsOf(s, a);
  const int64_t width = gs_row_width(p.channels), tiles = int64_t{p.tiles_x} * p.tiles_y;
  PlanBuilder b(kGaussianRasterizeGradSlots);
  const uint64_t row_bytes = Floats(s.m * width);
  const int rows = b.NewScratch(row_bytes);
  const int pixel_rows = b.NewScratch(Floats(tiles * p.threads * width));
  const int background_sums = b.NewScratch(Floats(tiles * p.channels));
  b.ZeroScratch(rows, row_bytes);
  ReadInputs(b.Threadgroups("gaussian_rasterize", "gaussian_rasterize_backward", uint64_t(tiles),
                            uint32_t(p.threads), MO_GS_BACKWARD_TG_BYTES))
      .Tensor(kGaussianRasterizeGradAlpha, kGaussianRasterizeGradSlotAlpha)
      .Tensor(kGaussianRasterizeGradLastIds, kGaussianRasterizeGradSlotLastIds)
      .Tensor(kGaussianRasterizeGradImage, kGaussianRasterizeGradSlotGradImage)
      .Tensor(kGaussianRasterizeGradAlphaIn, kGaussianRasterizeGradSlotGradAlpha)
      .Scratch(kGaussianRasterizeGradRows, rows)
      .Scratch(kGaussianRasterizeGradPixelRows, pixel_rows)
      .Scratch(kGaussianRasterizeGradBackgroundSums, background_sums)
      .Value(kGaussianRasterizeGradParams, p);
  // Each Gaussian's list of its intersections: counted, placed, filled.
  const int cursors = b.NewScratch(uint64_t(s.n + 1) * sizeof(uint32_t));
  const int starts = b.NewScratch(uint64_t(s.n) * sizeof(uint32_t));
  const int lists = b.NewScratch(uint64_t(s.m) * sizeof(int32_t));
  if (s.n > 0) {
    b.ZeroScratch(cursors, uint64_t(s.n + 1) * sizeof(uint32_t));
    // A pass of one thread per intersection: its id moves its Gaussian's cursor.
    const auto per_intersection = [&](const char* function) -> PlanBuilder& {
      return b.Threads("gaussian_rasterize", function, uint64_t(s.m))
          .Tensor(kGaussianRasterizeSumIds, kGaussianRasterizeSlotIds)
          .Scratch(kGaussianRasterizeSumCursors, cursors)
          .Value(kGaussianRasterizeSumParams, p);
    };
    if (s.m > 0) per_intersection("gaussian_rasterize_backward_count");
    const uint64_t list_groups = (uint64_t(s.n) + MO_GS_LISTS_THREADS - 1) / MO_GS_LISTS_THREADS;
    b.Threadgroups("gaussian_rasterize", "gaussian_rasterize_backward_lists", list_groups, MO_GS_LISTS_THREADS,
                   MO_GS_LISTS_TG_BYTES)
        .Scratch(kGaussianRasterizeSumCursors, cursors)
        .Scratch(kGaussianRasterizeSumStarts, starts)
        .Value(kGaussianRasterizeSumParams, p);
    if (s.m > 0) per_intersection("gaussian_rasterize_backward_fill").Scratch(kGaussianRasterizeSumLists, lists);
  }
  // One thread per Gaussian (its sorted list's rows) and per background channel.
  b.Threads("gaussian_rasterize", "gaussian_rasterize_backward_sum", uint64_t(s.n + p.channels))
      .Scratch(kGaussianRasterizeSumCursors, cursors)
      .Scratch(kGaussianRasterizeSumStarts, starts)
      .Scratch(kGaussianRasterizeSumLists, lists)
      .Scratch(kGaussianRasterizeSumRows, rows)
      .Scratch(kGaussianRasterizeSumBackgroundSums, background_sums)
      .Tensors({}, {{kGaussianRasterizeSumMeans2d, kGaussianRasterizeGradSlotOutMeans2d},
                    {kGaussianRasterizeSumConics, kGaussianRasterizeGradSlotOutConics},
                    {kGaussianRasterizeSumColors, kGaussianRasterizeGradSlotOutColors},
                    {kGaussianRasterizeSumOpacities, kGaussianRasterizeGradSlotOutOpacities},
                    {kGaussianRasterizeSumBackground, kGaussianRasterizeGradSlotOutBackground}})
      .Value(kGaussianRasterizeSumParams, p);
  return b.Finish();
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

#include <vector>

namespace {

using mo::metal::DimsOf;
using mo::gaussian_rasterize::Attrs;

// The seven inputs means2d ... tile_ranges and their dims.
bool Inputs(mo::metal::KernelCall& call, TF_Tensor* in[7], mo::gaussian_rasterize::InputDims* dims) {
  for (int k = 0; k < 7; ++k) in[k] = call.Input(k);
  if (!call.ok()) return false;
  *dims = {DimsOf(in[0]), DimsOf(in[1]), DimsOf(in[2]), DimsOf(in[3]), DimsOf(in[4]), DimsOf(in[5]), DimsOf(in[6])};
  return true;
}

// The call's sizes, once the inputs' shapes are checked.
mo::gaussian_rasterize::Sizes SizesOf(const mo::gaussian_rasterize::InputDims& dims) {
  mo::gaussian_rasterize::Sizes s;
  s.n = dims.means2d[0];
  s.channels = dims.colors[1];
  s.m = dims.gaussian_ids[0];
  return s;
}

// Whether the pipeline of `function` runs `threads` threads with `bytes` of
// threadgroup memory on this GPU (else the call is refused saying why).
bool Fits(mo::metal::KernelCall& call, const char* function, uint32_t threads, uint32_t bytes) {
  const mo::mtl::Pipeline* pipeline = call.Pipeline("gaussian_rasterize", function);
  return pipeline != nullptr && call.CheckThreadgroups(pipeline, threads, bytes);
}

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* in[7];
  mo::gaussian_rasterize::InputDims dims;
  mo::checks::Dims image_dims, pixel_dims;
  if (!Inputs(call, in, &dims) || !call.Check(mo::gaussian_rasterize::Shapes(a, dims, &image_dims, &pixel_dims))) {
    return;
  }
  TF_Tensor* image = call.Output(0, TF_FLOAT, image_dims);
  TF_Tensor* alpha = call.Output(1, TF_FLOAT, pixel_dims);
  TF_Tensor* last_ids = call.Output(2, TF_INT32, pixel_dims);
  if (!call.ok() || !Fits(call, "gaussian_rasterize_forward", uint32_t(mo::gs_threads_per_tile(a.tile_size)),
                          mo::gs_forward_tg_bytes(a.tile_size))) {
    return;
  }
  call.RunPlan(mo::metal_plan::GaussianRasterizeForward(SizesOf(dims), a),
               {in[0], in[1], in[2], in[3], in[4], in[5], in[6], image, alpha, last_ids});
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* in[7];
  mo::gaussian_rasterize::InputDims dims;
  if (!Inputs(call, in, &dims)) return;
  TF_Tensor* alpha = call.Input(7);
  TF_Tensor* last_ids = call.Input(8);
  TF_Tensor* grad_image = call.Input(9);
  TF_Tensor* grad_alpha = call.Input(10);
  if (!call.ok() || !call.Check(mo::gaussian_rasterize::GradShapes(a, dims, DimsOf(alpha), DimsOf(last_ids),
                                                                    DimsOf(grad_image), DimsOf(grad_alpha)))) {
    return;
  }
  TF_Tensor* out[5];
  for (int k = 0; k < 5; ++k) out[k] = call.Output(k, TF_FLOAT, DimsOf(in[k]));
  if (!call.ok() || !Fits(call, "gaussian_rasterize_backward", uint32_t(mo::gs_threads_per_tile(a.tile_size)),
                          MO_GS_BACKWARD_TG_BYTES)) {
    return;
  }
  std::vector<mo::metal::KernelCall::PlanSlot> slots(in, in + 7);
  for (TF_Tensor* t : {alpha, last_ids, grad_image, grad_alpha, out[0], out[1], out[2], out[3], out[4]}) {
    slots.push_back(t);
  }
  call.RunPlan(mo::metal_plan::GaussianRasterizeBackward(SizesOf(dims), a), slots);
}

// The op's and its gradient's kernels, registered as the library loads.
const bool registered = [] {
  const bool forward = mo::metal::RegisterWithAttrs<Attrs>("MetalOpsGaussianRasterize", {mo::metal::kNoTypeConstraint},
                                                           &mo::metal::Compute<Forward>);
  const bool backward = mo::metal::RegisterWithAttrs<Attrs>(
      "MetalOpsGaussianRasterizeGrad", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<Backward>);
  return forward && backward;
}();

}  // namespace
#endif  // __APPLE__

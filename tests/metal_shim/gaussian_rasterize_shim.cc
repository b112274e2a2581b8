// Runs the GaussianRasterize Metal shaders on the CPU (tests/metal_shim/msl_shim.h),
// in the order the plans of kernels/gaussian_rasterize/gaussian_rasterize_metal.cc
// encode them, with their geometry (gaussian_rasterize.h gs_params): one
// threadgroup per tile, its threads cooperating fibers (barriers wait for the
// whole threadgroup), `reverse` running them in reverse order between
// barriers; the backward's list and sum passes over a grid, its threads in
// reverse order too. Driven by
// tests/test_gaussian_rasterize.py through ctypes.
#include <algorithm>
#include <string>
#include <vector>

#include "tests/metal_shim/msl_shim.h"
#include "gaussian_rasterize.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

std::string g_error;

msl_shim::Kernel kKernels[] = {
#include "gaussian_rasterize.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

// The inputs shared by the forward and the backward.
struct Inputs {
  const float *means2d, *conics, *colors, *opacities, *background;
  const int *ids, *ranges;
};

struct ForwardCall {
  Inputs in;
  float *image, *alpha;
  int* last_ids;
  mo::GaussianRasterizeParams p;
  static void Thread(void* arg, uint group, uint index) {
    const ForwardCall* c = static_cast<const ForwardCall*>(arg);
    gaussian_rasterize_forward<float>(c->in.means2d, c->in.conics, c->in.colors, c->in.opacities, c->in.background,
                                      c->in.ids, c->in.ranges, c->image, c->alpha, c->last_ids, c->p,
                                      static_cast<float*>(msl_shim::threadgroup_memory()), group, index);
  }
};

struct BackwardCall {
  Inputs in;
  const float* alpha;
  const int* last_ids;
  const float *grad_image, *grad_alpha;
  float *rows, *pixel_rows, *background_sums;
  mo::GaussianRasterizeParams p;
  static void Thread(void* arg, uint group, uint index) {
    const BackwardCall* c = static_cast<const BackwardCall*>(arg);
    gaussian_rasterize_backward<float>(c->in.means2d, c->in.conics, c->in.colors, c->in.opacities, c->in.background,
                                       c->in.ids, c->in.ranges, c->alpha, c->last_ids, c->grad_image, c->grad_alpha,
                                       c->rows, c->pixel_rows, c->background_sums, c->p,
                                       static_cast<float*>(msl_shim::threadgroup_memory()), group, index);
  }
};

struct ListsCall {
  metal::atomic_uint* cursors;
  uint* starts;
  mo::GaussianRasterizeParams p;
  static void Thread(void* arg, uint group, uint index) {
    const ListsCall* c = static_cast<const ListsCall*>(arg);
    gaussian_rasterize_backward_lists(c->cursors, c->starts, c->p, static_cast<uint*>(msl_shim::threadgroup_memory()),
                                      group, index);
  }
};

uint Tiles(const mo::GaussianRasterizeParams& p) { return uint(p.tiles_x) * uint(p.tiles_y); }

// fn(gid) for each thread of a grid of `grid`, in reverse order where asked.
template <typename Fn>
void RunGrid(uint grid, bool reverse, const Fn& fn) {
  for (uint i = 0; i < grid; ++i) fn(reverse ? grid - 1 - i : i);
}

}  // namespace

extern "C" {

const char* shim_gaussian_rasterize_error() { return g_error.c_str(); }

// The forward: 0, or -1 with shim_gaussian_rasterize_error().
int shim_gaussian_rasterize_forward(const float* means2d, const float* conics, const float* colors,
                                    const float* opacities, const float* background, const int* ids,
                                    const int* ranges, float* image, float* alpha, int* last_ids, int64_t n,
                                    int64_t m, int channels, int width, int height, int tile_size, int reverse) {
  ForwardCall call = {{means2d, conics, colors, opacities, background, ids, ranges},
                      image, alpha, last_ids, mo::gs_params(n, m, channels, width, height, tile_size)};
  if (const char* failed = msl_shim::run_threadgroups(Tiles(call.p), uint(call.p.threads),
                                                      mo::gs_forward_tg_bytes(tile_size), reverse != 0,
                                                      &ForwardCall::Thread, &call)) {
    g_error = failed;
    return -1;
  }
  return 0;
}

// The backward (tile pass over threadgroups; the count, fill and sum passes
// over a grid of `grid` threads and the lists pass over its threadgroups, as
// the plan encodes them): 0, or -1 with shim_gaussian_rasterize_error().
int shim_gaussian_rasterize_backward(const float* means2d, const float* conics, const float* colors,
                                     const float* opacities, const float* background, const int* ids,
                                     const int* ranges, const float* alpha, const int* last_ids,
                                     const float* grad_image, const float* grad_alpha, float* grad_means2d,
                                     float* grad_conics, float* grad_colors, float* grad_opacities,
                                     float* grad_background, int64_t n, int64_t m, int channels, int width,
                                     int height, int tile_size, int reverse, uint grid) {
  const mo::GaussianRasterizeParams p = mo::gs_params(n, m, channels, width, height, tile_size);
  const size_t row = size_t(mo::gs_row_width(channels)), tiles = Tiles(p);
  std::vector<float> rows(std::max<size_t>(size_t(m) * row, 1), 0.0f);  // the plan zeroes them
  std::vector<float> pixel_rows(tiles * size_t(p.threads) * row, 7.0f);
  std::vector<float> background_sums(tiles * size_t(channels), 7.0f);
  BackwardCall call = {{means2d, conics, colors, opacities, background, ids, ranges},
                       alpha, last_ids, grad_image, grad_alpha, rows.data(), pixel_rows.data(),
                       background_sums.data(), p};
  if (const char* failed = msl_shim::run_threadgroups(uint(tiles), uint(p.threads), MO_GS_BACKWARD_TG_BYTES,
                                                      reverse != 0, &BackwardCall::Thread, &call)) {
    g_error = failed;
    return -1;
  }
  static_assert(sizeof(metal::atomic_uint) == sizeof(uint), "atomic_uint must alias uint");
  std::vector<uint> cursors(size_t(n) + 1, 0u);  // the plan zeroes them
  std::vector<uint> starts(std::max<size_t>(size_t(n), 1), 7u);
  std::vector<int> lists(std::max<size_t>(size_t(m), 1), -7);
  metal::atomic_uint* atomic_cursors = reinterpret_cast<metal::atomic_uint*>(cursors.data());
  const bool back = reverse != 0;
  RunGrid(grid, back, [&](uint gid) { gaussian_rasterize_backward_count(ids, atomic_cursors, p, gid, grid); });
  ListsCall lists_call = {atomic_cursors, starts.data(), p};
  const uint list_groups = uint((n + MO_GS_LISTS_THREADS - 1) / MO_GS_LISTS_THREADS);
  if (const char* failed = list_groups == 0 ? nullptr
                           : msl_shim::run_threadgroups(list_groups, MO_GS_LISTS_THREADS, MO_GS_LISTS_TG_BYTES,
                                                        back, &ListsCall::Thread, &lists_call)) {
    g_error = failed;
    return -1;
  }
  RunGrid(grid, back, [&](uint gid) {
    gaussian_rasterize_backward_fill(ids, atomic_cursors, lists.data(), p, gid, grid);
  });
  RunGrid(grid, back, [&](uint gid) {
    gaussian_rasterize_backward_sum<float>(cursors.data(), starts.data(), lists.data(), rows.data(),
                                           background_sums.data(), grad_means2d, grad_conics, grad_colors,
                                           grad_opacities, grad_background, p, gid, grid);
  });
  return 0;
}

// Every entry point the plans of gaussian_rasterize_metal.cc ask for is
// instantiated: -1 when one is missing, else the number of instantiations
// none of them reached.
int shim_gaussian_rasterize_find_every_kernel() {
  if (!msl_shim::find_kernel<decltype(&gaussian_rasterize_forward<float>)>(kKernels, "gaussian_rasterize_forward") ||
      !msl_shim::find_kernel<decltype(&gaussian_rasterize_backward<float>)>(kKernels,
                                                                            "gaussian_rasterize_backward") ||
      !msl_shim::find_kernel<decltype(&gaussian_rasterize_backward_sum<float>)>(
          kKernels, "gaussian_rasterize_backward_sum")) {
    return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"

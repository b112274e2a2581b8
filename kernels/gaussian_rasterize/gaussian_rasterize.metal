// GaussianRasterize Metal shaders: float32 (T = float), one threadgroup per
// image tile, thread t of it the tile's pixel (t / tile_size, t % tile_size)
// (threads past tile_size^2 and pixels past the image's edge take part in
// the barriers only). The per-pixel arithmetic is
// kernels/gaussian_rasterize/gaussian_rasterize.h's (gs_forward_step,
// gs_backward_step). Ids outside [0, N) are skipped and ranges clamped to
// [0, M) (the CPU kernels refuse them). Entry points:
//   gaussian_rasterize_forward       the tile's sorted Gaussians in batches of one per thread
//                                    through threadgroup memory, composited front to back
//                                    until every pixel of the tile is done
//                                    -> image, alpha, last_ids
//   gaussian_rasterize_backward      each pixel walks back from its last_ids; per
//                                    intersection the pixels' gradients are written, then
//                                    summed in pixel order into the intersection's row;
//                                    the tile's background sums
//   gaussian_rasterize_backward_count  per intersection: its Gaussian's count (integer atomics)
//   gaussian_rasterize_backward_lists  per Gaussian: its list's place among the lists (a
//                                      threadgroup's counts scanned, one atomic add a group)
//   gaussian_rasterize_backward_fill   per intersection: its index into its Gaussian's list
//   gaussian_rasterize_backward_sum    per Gaussian: its list sorted, its rows added in index
//                                      order into its gradients; per channel: the tiles'
//                                      background sums in tile order
// The lists' places and the order in which the fill writes a list depend on
// the order in which threads run; the sum pass sorts each list, so every
// Gaussian's sums, and the results, do not (no float atomics).
#include "kernels/gaussian_rasterize/gaussian_rasterize.h"

// The barriers and mem_flags live in namespace metal.
using namespace metal;

namespace mo {
namespace gaussian_rasterize_metal {

// Pixel q of tile `tile` (row-major within the tile): its row i and column j;
// false past the tile or the image.
inline bool tile_pixel(constant GaussianRasterizeParams& p, int tile, int q, thread int* i, thread int* j) {
  const int ts = p.tile_size;
  *i = (tile / p.tiles_x) * ts + q / ts;
  *j = (tile % p.tiles_x) * ts + q % ts;
  return q < ts * ts && *i < p.height && *j < p.width;
}

// The tile's range of gaussian_ids, clamped to [0, M).
inline void tile_range(device const int* ranges, constant GaussianRasterizeParams& p, int tile, thread int* start,
                       thread int* end) {
  const int64 m = p.num_ids;
  const int64 s = ranges[2 * tile], e = ranges[2 * tile + 1];
  *start = int(s < 0 ? 0 : (s > m ? m : s));
  *end = int(e < *start ? *start : (e > m ? m : e));
}

// Whether id indexes the N Gaussians.
inline bool known_id(int id, constant GaussianRasterizeParams& p) { return id >= 0 && int64(id) < p.num_gaussians; }

// Moves list[root] down the max-heap list[0 .. end).
inline void sift_down(device int* list, uint root, uint end) {
  for (uint child = 2 * root + 1; child < end; child = 2 * root + 1) {
    if (child + 1 < end && list[child + 1] > list[child]) ++child;
    if (list[root] >= list[child]) return;
    const int swap = list[root];
    list[root] = list[child];
    list[child] = swap;
    root = child;
  }
}

// list[0 .. count) in ascending order, in place (heapsort: O(count log count)
// for a Gaussian that many tiles see).
inline void sort_list(device int* list, uint count) {
  for (uint top = count / 2; top-- > 0;) sift_down(list, top, count);
  for (uint end = count; end-- > 1;) {
    const int largest = list[0];
    list[0] = list[end];
    list[end] = largest;
    sift_down(list, 0, end);
  }
}

}  // namespace gaussian_rasterize_metal
}  // namespace mo

template <typename T>
[[kernel]] void gaussian_rasterize_forward(
    device const T* means2d [[buffer(mo::kGaussianRasterizeMeans2d)]],
    device const T* conics [[buffer(mo::kGaussianRasterizeConics)]],
    device const T* colors [[buffer(mo::kGaussianRasterizeColors)]],
    device const T* opacities [[buffer(mo::kGaussianRasterizeOpacities)]],
    device const T* background [[buffer(mo::kGaussianRasterizeBackground)]],
    device const int* ids [[buffer(mo::kGaussianRasterizeIds)]],
    device const int* ranges [[buffer(mo::kGaussianRasterizeRanges)]],
    device T* image [[buffer(mo::kGaussianRasterizeImage)]],
    device T* alpha [[buffer(mo::kGaussianRasterizeAlpha)]],
    device int* last_ids [[buffer(mo::kGaussianRasterizeLastIds)]],
    constant mo::GaussianRasterizeParams& p [[buffer(mo::kGaussianRasterizeParams)]],
    threadgroup float* tg MO_THREADGROUP_ARG(0),
    uint group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]]) {
  namespace g = mo::gaussian_rasterize_metal;
  const int tile = int(group), channels = p.channels, threads = p.threads;
  int i, j, start, end;
  const bool inside = g::tile_pixel(p, tile, int(tid), &i, &j);
  g::tile_range(ranges, p, tile, &start, &end);
  const mo::int64 pixel = inside ? mo::int64(i) * p.width + j : 0;
  const float px = float(j) + 0.5f, py = float(i) + 0.5f;
  device T* acc = image + pixel * channels;
  if (inside) {
    for (int c = 0; c < channels; ++c) acc[c] = 0.0f;
  }
  threadgroup float* batch = tg;                                                         // [threads, 6]
  threadgroup int* batch_ids = (threadgroup int*)(tg + MO_GS_FORWARD_TG_FLOATS * threads);  // [threads]
  threadgroup int* done_flags = batch_ids + threads;                                      // [threads]
  float t = 1.0f;
  int last = start;
  bool done = !inside;
  for (int base = start; base < end; base += threads) {
    const int k = base + int(tid);
    if (k < end) {
      const int id = ids[k];
      const bool known = g::known_id(id, p);
      batch_ids[tid] = known ? id : -1;
      threadgroup float* e = batch + MO_GS_FORWARD_TG_FLOATS * int(tid);
      e[0] = known ? means2d[2 * mo::int64(id)] : 0.0f;
      e[1] = known ? means2d[2 * mo::int64(id) + 1] : 0.0f;
      e[2] = known ? conics[3 * mo::int64(id)] : 0.0f;
      e[3] = known ? conics[3 * mo::int64(id) + 1] : 0.0f;
      e[4] = known ? conics[3 * mo::int64(id) + 2] : 0.0f;
      e[5] = known ? opacities[id] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int count = end - base < threads ? end - base : threads;
    for (int q = 0; !done && q < count; ++q) {
      const int id = batch_ids[q];
      if (id < 0) continue;
      const threadgroup float* e = batch + MO_GS_FORWARD_TG_FLOATS * q;
      const int step = mo::gs_forward_step(e[0], e[1], e[2], e[3], e[4], e[5], colors + mo::int64(id) * channels,
                                           channels, px, py, &t, acc);
      if (step == mo::kGsDone) done = true;
      if (step == mo::kGsComposited) last = base + q + 1;
    }
    // Every thread is past the batch; the tile stops once every pixel is done.
    done_flags[tid] = done ? 1 : 0;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    bool all_done = true;
    for (int q = 0; q < threads; ++q) all_done = all_done && done_flags[q] != 0;
    if (all_done) break;
  }
  if (inside) {
    for (int c = 0; c < channels; ++c) acc[c] += t * background[c];
    alpha[pixel] = 1.0f - t;
    last_ids[pixel] = last;
  }
}

template <typename T>
[[kernel]] void gaussian_rasterize_backward(
    device const T* means2d [[buffer(mo::kGaussianRasterizeMeans2d)]],
    device const T* conics [[buffer(mo::kGaussianRasterizeConics)]],
    device const T* colors [[buffer(mo::kGaussianRasterizeColors)]],
    device const T* opacities [[buffer(mo::kGaussianRasterizeOpacities)]],
    device const T* background [[buffer(mo::kGaussianRasterizeBackground)]],
    device const int* ids [[buffer(mo::kGaussianRasterizeIds)]],
    device const int* ranges [[buffer(mo::kGaussianRasterizeRanges)]],
    device const T* alpha [[buffer(mo::kGaussianRasterizeGradAlpha)]],
    device const int* last_ids [[buffer(mo::kGaussianRasterizeGradLastIds)]],
    device const T* grad_image [[buffer(mo::kGaussianRasterizeGradImage)]],
    device const T* grad_alpha [[buffer(mo::kGaussianRasterizeGradAlphaIn)]],
    device T* rows [[buffer(mo::kGaussianRasterizeGradRows)]],
    device T* pixel_rows [[buffer(mo::kGaussianRasterizeGradPixelRows)]],
    device T* background_sums [[buffer(mo::kGaussianRasterizeGradBackgroundSums)]],
    constant mo::GaussianRasterizeParams& p [[buffer(mo::kGaussianRasterizeGradParams)]],
    threadgroup float* tg MO_THREADGROUP_ARG(0),
    uint group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]]) {
  namespace g = mo::gaussian_rasterize_metal;
  const int tile = int(group), channels = p.channels, threads = p.threads, width = mo::gs_row_width(channels);
  const int pixels = p.tile_size * p.tile_size;
  int i, j, start, end;
  const bool inside = g::tile_pixel(p, tile, int(tid), &i, &j);
  g::tile_range(ranges, p, tile, &start, &end);
  const mo::int64 pixel = inside ? mo::int64(i) * p.width + j : 0;
  const float px = float(j) + 0.5f, py = float(i) + 0.5f;
  // The tile's largest last_ids: no pixel visits an intersection past it
  // (their rows stay as the plan zeroed them).
  threadgroup int* tile_last = (threadgroup int*)tg;
  if (tid == 0) {
    int most = start;
    for (int q = 0; q < pixels; ++q) {
      int qi, qj;
      if (!g::tile_pixel(p, tile, q, &qi, &qj)) continue;
      const int l = last_ids[mo::int64(qi) * p.width + qj];
      most = l > most ? (l < end ? l : end) : most;
    }
    *tile_last = most;
  }
  // The background's gradient, summed over the tile's pixels in order.
  for (int c = int(tid); c < channels; c += threads) {
    float sum = 0.0f;
    for (int q = 0; q < pixels; ++q) {
      int qi, qj;
      if (!g::tile_pixel(p, tile, q, &qi, &qj)) continue;
      const mo::int64 at = mo::int64(qi) * p.width + qj;
      sum += (1.0f - alpha[at]) * grad_image[at * channels + c];
    }
    background_sums[mo::int64(tile) * channels + c] = sum;
  }
  int last = start;
  float t_final = 1.0f, background_dot = 0.0f, v_alpha = 0.0f;
  device const T* v_image = grad_image + pixel * channels;
  if (inside) {
    const int l = last_ids[pixel];
    last = l < start ? start : (l > end ? end : l);
    t_final = 1.0f - alpha[pixel];
    v_alpha = grad_alpha[pixel];
    for (int c = 0; c < channels; ++c) background_dot += background[c] * v_image[c];
  }
  const mo::GsPixelGrad<device const T*> up = {v_image, v_alpha, t_final, background_dot};
  mo::GsBackState state = {t_final, 0.0f};
  device T* mine = pixel_rows + (mo::int64(tile) * threads + tid) * width;
  device const T* tile_rows = pixel_rows + mo::int64(tile) * threads * width;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int most = *tile_last;
  for (int k = most - 1; k >= start; --k) {
    for (int v = 0; v < width; ++v) mine[v] = 0.0f;
    const int id = ids[k];
    if (k < last && g::known_id(id, p)) {
      const mo::int64 n = id;
      mo::gs_backward_step(means2d[2 * n], means2d[2 * n + 1], conics[3 * n], conics[3 * n + 1], conics[3 * n + 2],
                           opacities[n], colors + n * channels, channels, px, py, up, &state, mine + mo::kGsRowColor,
                           mine + mo::kGsRowMean, mine + mo::kGsRowConic, mine + mo::kGsRowOpacity);
    }
    threadgroup_barrier(mem_flags::mem_device);
    for (int v = int(tid); v < width; v += threads) {
      float sum = 0.0f;
      for (int q = 0; q < pixels; ++q) sum += tile_rows[q * width + v];
      rows[mo::int64(k) * width + v] = sum;
    }
    threadgroup_barrier(mem_flags::mem_device);
  }
}

[[kernel]] void gaussian_rasterize_backward_count(
    device const int* ids [[buffer(mo::kGaussianRasterizeSumIds)]],
    device atomic_uint* cursors [[buffer(mo::kGaussianRasterizeSumCursors)]],
    constant mo::GaussianRasterizeParams& p [[buffer(mo::kGaussianRasterizeSumParams)]],
    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  namespace g = mo::gaussian_rasterize_metal;
  for (mo::int64 k = gid; k < p.num_ids; k += grid_size) {
    const int id = ids[k];
    if (g::known_id(id, p)) atomic_fetch_add_explicit(&cursors[id], 1u, memory_order_relaxed);
  }
}

[[kernel]] void gaussian_rasterize_backward_lists(
    device atomic_uint* cursors [[buffer(mo::kGaussianRasterizeSumCursors)]],
    device uint* starts [[buffer(mo::kGaussianRasterizeSumStarts)]],
    constant mo::GaussianRasterizeParams& p [[buffer(mo::kGaussianRasterizeSumParams)]],
    threadgroup uint* tg MO_THREADGROUP_ARG(0),
    uint group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]]) {
  const mo::int64 n = mo::int64(group) * MO_GS_LISTS_THREADS + tid;
  const bool gaussian = n < p.num_gaussians;
  tg[tid] = gaussian ? atomic_load_explicit(&cursors[n], memory_order_relaxed) : 0u;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // The group's counts scanned in place, its lists placed with one atomic add.
  if (tid == 0) {
    uint total = 0u;
    for (int t = 0; t < MO_GS_LISTS_THREADS; ++t) {
      const uint count = tg[t];
      tg[t] = total;
      total += count;
    }
    tg[MO_GS_LISTS_THREADS] = atomic_fetch_add_explicit(&cursors[p.num_gaussians], total, memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (gaussian) {
    const uint start = tg[MO_GS_LISTS_THREADS] + tg[tid];
    starts[n] = start;
    atomic_store_explicit(&cursors[n], start, memory_order_relaxed);
  }
}

[[kernel]] void gaussian_rasterize_backward_fill(
    device const int* ids [[buffer(mo::kGaussianRasterizeSumIds)]],
    device atomic_uint* cursors [[buffer(mo::kGaussianRasterizeSumCursors)]],
    device int* lists [[buffer(mo::kGaussianRasterizeSumLists)]],
    constant mo::GaussianRasterizeParams& p [[buffer(mo::kGaussianRasterizeSumParams)]],
    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  namespace g = mo::gaussian_rasterize_metal;
  for (mo::int64 k = gid; k < p.num_ids; k += grid_size) {
    const int id = ids[k];
    if (g::known_id(id, p)) lists[atomic_fetch_add_explicit(&cursors[id], 1u, memory_order_relaxed)] = int(k);
  }
}

template <typename T>
[[kernel]] void gaussian_rasterize_backward_sum(
    device const uint* ends [[buffer(mo::kGaussianRasterizeSumCursors)]],
    device const uint* starts [[buffer(mo::kGaussianRasterizeSumStarts)]],
    device int* lists [[buffer(mo::kGaussianRasterizeSumLists)]],
    device const T* rows [[buffer(mo::kGaussianRasterizeSumRows)]],
    device const T* background_sums [[buffer(mo::kGaussianRasterizeSumBackgroundSums)]],
    device T* grad_means2d [[buffer(mo::kGaussianRasterizeSumMeans2d)]],
    device T* grad_conics [[buffer(mo::kGaussianRasterizeSumConics)]],
    device T* grad_colors [[buffer(mo::kGaussianRasterizeSumColors)]],
    device T* grad_opacities [[buffer(mo::kGaussianRasterizeSumOpacities)]],
    device T* grad_background [[buffer(mo::kGaussianRasterizeSumBackground)]],
    constant mo::GaussianRasterizeParams& p [[buffer(mo::kGaussianRasterizeSumParams)]],
    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  namespace g = mo::gaussian_rasterize_metal;
  const int channels = p.channels, width = mo::gs_row_width(channels);
  for (mo::int64 item = gid; item < p.num_gaussians + channels; item += grid_size) {
    if (item >= p.num_gaussians) {
      const int c = int(item - p.num_gaussians);
      float sum = 0.0f;
      for (mo::int64 tile = 0; tile < mo::int64(p.tiles_x) * p.tiles_y; ++tile) sum += background_sums[tile * channels + c];
      grad_background[c] = sum;
      continue;
    }
    const mo::int64 n = item;
    device int* list = lists + starts[n];
    const uint count = ends[n] - starts[n];
    g::sort_list(list, count);
    // The means, conic and opacity in one walk of the list, then each colour channel.
    float sums[mo::kGsRowColor] = {0.0f};
    for (uint i = 0; i < count; ++i) {
      device const T* row = rows + mo::int64(list[i]) * width;
      for (int v = 0; v < mo::kGsRowColor; ++v) sums[v] += row[v];
    }
    for (int q = 0; q < 2; ++q) grad_means2d[2 * n + q] = sums[mo::kGsRowMean + q];
    for (int q = 0; q < 3; ++q) grad_conics[3 * n + q] = sums[mo::kGsRowConic + q];
    grad_opacities[n] = sums[mo::kGsRowOpacity];
    for (int c = 0; c < channels; ++c) {
      float sum = 0.0f;
      for (uint i = 0; i < count; ++i) sum += rows[mo::int64(list[i]) * width + mo::kGsRowColor + c];
      grad_colors[n * channels + c] = sum;
    }
  }
}

// The host names gaussian_rasterize_metal.cc's plans ask for (float32 only).
template [[host_name("gaussian_rasterize_forward")]] [[kernel]] decltype(gaussian_rasterize_forward<float>) gaussian_rasterize_forward<float>;
template [[host_name("gaussian_rasterize_backward")]] [[kernel]] decltype(gaussian_rasterize_backward<float>) gaussian_rasterize_backward<float>;
template [[host_name("gaussian_rasterize_backward_sum")]] [[kernel]] decltype(gaussian_rasterize_backward_sum<float>) gaussian_rasterize_backward_sum<float>;

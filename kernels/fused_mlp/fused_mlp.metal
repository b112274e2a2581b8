// FusedMLP Metal shaders: tiny-cuda-nn's fully fused MLP with Apple's 8x8
// simdgroup_matrix (MSL 2.3+, Apple7+ GPUs; this library's default MSL 2.4).
// Activations and their derivatives: kernels/common/activations.h; the layout
// of arguments, packed weights and partials: kernels/fused_mlp/fused_mlp.h.
// Embedded in the op library and compiled on the Mac at run time; on every
// machine, run on the CPU through tests/metal_shim/msl_shim.h by
// tests/metal_shim/fused_mlp_shim.cc.
//
// A threadgroup of S SIMD-groups (S = 1, 2 or 4) owns a tile of 8 S rows
// through every layer; each SIMD-group owns 8 of those rows. A layer's
// weights are staged into threadgroup memory in chunks of rows (forward) or
// columns (backward); the activations stay in threadgroup memory as T (float
// or half), and every product accumulates in simdgroup_float8x8 (float32 for
// half too).
//
// Entry points (W in 16, 32, 64, 128; TN in float32 / float16):
//   fused_mlp_pack_<TN>             one matrix (a kernel or a bias) into its
//                                   zero-padded block of the packed weights
//   fused_mlp_forward_w<W>_<TN>     y and hidden (every hidden layer's output)
//   fused_mlp_backward_w<W>_<TN>    grad_x, and per threadgroup (partition) the
//                                   sums of the weight and bias gradients of
//                                   its row tiles, in a float32 partial
//   fused_mlp_reduce_<TN>           one layer's kernel and bias gradient: the
//                                   partials added in partition order
// No atomics: every sum has one fixed order, so the results are bitwise the
// same from run to run.
#include "kernels/common/activations.h"
#include "kernels/fused_mlp/fused_mlp.h"

// simdgroup_matrix, the barriers and mem_flags live in namespace metal.
using namespace metal;

namespace mo {
namespace fused_mlp_metal {

// rows [row0, row0 + rows) of src [n, cols] into dst [rows, stride] as T,
// columns [cols, cols_pad) and rows past n zero. Every thread of the
// threadgroup takes part.
template <typename T>
inline void stage_rows(threadgroup T* dst, int stride, const device T* src, int64 n, int64 row0, int rows, int cols,
                       int cols_pad, uint tid, uint threads) {
  for (uint i = tid; i < uint(rows * cols_pad); i += threads) {
    const int r = int(i) / cols_pad;
    const int c = int(i) - r * cols_pad;
    const int64 row = row0 + r;
    dst[r * stride + c] = (row < n && c < cols) ? src[row * cols + c] : T(0.0f);
  }
}

// acc[j] += A * B[:, 8j:8j+8] for j < count over the K columns [k0, k0 + kc) of
// the SIMD-group's own 8 rows of `a` (stride `a_stride`). B comes from the
// staged chunk `w`: forward (transpose false) its rows k0.. are the chunk's
// rows (row stride w_stride); backward (transpose true) B = W^T, whose rows
// k0.. are the chunk's columns.
template <int J, typename T>
inline void multiply_chunk(thread simdgroup_float8x8* acc, int count, const threadgroup T* a, int a_stride,
                           const threadgroup T* w, int w_stride, int k0, int kc, bool transpose) {
  for (int kk = 0; kk < kc; kk += MO_FUSED_MLP_TILE) {
    simdgroup_matrix<T, 8, 8> am;
    simdgroup_load(am, a + k0 + kk, ulong(a_stride));
    for (int j = 0; j < J; ++j) {
      if (j < count) {
        simdgroup_matrix<T, 8, 8> bm;
        if (transpose) {
          simdgroup_load(bm, w + j * MO_FUSED_MLP_TILE * w_stride + kk, ulong(w_stride), 0, true);
        } else {
          simdgroup_load(bm, w + kk * w_stride + j * MO_FUSED_MLP_TILE, ulong(w_stride));
        }
        simdgroup_multiply_accumulate(acc[j], am, bm, acc[j]);
      }
    }
  }
}

// One layer's product for the SIMD-group's 8 rows: acc[j] (j < count) = the
// rows of `a` (K = k_dim columns) times the layer's packed weights [rows_pad,
// cols_pad] at `wl`, or (backward) times their transpose. The weights are
// staged chunk by chunk by the whole threadgroup; every thread must call this.
template <int J, typename T>
inline void layer_product(thread simdgroup_float8x8* acc, int count, const threadgroup T* a, int a_stride,
                          int k_dim, const device T* wl, int rows_pad, int cols_pad, threadgroup T* w, int chunk,
                          bool backward, uint tid, uint threads) {
  for (int j = 0; j < J; ++j) acc[j] = make_filled_simdgroup_matrix<float, 8>(0.0f);
  for (int k0 = 0; k0 < k_dim; k0 += chunk) {
    const int kc = metal::min(chunk, k_dim - k0);
    // Every reader of the previous chunk (and of the tiles' last writes) is done.
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (backward) {  // columns [k0, k0 + kc) of every row: w [rows_pad, kc]
      for (uint i = tid; i < uint(rows_pad * kc); i += threads) {
        const int r = int(i) / kc;
        const int c = int(i) - r * kc;
        w[r * kc + c] = wl[r * cols_pad + k0 + c];
      }
    } else {  // rows [k0, k0 + kc): w [kc, cols_pad]
      for (uint i = tid; i < uint(kc * cols_pad); i += threads) w[i] = wl[k0 * cols_pad + int(i)];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    multiply_chunk<J, T>(acc, count, a, a_stride, w, backward ? kc : cols_pad, k0, kc, backward);
  }
}

// Writes acc[j] (j < count) element-wise through the SIMD-group's 8x8 float
// scratch: out(r, c, value) for its 8 rows r and the columns c = 8 j + ..;
// each lane handles 2 of every 64 elements.
template <int J, typename Out>
inline void epilogue(thread simdgroup_float8x8* acc, int count, threadgroup float* scratch, uint lane,
                     thread const Out& out) {
  for (int j = 0; j < J; ++j) {
    if (j < count) {
      simdgroup_store(acc[j], scratch, 8);
      simdgroup_barrier(mem_flags::mem_threadgroup);
      for (uint e = lane; e < 64; e += MO_FUSED_MLP_SIMD_WIDTH) {
        out(int(e) / 8, j * MO_FUSED_MLP_TILE + int(e) % 8, scratch[e]);
      }
      simdgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
}

// Forward epilogue: z + bias, the activation, into the SIMD-group's rows of
// the activation tile (hidden layers) and to the output tensor.
template <typename T>
struct ForwardOut {
  const device T* bias;
  threadgroup T* tile;  // the SIMD-group's first row; null for the output layer
  int tile_stride;
  device T* dst;        // hidden[l] or y: [n, dst_cols]
  int dst_cols;
  int64 row0;           // the SIMD-group's first row in the batch
  int64 n;
  int act;
  float alpha;
  void operator()(int r, int c, float z) const {
    const T v = T(activation_forward(z + float(bias[c]), act, alpha));
    if (tile) tile[r * tile_stride + c] = v;
    if (row0 + r < n && c < dst_cols) dst[(row0 + r) * dst_cols + c] = v;
  }
};

template <int W, typename T>
inline void forward(const device T* x, const device T* weights, const device T* biases, device T* y,
                    device T* hidden, constant FusedMlpParams& p, threadgroup float* tg, uint group, uint groups,
                    uint tid, uint sg, uint lane) {
  const uint threads = uint(p.simdgroups) * MO_FUSED_MLP_SIMD_WIDTH;
  const int C = p.stride;
  const int L = p.hidden_layers;
  threadgroup T* act = (threadgroup T*)((threadgroup uchar*)tg + p.off_a);
  threadgroup T* w = (threadgroup T*)((threadgroup uchar*)tg + p.off_w);
  threadgroup float* scratch = tg + sg * 64;
  threadgroup T* mine = act + int(sg) * MO_FUSED_MLP_TILE * C;  // this SIMD-group's rows
  for (int64 tile = group; tile < p.num_tiles; tile += groups) {
    const int64 row0 = tile * p.rows;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous tile's readers are done
    stage_rows(act, C, x, p.n, row0, p.rows, p.in_dim, p.in_pad, tid, threads);
    ForwardOut<T> out;
    out.tile_stride = C;
    out.row0 = row0 + int64(sg) * MO_FUSED_MLP_TILE;
    out.n = p.n;
    out.alpha = p.alpha;
    for (int l = 0; l < L; ++l) {
      simdgroup_float8x8 acc[W / 8];
      layer_product<W / 8, T>(acc, W / 8, mine, C, l == 0 ? p.in_pad : W, weights + fused_mlp_weight_offset(l, p.in_pad, W),
                              fused_mlp_rows_pad(l, p.in_pad, W), W, w, p.chunk, false, tid, threads);
      // In place: only this SIMD-group reads its rows, and its products are done.
      out.bias = biases + fused_mlp_bias_offset(l, W);
      out.tile = mine;
      out.dst = hidden + int64(l) * p.n * W;
      out.dst_cols = W;
      out.act = p.activation;
      epilogue<W / 8>(acc, W / 8, scratch, lane, out);
    }
    simdgroup_float8x8 acc[MO_FUSED_MLP_MAX_COL_TILES];
    layer_product<MO_FUSED_MLP_MAX_COL_TILES, T>(acc, p.out_pad / 8, mine, C, W,
                                                  weights + fused_mlp_weight_offset(L, p.in_pad, W), W, p.out_pad, w,
                                                  p.chunk, false, tid, threads);
    out.bias = biases + fused_mlp_bias_offset(L, W);
    out.tile = nullptr;
    out.dst = y;
    out.dst_cols = p.out_dim;
    out.act = p.output_activation;
    epilogue<MO_FUSED_MLP_MAX_COL_TILES>(acc, p.out_pad / 8, scratch, lane, out);
  }
}

// Backward epilogue of a hidden layer: dL/dz of the layer below, dh * f'(h),
// in place of h in the SIMD-group's rows of the input tile.
template <typename T>
struct HiddenGradOut {
  threadgroup T* tile;
  int tile_stride;
  int act;
  float alpha;
  void operator()(int r, int c, float dh) const {
    threadgroup T* h = tile + r * tile_stride + c;
    *h = T(dh * activation_derivative_from_output(float(*h), act, alpha));
  }
};

// Backward epilogue of the first layer: grad_x.
template <typename T>
struct InputGradOut {
  device T* dx;
  int in_dim;
  int64 row0;
  int64 n;
  void operator()(int r, int c, float v) const {
    if (row0 + r < n && c < in_dim) dx[(row0 + r) * in_dim + c] = T(v);
  }
};

// partial[i, j] += sum over the tile's rows of h[., i] dz[., j] for the 8x8
// blocks of [k_rows, cols] this SIMD-group owns (block b for b % S == sg: the
// same blocks for every tile, so each partial element has one writer and one
// order); partial_b[j] += sum of dz[., j], by thread j % threads.
template <typename T>
inline void weight_grad(const threadgroup T* h, const threadgroup T* dz, int stride, int rows, int k_rows, int cols,
                        device float* partial_w, device float* partial_b, uint sg, uint simdgroups, uint tid,
                        uint threads) {
  const int bi_count = k_rows / MO_FUSED_MLP_TILE;
  const int bj_count = cols / MO_FUSED_MLP_TILE;
  for (int b = int(sg); b < bi_count * bj_count; b += int(simdgroups)) {
    const int bi = b / bj_count;
    const int bj = b - bi * bj_count;
    device float* block = partial_w + bi * MO_FUSED_MLP_TILE * cols + bj * MO_FUSED_MLP_TILE;
    simdgroup_float8x8 acc;
    simdgroup_load(acc, block, ulong(cols));
    for (int k = 0; k < rows; k += MO_FUSED_MLP_TILE) {
      simdgroup_matrix<T, 8, 8> hm;
      simdgroup_matrix<T, 8, 8> dm;
      simdgroup_load(hm, h + k * stride + bi * MO_FUSED_MLP_TILE, ulong(stride), 0, true);  // h^T
      simdgroup_load(dm, dz + k * stride + bj * MO_FUSED_MLP_TILE, ulong(stride));
      simdgroup_multiply_accumulate(acc, hm, dm, acc);
    }
    simdgroup_store(acc, block, ulong(cols));
  }
  for (uint c = tid; c < uint(cols); c += threads) {
    float s = partial_b[c];
    for (int r = 0; r < rows; ++r) s += float(dz[r * stride + int(c)]);
    partial_b[c] = s;
  }
}

template <int W, typename T>
inline void backward(const device T* dy, const device T* x, const device T* y, const device T* hidden,
                     const device T* weights, device float* partials, device T* dx, constant FusedMlpParams& p,
                     threadgroup float* tg, uint group, uint tid, uint sg, uint lane) {
  const uint simdgroups = uint(p.simdgroups);
  const uint threads = simdgroups * MO_FUSED_MLP_SIMD_WIDTH;
  const int C = p.stride;
  const int L = p.hidden_layers;
  const int R = p.rows;
  threadgroup T* tile_a = (threadgroup T*)((threadgroup uchar*)tg + p.off_a);
  threadgroup T* tile_b = (threadgroup T*)((threadgroup uchar*)tg + p.off_b);
  threadgroup T* w = (threadgroup T*)((threadgroup uchar*)tg + p.off_w);
  threadgroup float* scratch = tg + sg * 64;
  device float* partial = partials + int64(group) * p.params_pad;
  const int64 biases_at = fused_mlp_weights_total(p.in_pad, W, p.out_pad, L);
  // This partition's tiles: a fixed, contiguous range (depends on N only).
  const int64 first = fused_mlp_partition_start(p, int32(group));
  const int64 last = fused_mlp_partition_start(p, int32(group) + 1);
  for (int64 tile = first; tile < last; ++tile) {
    const int64 row0 = tile * R;
    threadgroup T* dz = tile_a;
    threadgroup T* h = tile_b;
    // The previous tile's readers are done, and its partial sums are written
    // (a lane may load a partial element that another lane stored).
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    // dL/dz of the output layer: grad_y * f_out'(y).
    for (uint i = tid; i < uint(R * p.out_pad); i += threads) {
      const int r = int(i) / p.out_pad;
      const int c = int(i) - r * p.out_pad;
      const int64 row = row0 + r;
      float v = 0.0f;
      if (row < p.n && c < p.out_dim) {
        v = float(dy[row * p.out_dim + c]) *
            activation_derivative_from_output(float(y[row * p.out_dim + c]), p.output_activation, p.alpha);
      }
      dz[r * C + c] = T(v);
    }
    stage_rows(h, C, hidden + int64(L - 1) * p.n * W, p.n, row0, R, W, W, tid, threads);
    for (int l = L; l >= 0; --l) {
      const int k_rows = fused_mlp_rows_pad(l, p.in_pad, W);
      const int cols = fused_mlp_cols_pad(l, L, W, p.out_pad);
      threadgroup_barrier(mem_flags::mem_threadgroup);  // dz and h of every row are in place
      weight_grad(h, dz, C, R, k_rows, cols, partial + fused_mlp_weight_offset(l, p.in_pad, W),
                  partial + biases_at + fused_mlp_bias_offset(l, W), sg, simdgroups, tid, threads);
      // dh = dz W_l^T for this SIMD-group's rows (layer_product's first
      // barrier also orders weight_grad's reads of h before the writes below).
      threadgroup T* dz_mine = dz + int(sg) * MO_FUSED_MLP_TILE * C;
      const device T* wl = weights + fused_mlp_weight_offset(l, p.in_pad, W);
      if (l > 0) {
        simdgroup_float8x8 acc[W / 8];
        layer_product<W / 8, T>(acc, W / 8, dz_mine, C, cols, wl, W, cols, w, p.chunk, true, tid, threads);
        HiddenGradOut<T> out;
        out.tile = h + int(sg) * MO_FUSED_MLP_TILE * C;
        out.tile_stride = C;
        out.act = p.activation;
        out.alpha = p.alpha;
        epilogue<W / 8>(acc, W / 8, scratch, lane, out);
        // Here h holds dL/dz of layer l - 1; its input goes where dz was.
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (l == 1) {
          stage_rows(dz, C, x, p.n, row0, R, p.in_dim, p.in_pad, tid, threads);
        } else {
          stage_rows(dz, C, hidden + int64(l - 2) * p.n * W, p.n, row0, R, W, W, tid, threads);
        }
        threadgroup T* t = dz;
        dz = h;
        h = t;
      } else {
        simdgroup_float8x8 acc[MO_FUSED_MLP_MAX_COL_TILES];
        layer_product<MO_FUSED_MLP_MAX_COL_TILES, T>(acc, p.in_pad / 8, dz_mine, C, cols, wl, p.in_pad, cols, w,
                                                      p.chunk, true, tid, threads);
        InputGradOut<T> out;
        out.dx = dx;
        out.in_dim = p.in_dim;
        out.row0 = row0 + int64(sg) * MO_FUSED_MLP_TILE;
        out.n = p.n;
        epilogue<MO_FUSED_MLP_MAX_COL_TILES>(acc, p.in_pad / 8, scratch, lane, out);
      }
    }
  }
}

}  // namespace fused_mlp_metal
}  // namespace mo

// ---- entry points ------------------------------------------------------------------------

template <int W, typename T>
[[kernel]] void fused_mlp_forward(const device T* x [[buffer(mo::kFusedMlpForwardX)]],
                                  const device T* weights [[buffer(mo::kFusedMlpForwardWeights)]],
                                  const device T* biases [[buffer(mo::kFusedMlpForwardBiases)]],
                                  device T* y [[buffer(mo::kFusedMlpForwardY)]],
                                  device T* hidden [[buffer(mo::kFusedMlpForwardHidden)]],
                                  constant mo::FusedMlpParams& p [[buffer(mo::kFusedMlpForwardParams)]],
                                  threadgroup float* tg MO_THREADGROUP_ARG(0),
                                  uint group [[threadgroup_position_in_grid]], uint groups [[threadgroups_per_grid]],
                                  uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]]) {
  mo::fused_mlp_metal::forward<W, T>(x, weights, biases, y, hidden, p, tg, group, groups, tid, sg, lane);
}

template <int W, typename T>
[[kernel]] void fused_mlp_backward(const device T* dy [[buffer(mo::kFusedMlpBackwardDy)]],
                                   const device T* x [[buffer(mo::kFusedMlpBackwardX)]],
                                   const device T* y [[buffer(mo::kFusedMlpBackwardY)]],
                                   const device T* hidden [[buffer(mo::kFusedMlpBackwardHidden)]],
                                   const device T* weights [[buffer(mo::kFusedMlpBackwardWeights)]],
                                   device float* partials [[buffer(mo::kFusedMlpBackwardPartials)]],
                                   device T* dx [[buffer(mo::kFusedMlpBackwardDx)]],
                                   constant mo::FusedMlpParams& p [[buffer(mo::kFusedMlpBackwardParams)]],
                                   threadgroup float* tg MO_THREADGROUP_ARG(0),
                                   uint group [[threadgroup_position_in_grid]],
                                   uint tid [[thread_index_in_threadgroup]],
                                   uint sg [[simdgroup_index_in_threadgroup]],
                                   uint lane [[thread_index_in_simdgroup]]) {
  mo::fused_mlp_metal::backward<W, T>(dy, x, y, hidden, weights, partials, dx, p, tg, group, tid, sg, lane);
}

// One matrix (a kernel or a bias) into its zero-padded block of the packed weights.
template <typename T>
[[kernel]] void fused_mlp_pack(const device T* src [[buffer(mo::kFusedMlpPackSrc)]], device T* dst [[buffer(mo::kFusedMlpPackDst)]],
                               constant mo::FusedMlpPackParams& q [[buffer(mo::kFusedMlpPackParams)]], uint gid [[thread_position_in_grid]],
                               uint grid_size [[threads_per_grid]]) {
  // 32-bit indices: blocks are at most 128 x 128 (kMaxIoWidth, kernels/fused_mlp/fused_mlp.h)
  const uint count = uint(q.rows_pad) * uint(q.cols_pad);
  const uint cols_pad = uint(q.cols_pad);
  for (uint i = gid; i < count; i += grid_size) {
    const int r = int(i / cols_pad);
    const int c = int(i - uint(r) * cols_pad);
    dst[q.offset + i] = (r < q.rows && c < q.cols) ? src[r * q.cols + c] : T(0.0f);
  }
}

// One layer's kernel and bias gradient: the partials added in partition order.
template <typename T>
[[kernel]] void fused_mlp_reduce(const device float* partials [[buffer(mo::kFusedMlpReducePartials)]],
                                 device T* grad_kernel [[buffer(mo::kFusedMlpReduceGradKernel)]],
                                 device T* grad_bias [[buffer(mo::kFusedMlpReduceGradBias)]],
                                 constant mo::FusedMlpReduceParams& q [[buffer(mo::kFusedMlpReduceParams)]],
                                 uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  // 32-bit indices: a layer is at most 128 x 128 (kMaxIoWidth, kernels/fused_mlp/fused_mlp.h)
  const uint cols = uint(q.cols);
  const uint weights = uint(q.rows) * cols;
  for (uint i = gid; i < weights + cols; i += grid_size) {
    mo::int64 at = 0;
    if (i < weights) {
      const uint r = i / cols;
      at = q.w_offset + mo::int64(r * uint(q.cols_pad) + (i - r * cols));
    } else {
      at = q.b_offset + mo::int64(i - weights);
    }
    float s = 0.0f;
    for (int part = 0; part < q.partitions; ++part) s += partials[part * q.params_pad + at];
    if (i < weights) {
      grad_kernel[i] = T(s);
    } else {
      grad_bias[i - weights] = T(s);
    }
  }
}

// Host names fused_mlp_<kind>_w<W>_<TN> and fused_mlp_<pack|reduce>_<TN>, the
// names kernels/fused_mlp/fused_mlp_metal.cc asks for.
template [[host_name("fused_mlp_forward_w16_float32")]] [[kernel]] decltype(fused_mlp_forward<16, float>) fused_mlp_forward<16, float>;
template [[host_name("fused_mlp_forward_w32_float32")]] [[kernel]] decltype(fused_mlp_forward<32, float>) fused_mlp_forward<32, float>;
template [[host_name("fused_mlp_forward_w64_float32")]] [[kernel]] decltype(fused_mlp_forward<64, float>) fused_mlp_forward<64, float>;
template [[host_name("fused_mlp_forward_w128_float32")]] [[kernel]] decltype(fused_mlp_forward<128, float>) fused_mlp_forward<128, float>;
template [[host_name("fused_mlp_backward_w16_float32")]] [[kernel]] decltype(fused_mlp_backward<16, float>) fused_mlp_backward<16, float>;
template [[host_name("fused_mlp_backward_w32_float32")]] [[kernel]] decltype(fused_mlp_backward<32, float>) fused_mlp_backward<32, float>;
template [[host_name("fused_mlp_backward_w64_float32")]] [[kernel]] decltype(fused_mlp_backward<64, float>) fused_mlp_backward<64, float>;
template [[host_name("fused_mlp_backward_w128_float32")]] [[kernel]] decltype(fused_mlp_backward<128, float>) fused_mlp_backward<128, float>;
template [[host_name("fused_mlp_pack_float32")]] [[kernel]] decltype(fused_mlp_pack<float>) fused_mlp_pack<float>;
template [[host_name("fused_mlp_reduce_float32")]] [[kernel]] decltype(fused_mlp_reduce<float>) fused_mlp_reduce<float>;
template [[host_name("fused_mlp_forward_w16_float16")]] [[kernel]] decltype(fused_mlp_forward<16, half>) fused_mlp_forward<16, half>;
template [[host_name("fused_mlp_forward_w32_float16")]] [[kernel]] decltype(fused_mlp_forward<32, half>) fused_mlp_forward<32, half>;
template [[host_name("fused_mlp_forward_w64_float16")]] [[kernel]] decltype(fused_mlp_forward<64, half>) fused_mlp_forward<64, half>;
template [[host_name("fused_mlp_forward_w128_float16")]] [[kernel]] decltype(fused_mlp_forward<128, half>) fused_mlp_forward<128, half>;
template [[host_name("fused_mlp_backward_w16_float16")]] [[kernel]] decltype(fused_mlp_backward<16, half>) fused_mlp_backward<16, half>;
template [[host_name("fused_mlp_backward_w32_float16")]] [[kernel]] decltype(fused_mlp_backward<32, half>) fused_mlp_backward<32, half>;
template [[host_name("fused_mlp_backward_w64_float16")]] [[kernel]] decltype(fused_mlp_backward<64, half>) fused_mlp_backward<64, half>;
template [[host_name("fused_mlp_backward_w128_float16")]] [[kernel]] decltype(fused_mlp_backward<128, half>) fused_mlp_backward<128, half>;
template [[host_name("fused_mlp_pack_float16")]] [[kernel]] decltype(fused_mlp_pack<half>) fused_mlp_pack<half>;
template [[host_name("fused_mlp_reduce_float16")]] [[kernel]] decltype(fused_mlp_reduce<half>) fused_mlp_reduce<half>;

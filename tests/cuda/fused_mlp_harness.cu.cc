// C-ABI entry points for testing the FusedMLP CUDA kernels without TensorFlow
// (tests/cuda/test_fused_mlp_cuda.py and benchmarks/cuda/bench_fused_mlp_cuda.py
// drive them with CuPy device pointers). Weight/bias/gradient pointers come as
// host arrays of device addresses (0 = not wanted), one per matrix. Entry
// points return 0, or 1 with the failed call's message in
// metal_ops_fused_mlp_last_error().
#include "kernels/fused_mlp/fused_mlp.h"
#include "kernels/cuda/last_error.h"

namespace {

int Code(const mo::cuda::GpuStatus& s) { return StatusCode(s, 1); }

mo::cuda::FusedMlpShape Shape(int64_t n, int in_dim, int width, int hidden_layers, int out_dim,
                              int act, int out_act, float alpha, bool tf32 = false, int tf32_impl = 0) {
  mo::cuda::FusedMlpShape s{n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha};
  s.tf32 = tf32;
  // 3 and 4: layer by layer with the staged backward kernels' 32-row chunks,
  // or without them (FusedMlpShape::tf32_staged_rows).
  s.tf32_impl = tf32_impl == 3 || tf32_impl == 4 ? mo::cuda::kFusedMlpTf32Layers : tf32_impl;
  s.tf32_staged_rows = tf32_impl == 3 ? 32 : tf32_impl == 4 ? -1 : 0;
  return s;
}

template <typename T>
mo::cuda::FusedMlpParams<T> Params(const int64_t* w, const int64_t* b, int matrices) {
  mo::cuda::FusedMlpParams<T> p{};
  for (int l = 0; l < matrices && l < mo::cuda::kFusedMlpMaxMatrices; ++l) {
    p.w[l] = reinterpret_cast<const T*>(w[l]);
    p.b[l] = reinterpret_cast<const T*>(b[l]);
  }
  return p;
}

template <typename T>
int Forward(const void* x, const int64_t* w, const int64_t* b, void* y, void* saved, int64_t n,
            int in_dim, int width, int hidden_layers, int out_dim, int act, int out_act,
            float alpha, cudaStream_t stream, bool tf32 = false, int tf32_impl = 0) {
  if (hidden_layers < 1 || hidden_layers + 1 > mo::cuda::kFusedMlpMaxMatrices) {
    return Code(mo::cuda::GpuStatus{"FusedMLP shape", "hidden_layers out of range"});
  }
  return Code(mo::cuda::LaunchFusedMlpForward<T>(
      static_cast<const T*>(x), Params<T>(w, b, hidden_layers + 1), static_cast<T*>(y), static_cast<T*>(saved),
      Shape(n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha, tf32, tf32_impl), stream));
}

template <typename T>
int Backward(const void* dy, const void* x, const void* y, const void* saved, const int64_t* w,
             const int64_t* b, void* dx, const int64_t* dw, const int64_t* db, void* workspace,
             int64_t n, int in_dim, int width, int hidden_layers, int out_dim, int act,
             int out_act, float alpha, cudaStream_t stream, bool tf32 = false, int tf32_impl = 0,
             int64_t workspace_bytes = -1) {
  if (hidden_layers < 1 || hidden_layers + 1 > mo::cuda::kFusedMlpMaxMatrices) {
    return Code(mo::cuda::GpuStatus{"FusedMLP shape", "hidden_layers out of range"});
  }
  mo::cuda::FusedMlpGrads<T> g{};
  for (int l = 0; l < hidden_layers + 1; ++l) {
    g.dw[l] = reinterpret_cast<T*>(dw[l]);
    g.db[l] = reinterpret_cast<T*>(db[l]);
  }
  const mo::cuda::FusedMlpShape s = Shape(n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha, tf32,
                                          tf32_impl);
  // workspace_bytes < 0: the caller allocated metal_ops_fused_mlp_workspace_bytes of this shape.
  const size_t bytes = workspace_bytes < 0 ? mo::cuda::FusedMlpBackwardWorkspaceBytes(s, sizeof(T))
                                           : static_cast<size_t>(workspace_bytes);
  return Code(mo::cuda::LaunchFusedMlpBackward<T>(
      static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(saved),
      Params<T>(w, b, hidden_layers + 1), static_cast<T*>(dx), g, workspace, bytes, s, stream));
}

}  // namespace

// The forward and backward entry points of element type T (tf32: float32 on
// TF32 tensor cores), named metal_ops_fused_mlp_{forward,backward}_SUFFIX.
#define MO_FUSED_MLP_HARNESS(SUFFIX, T, TF32)                                                                      \
  int metal_ops_fused_mlp_forward_##SUFFIX(const void* x, const int64_t* w, const int64_t* b, void* y, void* saved, \
                                           int64_t n, int in_dim, int width, int hidden_layers, int out_dim,       \
                                           int act, int out_act, float alpha, cudaStream_t stream) {               \
    return Forward<T>(x, w, b, y, saved, n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha, stream,    \
                      TF32);                                                                                       \
  }                                                                                                                \
  int metal_ops_fused_mlp_backward_##SUFFIX(const void* dy, const void* x, const void* y, const void* saved,       \
                                            const int64_t* w, const int64_t* b, void* dx, const int64_t* dw,       \
                                            const int64_t* db, void* workspace, int64_t n, int in_dim, int width,  \
                                            int hidden_layers, int out_dim, int act, int out_act, float alpha,     \
                                            cudaStream_t stream) {                                                 \
    return Backward<T>(dy, x, y, saved, w, b, dx, dw, db, workspace, n, in_dim, width, hidden_layers, out_dim,     \
                       act, out_act, alpha, stream, TF32);                                                         \
  }

extern "C" {

const char* metal_ops_fused_mlp_last_error() { return last_error.c_str(); }

// Whether the TF32 network of this width runs layer by layer through cuBLAS
// with tf32 implementation `impl` (FusedMlpUsesLayers; 0 = the library's choice).
int metal_ops_fused_mlp_tf32_uses_layers(int width, int impl) {
  mo::cuda::FusedMlpShape s = Shape(1, 16, width, 1, 16, 0, 0, 0.0f, true, impl);
  return mo::cuda::FusedMlpUsesLayers(s) ? 1 : 0;
}

// The backward's workspace on the current device; tf32 and impl as the
// float32 backward's entry point is called with.
int64_t metal_ops_fused_mlp_workspace_bytes(int64_t n, int in_dim, int width, int hidden_layers,
                                            int out_dim, int elem_size, int tf32, int impl) {
  return static_cast<int64_t>(mo::cuda::FusedMlpBackwardWorkspaceBytes(
      Shape(n, in_dim, width, hidden_layers, out_dim, 0, 0, 0.0f, tf32 != 0, impl), static_cast<size_t>(elem_size)));
}

MO_FUSED_MLP_HARNESS(float32, float, false)
MO_FUSED_MLP_HARNESS(float16, __half, false)
// float32 on TF32 tensor cores (the _float32 entry points run exact float32).
MO_FUSED_MLP_HARNESS(tf32, float, true)

// TF32 through a chosen implementation (kFusedMlpTf32Fused = 1, kFusedMlpTf32Layers
// = 2, layers with 32-row staged chunks = 3, layers without the staged kernels
// = 4; 0 is the library's choice, as the _tf32 entry points): tests and tuning.
int metal_ops_fused_mlp_forward_tf32_impl(const void* x, const int64_t* w, const int64_t* b, void* y, void* saved,
                                          int64_t n, int in_dim, int width, int hidden_layers, int out_dim, int act,
                                          int out_act, float alpha, int impl, cudaStream_t stream) {
  return Forward<float>(x, w, b, y, saved, n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha,
                        stream, true, impl);
}
int metal_ops_fused_mlp_backward_tf32_impl(const void* dy, const void* x, const void* y, const void* saved,
                                           const int64_t* w, const int64_t* b, void* dx, const int64_t* dw,
                                           const int64_t* db, void* workspace, int64_t n, int in_dim, int width,
                                           int hidden_layers, int out_dim, int act, int out_act, float alpha,
                                           int impl, cudaStream_t stream) {
  return Backward<float>(dy, x, y, saved, w, b, dx, dw, db, workspace, n, in_dim, width, hidden_layers,
                         out_dim, act, out_act, alpha, stream, true, impl);
}

// The backward given a workspace of workspace_bytes (the launcher checks it
// against metal_ops_fused_mlp_workspace_bytes); elem_size 2 (float16) or 4
// (float32: exact, or TF32 with tf32 = 1 and impl as above).
int metal_ops_fused_mlp_backward_sized(const void* dy, const void* x, const void* y, const void* saved,
                                       const int64_t* w, const int64_t* b, void* dx, const int64_t* dw,
                                       const int64_t* db, void* workspace, int64_t workspace_bytes, int64_t n,
                                       int in_dim, int width, int hidden_layers, int out_dim, int act, int out_act,
                                       float alpha, int elem_size, int tf32, int impl, cudaStream_t stream) {
  if (elem_size == 2) {
    return Backward<__half>(dy, x, y, saved, w, b, dx, dw, db, workspace, n, in_dim, width, hidden_layers,
                            out_dim, act, out_act, alpha, stream, false, 0, workspace_bytes);
  }
  return Backward<float>(dy, x, y, saved, w, b, dx, dw, db, workspace, n, in_dim, width, hidden_layers, out_dim,
                         act, out_act, alpha, stream, tf32 != 0, impl, workspace_bytes);
}

}  // extern "C"

#undef MO_FUSED_MLP_HARNESS

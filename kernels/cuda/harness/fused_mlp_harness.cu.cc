// C-ABI entry points for testing the FusedMLP CUDA kernels without TensorFlow
// (tests/cuda/test_fused_mlp_cuda.py and benchmarks/cuda/bench_fused_mlp_cuda.py
// drive them with CuPy device pointers). Weight/bias/gradient pointers come as
// host arrays of device addresses (0 = not wanted), one per matrix.
#include "kernels/cuda/fused_mlp.h"

namespace {

mo::cuda::FusedMlpShape Shape(int64_t n, int in_dim, int width, int hidden_layers, int out_dim,
                              int act, int out_act, float alpha, bool tf32 = false) {
  mo::cuda::FusedMlpShape s{n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha};
  s.tf32 = tf32;
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
            float alpha, cudaStream_t stream, bool tf32 = false) {
  if (hidden_layers < 1 || hidden_layers + 1 > mo::cuda::kFusedMlpMaxMatrices) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(mo::cuda::LaunchFusedMlpForward<T>(
      static_cast<const T*>(x), Params<T>(w, b, hidden_layers + 1), static_cast<T*>(y),
      static_cast<T*>(saved), Shape(n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha, tf32),
      stream));
}

template <typename T>
int Backward(const void* dy, const void* x, const void* y, const void* saved, const int64_t* w,
             const int64_t* b, void* dx, const int64_t* dw, const int64_t* db, void* workspace,
             int64_t n, int in_dim, int width, int hidden_layers, int out_dim, int act,
             int out_act, float alpha, cudaStream_t stream, bool tf32 = false) {
  if (hidden_layers < 1 || hidden_layers + 1 > mo::cuda::kFusedMlpMaxMatrices) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  mo::cuda::FusedMlpGrads<T> g{};
  for (int l = 0; l < hidden_layers + 1; ++l) {
    g.dw[l] = reinterpret_cast<T*>(dw[l]);
    g.db[l] = reinterpret_cast<T*>(db[l]);
  }
  return static_cast<int>(mo::cuda::LaunchFusedMlpBackward<T>(
      static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(y),
      static_cast<const T*>(saved), Params<T>(w, b, hidden_layers + 1), static_cast<T*>(dx), g,
      workspace, Shape(n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha, tf32), stream));
}

}  // namespace

extern "C" {

int64_t metal_ops_fused_mlp_workspace_bytes(int64_t n, int in_dim, int width, int hidden_layers,
                                            int out_dim, int elem_size) {
  return static_cast<int64_t>(mo::cuda::FusedMlpBackwardWorkspaceBytes(
      Shape(n, in_dim, width, hidden_layers, out_dim, 0, 0, 0.0f), static_cast<size_t>(elem_size)));
}

int metal_ops_fused_mlp_forward_float32(const void* x, const int64_t* w, const int64_t* b, void* y,
                                        void* saved, int64_t n, int in_dim, int width,
                                        int hidden_layers, int out_dim, int act, int out_act,
                                        float alpha, cudaStream_t stream) {
  return Forward<float>(x, w, b, y, saved, n, in_dim, width, hidden_layers, out_dim, act, out_act,
                        alpha, stream);
}
int metal_ops_fused_mlp_forward_float16(const void* x, const int64_t* w, const int64_t* b, void* y,
                                        void* saved, int64_t n, int in_dim, int width,
                                        int hidden_layers, int out_dim, int act, int out_act,
                                        float alpha, cudaStream_t stream) {
  return Forward<__half>(x, w, b, y, saved, n, in_dim, width, hidden_layers, out_dim, act, out_act,
                         alpha, stream);
}
int metal_ops_fused_mlp_backward_float32(const void* dy, const void* x, const void* y,
                                         const void* saved, const int64_t* w, const int64_t* b,
                                         void* dx, const int64_t* dw, const int64_t* db,
                                         void* workspace, int64_t n, int in_dim, int width,
                                         int hidden_layers, int out_dim, int act, int out_act,
                                         float alpha, cudaStream_t stream) {
  return Backward<float>(dy, x, y, saved, w, b, dx, dw, db, workspace, n, in_dim, width,
                         hidden_layers, out_dim, act, out_act, alpha, stream);
}
int metal_ops_fused_mlp_backward_float16(const void* dy, const void* x, const void* y,
                                         const void* saved, const int64_t* w, const int64_t* b,
                                         void* dx, const int64_t* dw, const int64_t* db,
                                         void* workspace, int64_t n, int in_dim, int width,
                                         int hidden_layers, int out_dim, int act, int out_act,
                                         float alpha, cudaStream_t stream) {
  return Backward<__half>(dy, x, y, saved, w, b, dx, dw, db, workspace, n, in_dim, width,
                          hidden_layers, out_dim, act, out_act, alpha, stream);
}

// float32 on TF32 tensor cores (the _float32 entry points above run exact
// float32); same arguments.
int metal_ops_fused_mlp_forward_tf32(const void* x, const int64_t* w, const int64_t* b, void* y, void* saved,
                                     int64_t n, int in_dim, int width, int hidden_layers, int out_dim, int act,
                                     int out_act, float alpha, cudaStream_t stream) {
  return Forward<float>(x, w, b, y, saved, n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha,
                        stream, true);
}
int metal_ops_fused_mlp_backward_tf32(const void* dy, const void* x, const void* y, const void* saved,
                                      const int64_t* w, const int64_t* b, void* dx, const int64_t* dw,
                                      const int64_t* db, void* workspace, int64_t n, int in_dim, int width,
                                      int hidden_layers, int out_dim, int act, int out_act, float alpha,
                                      cudaStream_t stream) {
  return Backward<float>(dy, x, y, saved, w, b, dx, dw, db, workspace, n, in_dim, width, hidden_layers,
                         out_dim, act, out_act, alpha, stream, true);
}

}  // extern "C"

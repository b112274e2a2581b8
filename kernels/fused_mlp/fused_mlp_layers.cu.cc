// FusedMLP float32 layer by layer (the launchers are fused_mlp.cu.cc; which
// networks come here: FusedMlpUsesLayers). Every product is one cuBLAS SGEMM
// over the whole batch (exact float32, or TF32 tensor cores with s.tf32). Bias
// and ReLU / no activation are the GEMM's cuBLASLt epilogue; other
// activations (or no cuBLASLt) take one elementwise pass over the output
// (output_stage.h). The work a Keras Dense stack does, as XLA fuses it,
// without TensorFlow's per-op dispatch.
// A translation unit of its own: host code over cuBLAS / cuBLASLt and one
// elementwise kernel, which includes none of the tensor-core kernels' headers.
//
// Backward, from the output down: dz = dy * f'(y); per layer dW = a^T dz,
// db = 1^T dz (a GEMM with a ones row: cuBLAS's reductions rather than a
// hand-written one), and below it dz' = (dz W^T) * f'(h), the derivative taken
// from the saved output h; dx = dz W^T at the first layer. On TF32 with ReLU
// hidden layers, dz', the lower layer's db and this layer's dW come from one
// tensor-core kernel instead (DreluProductTf32: dz and h read once, dz'
// written once, no dW or db GEMM), and on TF32 the first layer's dx and dW
// from another (InputBackwardTf32: dz and x read once). Layers below the lowest wanted gradient
// are not visited. cuBLAS, and our kernels' fixed-order sums, return the same
// bits on every run on one GPU model and SM count, so dW and db are
// deterministic.
#include <algorithm>

#include "kernels/common/activations.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/fused_mlp/fused_mlp.h"
#include "kernels/cuda/output_stage.h"

namespace mo {
namespace cuda {
namespace fused_mlp_impl {
namespace {

__global__ void FillOnesKernel(float* __restrict__ out, int64_t n) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) out[i] = 1.0f;
}

// Columns of matrix l's output: the hidden width, or the output width.
int Cols(const FusedMlpShape& s, int l) { return l == s.hidden_layers ? s.out_dim : s.width; }
// Rows of matrix l: its input width.
int Rows(const FusedMlpShape& s, int l) { return l == 0 ? s.in_dim : s.width; }

}  // namespace

GpuStatus ForwardLayers(const float* x, const FusedMlpParams<float>& p, float* y, float* saved,
                        const FusedMlpShape& s, cudaStream_t stream) {
  const int matrices = s.hidden_layers + 1;
  const size_t layer_floats = static_cast<size_t>(s.n) * s.width;
  float* scratch = nullptr;
  if (saved == nullptr) {
    // Inference: hidden layers alternate between two buffers.
    const size_t bytes = sizeof(float) * layer_floats * std::min(2, s.hidden_layers);
    GpuStatus st = CudaCall("cudaMallocAsync (FusedMLP inference scratch)",
                            cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, stream));
    if (!st.ok()) return st;
  }
  GpuStatus st;
  const float* a = x;
  for (int l = 0; l < matrices && st.ok(); ++l) {
    const bool last = l == matrices - 1;
    const int k = Rows(s, l), nn = Cols(s, l);
    float* z = last ? y : saved != nullptr ? saved + l * layer_floats : scratch + (l % 2) * layer_floats;
    const int act = last ? s.output_activation : s.activation;
    bool fused = false;
    if (act == kActRelu || act == kActNone) {
      st = RowMajorSgemmEpilogue(s.n, nn, k, a, k, p.w[l], nn, p.b[l], act == kActRelu, z, nn, s.tf32, stream, &fused);
    }
    if (st.ok() && !fused) {
      st = RowMajorSgemm(s.n, nn, k, a, k, p.w[l], nn, z, nn, s.tf32, stream);
      if (st.ok()) {
        st = CudaCall("FusedMLP bias and activation launch",
                      LaunchOutputStage(z, p.b[l], nullptr, s.n, nn, act, s.alpha, stream));
      }
    }
    a = z;
  }
  if (scratch != nullptr) {
    const GpuStatus freed = CudaCall("cudaFreeAsync (FusedMLP inference scratch)", cudaFreeAsync(scratch, stream));
    if (st.ok()) st = freed;
  }
  return st;
}

GpuStatus BackwardLayers(const float* dy, const float* x, const float* y, const float* saved,
                         const FusedMlpParams<float>& p, float* dx, const FusedMlpGrads<float>& g, char* workspace,
                         const WsLayout& ws, const FusedMlpShape& s, cudaStream_t stream) {
  const int matrices = s.hidden_layers + 1;
  const size_t layer_floats = static_cast<size_t>(s.n) * s.width;
  // The lowest layer whose dz is needed: 0 for dx, else the lowest wanted dW / db.
  int stop = matrices;
  bool any_db = false;
  for (int l = matrices - 1; l >= 0; --l) {
    if (g.dw[l] != nullptr || g.db[l] != nullptr) stop = l;
    any_db = any_db || g.db[l] != nullptr;
  }
  if (dx != nullptr) stop = 0;
  if (stop == matrices) return GpuStatus{};
  const float* ones = reinterpret_cast<const float*>(workspace + ws.ones_off);
  if (any_db) {
    FillOnesKernel<<<GridStrideBlocks(s.n), kThreadsPerBlock, 0, stream>>>(
        reinterpret_cast<float*>(workspace + ws.ones_off), s.n);
    GpuStatus st = CudaCall("FusedMLP ones launch", cudaGetLastError());
    if (!st.ok()) return st;
  }
  float* dz = reinterpret_cast<float*>(workspace + ws.dz_off[matrices - 1]);
  GpuStatus st = CudaCall("FusedMLP output derivative launch",
                          LaunchFusedActivationGrad(dy, y, nullptr, dz, s.n * s.out_dim, s.output_activation,
                                                    s.alpha, stream));
  bool db_done = false;  // g.db[l], if wanted, came from DreluProductTf32 with dz
  for (int l = matrices - 1; l >= stop && st.ok(); --l) {
    const int k = Rows(s, l), nn = Cols(s, l);
    const float* a = l == 0 ? x : saved + (l - 1) * layer_floats;
    // Below this layer a ReLU backward on tensor cores, which also forms dW
    // from the dz and h (= a) it reads, where the device holds its staging;
    // at the lowest layer visited it forms dW alone, so that dW has the same
    // bits whichever gradients are wanted.
    const bool relu_tc = l > 0 && s.tf32 && s.activation == kActRelu && nn % 8 == 0;
    const bool drelu = relu_tc && l > stop;
    bool dw_done = false;
    float* below = l > stop ? reinterpret_cast<float*>(workspace + ws.dz_off[l - 1]) : nullptr;
    if (drelu || (relu_tc && g.dw[l] != nullptr)) {
      st = CudaCall("FusedMLP ReLU backward launch",
                    DreluProductTf32(dz, nn, p.w[l], a, below, drelu ? g.db[l - 1] : nullptr, g.dw[l],
                                     reinterpret_cast<float*>(workspace + ws.drelu_off),
                                     reinterpret_cast<float*>(workspace + ws.drelu_dw_off), s.n, s.width,
                                     s.tf32_staged_rows, &dw_done, stream));
    }
    // The input layer on TF32: dx and dW from one read of dz and x.
    bool dx_done = false;
    if (st.ok() && l == 0 && s.tf32 && (dx != nullptr || g.dw[0] != nullptr)) {
      st = CudaCall("FusedMLP input layer backward launch",
                    InputBackwardTf32(dz, nn, p.w[0], x, dx, g.dw[0],
                                      reinterpret_cast<float*>(workspace + ws.drelu_dw_off), s.n, s.in_dim,
                                      s.tf32_staged_rows, &dx_done, stream));
      dw_done = dx_done && g.dw[0] != nullptr;
    }
    if (st.ok() && g.dw[l] != nullptr && !dw_done) {
      st = RowMajorSgemm(true, false, k, nn, s.n, a, k, dz, nn, g.dw[l], nn, s.tf32, stream);
    }
    if (st.ok() && g.db[l] != nullptr && !db_done) {
      st = RowMajorSgemm(1, nn, s.n, ones, s.n, dz, nn, g.db[l], nn, s.tf32, stream);
    }
    if (!st.ok() || l == stop) {
      if (st.ok() && l == 0 && dx != nullptr && !dx_done) {
        st = RowMajorSgemm(false, true, s.n, s.in_dim, nn, dz, nn, p.w[0], nn, dx, s.in_dim, s.tf32, stream);
      }
      break;
    }
    db_done = drelu;
    if (!drelu) {
      st = RowMajorSgemm(false, true, s.n, s.width, nn, dz, nn, p.w[l], nn, below, s.width, s.tf32, stream);
      if (st.ok()) {
        st = CudaCall("FusedMLP activation derivative launch",
                      LaunchFusedActivationGrad(below, a, nullptr, below, static_cast<int64_t>(layer_floats),
                                                s.activation, s.alpha, stream));
      }
    }
    dz = below;
  }
  return st;
}

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo

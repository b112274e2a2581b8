// CPU kernels of MetalOpsFusedMLP / MetalOpsFusedMLPGrad: blocks of rows go
// through every layer while their activations stay in cache (tiny-cuda-nn's
// idea), each layer a small matrix product (Eigen's GEMM, single-threaded per
// block) with the bias and activation applied while the block is hot. Blocks
// are spread over TF's intra-op pool. The backward accumulates weight and bias
// gradients per fixed partition of the rows (their number depends on N only)
// and adds the partitions in order: bitwise deterministic for any thread
// count. Activations and their derivatives: kernels/common/activations.h.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "kernels/common/activations.h"
#include "ops/checks_tf.h"
#include "kernels/fused_mlp_op.h"
#include "ops/fused_mlp_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/threadpool.h"

namespace mo {
namespace {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::OpOutputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace fm = ::mo::fused_mlp_checks;

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;
using RowVectorMap = Eigen::Map<const Eigen::RowVectorXf>;

constexpr int64_t kRowsPerBlock = 512;  // a block's activations (512 x 128 floats) stay in L2
constexpr int64_t kMaxPartitions = 32;  // weight-gradient partials: fixed, independent of threads

// Runs body(f) with f the activation as a compile-time function object, so
// the element loops below vectorise instead of switching per element.
template <typename Body>
void WithActivation(int act, float alpha, Body body) {
  switch (act) {
    case kActNone: return body([](float z) { return z; }, [](float) { return 1.0f; });
    case kActRelu:
      return body([](float z) { return z > 0.0f ? z : 0.0f; }, [](float y) { return y > 0.0f ? 1.0f : 0.0f; });
    case kActLeakyRelu:
      return body([alpha](float z) { return z > 0.0f ? z : alpha * z; },
                  [alpha](float y) { return y > 0.0f ? 1.0f : alpha; });
    default:
      return body([act, alpha](float z) { return activation_forward(z, act, alpha); },
                  [act, alpha](float y) { return activation_derivative_from_output(y, act, alpha); });
  }
}

// z <- f(z + bias) over a block [m, cols].
void BiasActivate(MatrixMap z, const float* bias, int act, float alpha) {
  WithActivation(act, alpha, [&](auto f, auto) {
    for (int64_t r = 0; r < z.rows(); ++r) {
      float* row = z.row(r).data();
      for (int64_t c = 0; c < z.cols(); ++c) row[c] = f(row[c] + bias[c]);
    }
  });
}

// dz <- dz * f'(from the output y) over a block.
void TimesDerivative(MatrixMap dz, const float* y, int64_t ld_y, int act, float alpha) {
  WithActivation(act, alpha, [&](auto, auto df) {
    for (int64_t r = 0; r < dz.rows(); ++r) {
      float* row = dz.row(r).data();
      const float* yr = y + r * ld_y;
      for (int64_t c = 0; c < dz.cols(); ++c) row[c] *= df(yr[c]);
    }
  });
}

void ParallelForBlocks(OpKernelContext* ctx, int64_t blocks, int64_t cost,
                       const std::function<void(int64_t, int64_t)>& fn) {
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(blocks, cost, fn);
}

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct FusedMlpFunctor<CPUDevice, T> {
  static absl::Status Float16OnGpus() {
    return ::tensorflow::errors::InvalidArgument(
        "FusedMLP: float16 runs on GPUs (CUDA, Metal); on the CPU use float32 'x', 'kernels' and 'biases'");
  }

  static absl::Status Forward(OpKernelContext* ctx, const fm::Net& net, const fm::Attrs& a,
                              const FusedMlpForwardArgs<T>& args) {
    if constexpr (!std::is_same<T, float>::value) {
      return Float16OnGpus();
    } else {
      const int64_t n = args.n, W = net.width, L = net.hidden_layers;
      if (n == 0) return absl::OkStatus();
      const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
      const int64_t cost = kRowsPerBlock * (net.in_dim * W + (L - 1) * W * W + W * net.out_dim) * 2;
      ParallelForBlocks(ctx, blocks, cost, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t r0 = b * kRowsPerBlock, m = std::min(kRowsPerBlock, n - r0);
          const float* prev = args.x + r0 * net.in_dim;
          int64_t prev_cols = net.in_dim;
          for (int64_t l = 0; l < L; ++l) {
            float* h = args.hidden + (l * n + r0) * W;  // this layer's rows of `hidden`
            MatrixMap H(h, m, W);
            H.noalias() = ConstMatrixMap(prev, m, prev_cols) * ConstMatrixMap(args.kernels[l], prev_cols, W);
            BiasActivate(H, args.biases[l], a.activation, a.leaky_relu_alpha);
            prev = h;
            prev_cols = W;
          }
          MatrixMap Y(args.y + r0 * net.out_dim, m, net.out_dim);
          Y.noalias() = ConstMatrixMap(prev, m, W) * ConstMatrixMap(args.kernels[L], W, net.out_dim);
          BiasActivate(Y, args.biases[L], a.output_activation, a.leaky_relu_alpha);
        }
      });
      return absl::OkStatus();
    }
  }

  static absl::Status Backward(OpKernelContext* ctx, const fm::Net& net, const fm::Attrs& a,
                               const FusedMlpBackwardArgs<T>& args) {
    if constexpr (!std::is_same<T, float>::value) {
      return Float16OnGpus();
    } else {
      const int64_t n = args.n, W = net.width, L = net.hidden_layers, in = net.in_dim, out = net.out_dim;
      std::vector<int64_t> offset(L + 2, 0);  // layer l's weights then bias in one partial vector
      for (int64_t l = 0; l <= L; ++l) {
        const int64_t rows = l == 0 ? in : W, cols = l == L ? out : W;
        offset[l + 1] = offset[l] + rows * cols + cols;
      }
      const int64_t params = offset[L + 1];
      const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
      const int64_t parts = std::max<int64_t>(1, std::min(kMaxPartitions, blocks));
      std::vector<float> partial(parts * params, 0.0f);
      const float* hs = args.hidden;
      const int64_t cost = (n / parts + 1) * (in * W + (L - 1) * W * W + W * out) * 4;
      ParallelForBlocks(ctx, parts, cost, [&](int64_t p0, int64_t p1) {
        Matrix dz(kRowsPerBlock, std::max<int64_t>(W, out)), dh(kRowsPerBlock, W);
        for (int64_t p = p0; p < p1; ++p) {
          float* acc = partial.data() + p * params;
          for (int64_t b = blocks * p / parts; b < blocks * (p + 1) / parts; ++b) {
            const int64_t r0 = b * kRowsPerBlock, m = std::min(kRowsPerBlock, n - r0);
            auto layer_input = [&](int64_t l) { return l == 0 ? args.x + r0 * in : hs + ((l - 1) * n + r0) * W; };
            // Output layer: dz = dy * f_out'(y).
            MatrixMap dZ(dz.data(), m, out);
            dZ = ConstMatrixMap(args.grad_y + r0 * out, m, out);
            TimesDerivative(dZ, args.y + r0 * out, out, a.output_activation, a.leaky_relu_alpha);
            int64_t cols = out;
            for (int64_t l = L; l >= 0; --l) {
              const int64_t rows_in = l == 0 ? in : W;
              MatrixMap dZl(dz.data(), m, cols);
              MatrixMap(acc + offset[l], rows_in, cols).noalias() +=
                  ConstMatrixMap(layer_input(l), m, rows_in).transpose() * dZl;
              // Row by row into each column's sum: the same order whatever the vector width or alignment.
              float* db = acc + offset[l] + rows_in * cols;
              for (int64_t r = 0; r < m; ++r) {
                const float* dzr = dz.data() + r * cols;
                for (int64_t c = 0; c < cols; ++c) db[c] += dzr[c];
              }
              // dh = dz W_l^T: the gradient of this layer's input.
              float* dh_out = l == 0 ? args.grad_x + r0 * in : dh.data();
              MatrixMap(dh_out, m, rows_in).noalias() = dZl * ConstMatrixMap(args.kernels[l], rows_in, cols).transpose();
              if (l == 0) break;
              // The hidden layer below: dz = dh * f'(h_{l-1}).
              MatrixMap dZnext(dz.data(), m, W);
              dZnext = MatrixMap(dh.data(), m, W);
              TimesDerivative(dZnext, hs + ((l - 1) * n + r0) * W, W, a.activation, a.leaky_relu_alpha);
              cols = W;
            }
          }
        }
      });
      // Partitions added in order: the same sums whatever the thread count.
      for (int64_t l = 0; l <= L; ++l) {
        const int64_t rows = l == 0 ? in : W, cols = l == L ? out : W;
        for (int64_t i = 0; i < rows * cols; ++i) {
          float s = 0.0f;
          for (int64_t p = 0; p < parts; ++p) s += partial[p * params + offset[l] + i];
          args.grad_kernels[l][i] = s;
        }
        for (int64_t i = 0; i < cols; ++i) {
          float s = 0.0f;
          for (int64_t p = 0; p < parts; ++p) s += partial[p * params + offset[l] + rows * cols + i];
          args.grad_biases[l][i] = s;
        }
      }
      return absl::OkStatus();
    }
  }
};

// float16 is registered so that it fails with a message saying where it runs.
METAL_OPS_REGISTER_FUSED_MLP(DEVICE_CPU, CPUDevice, float);
METAL_OPS_REGISTER_FUSED_MLP(DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo

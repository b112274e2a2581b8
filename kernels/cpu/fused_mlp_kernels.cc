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
#include <vector>

#include "Eigen/Core"
#include "kernels/common/activations.h"
#include "ops/checks_tf.h"
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

constexpr int64_t kRowsPerBlock = 128;  // a block's activations (128 x 128 floats) stay in L2
constexpr int64_t kMaxPartitions = 32;  // weight-gradient partials: fixed, independent of threads

absl::Status ReadAttrs(OpKernelConstruction* ctx, fm::Attrs* attrs) {
  std::string activation, output_activation;
  float alpha = 0.0f;
  TF_RETURN_IF_ERROR(ctx->GetAttr("activation", &activation));
  TF_RETURN_IF_ERROR(ctx->GetAttr("output_activation", &output_activation));
  TF_RETURN_IF_ERROR(ctx->GetAttr("leaky_relu_alpha", &alpha));
  return checks::ToStatus(fm::ParseAttrs(activation, output_activation, alpha, attrs));
}

std::vector<checks::Dims> DimsOfList(const OpInputList& list) {
  std::vector<checks::Dims> dims;
  for (int i = 0; i < list.size(); ++i) dims.push_back(checks::DimsOf(list[i]));
  return dims;
}

// z <- f(z + bias) over a block [m, cols].
void BiasActivate(MatrixMap z, const float* bias, int act, float alpha) {
  for (int64_t r = 0; r < z.rows(); ++r) {
    float* row = z.row(r).data();
    for (int64_t c = 0; c < z.cols(); ++c) row[c] = activation_forward(row[c] + bias[c], act, alpha);
  }
}

// dz <- dz * f'(from the output y) over a block.
void TimesDerivative(MatrixMap dz, const float* y, int64_t ld_y, int act, float alpha) {
  for (int64_t r = 0; r < dz.rows(); ++r) {
    float* row = dz.row(r).data();
    const float* yr = y + r * ld_y;
    for (int64_t c = 0; c < dz.cols(); ++c) row[c] *= activation_derivative_from_output(yr[c], act, alpha);
  }
}

void ParallelForBlocks(OpKernelContext* ctx, int64_t blocks, int64_t cost,
                       const std::function<void(int64_t, int64_t)>& fn) {
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(blocks, cost, fn);
}

class FusedMlpOp : public OpKernel {
 public:
  explicit FusedMlpOp(OpKernelConstruction* ctx) : OpKernel(ctx) { OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &attrs_)); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OpInputList kernels, biases;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    OP_REQUIRES_OK(ctx, ctx->input_list("biases", &biases));
    fm::Net net;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fm::Shapes(checks::DimsOf(x), DimsOfList(kernels), DimsOfList(biases),
                                                    &net)));
    OP_REQUIRES(ctx, x.dtype() == ::tensorflow::DT_FLOAT,
                ::tensorflow::errors::InvalidArgument(
                    "FusedMLP: float16 runs on GPUs (CUDA, Metal); on the CPU use float32 'x', 'kernels' and 'biases'"));
    const int64_t n = x.dim_size(0), W = net.width, L = net.hidden_layers;
    Tensor *y = nullptr, *hidden = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, net.out_dim}), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({L, n, W}), &hidden));
    if (n == 0) return;
    const float* xs = x.flat<float>().data();
    float* hs = hidden->flat<float>().data();
    float* ys = y->flat<float>().data();
    const fm::Attrs a = attrs_;
    const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
    const int64_t cost = kRowsPerBlock * (net.in_dim * W + (L - 1) * W * W + W * net.out_dim) * 2;
    ParallelForBlocks(ctx, blocks, cost, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * kRowsPerBlock, m = std::min(kRowsPerBlock, n - r0);
        const float* prev = xs + r0 * net.in_dim;
        int64_t prev_cols = net.in_dim;
        for (int64_t l = 0; l < L; ++l) {
          float* h = hs + (l * n + r0) * W;  // this layer's rows of `hidden`
          MatrixMap H(h, m, W);
          H.noalias() = ConstMatrixMap(prev, m, prev_cols) *
                        ConstMatrixMap(kernels[l].flat<float>().data(), prev_cols, W);
          BiasActivate(H, biases[l].flat<float>().data(), a.activation, a.leaky_relu_alpha);
          prev = h;
          prev_cols = W;
        }
        MatrixMap Y(ys + r0 * net.out_dim, m, net.out_dim);
        Y.noalias() = ConstMatrixMap(prev, m, W) * ConstMatrixMap(kernels[L].flat<float>().data(), W, net.out_dim);
        BiasActivate(Y, biases[L].flat<float>().data(), a.output_activation, a.leaky_relu_alpha);
      }
    });
  }

 private:
  fm::Attrs attrs_;
};

class FusedMlpGradOp : public OpKernel {
 public:
  explicit FusedMlpGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    OpInputList kernels;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    const Tensor& y = ctx->input(2 + kernels.size());
    const Tensor& hidden = ctx->input(3 + kernels.size());
    // The biases' shapes follow from the kernels'.
    std::vector<checks::Dims> bias_dims;
    for (int l = 0; l < kernels.size(); ++l) bias_dims.push_back({kernels[l].dims() == 2 ? kernels[l].dim_size(1) : 0});
    fm::Net net;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fm::Shapes(checks::DimsOf(x), DimsOfList(kernels), bias_dims, &net)));
    const int64_t n = x.dim_size(0), W = net.width, L = net.hidden_layers, in = net.in_dim, out = net.out_dim;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fm::GradShapes(net, n, checks::DimsOf(dy), checks::DimsOf(y),
                                                        checks::DimsOf(hidden))));
    OP_REQUIRES(ctx, x.dtype() == ::tensorflow::DT_FLOAT,
                ::tensorflow::errors::InvalidArgument(
                    "FusedMLPGrad: float16 runs on GPUs (CUDA, Metal); on the CPU use float32"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OpOutputList dkernels, dbiases;
    OP_REQUIRES_OK(ctx, ctx->output_list("grad_kernels", &dkernels));
    OP_REQUIRES_OK(ctx, ctx->output_list("grad_biases", &dbiases));
    std::vector<int64_t> offset(L + 2, 0);  // layer l's weights then bias in one partial vector
    for (int64_t l = 0; l <= L; ++l) {
      const int64_t rows = l == 0 ? in : W, cols = l == L ? out : W;
      offset[l + 1] = offset[l] + rows * cols + cols;
      Tensor* t = nullptr;
      OP_REQUIRES_OK(ctx, dkernels.allocate(l, TensorShape({rows, cols}), &t));
      OP_REQUIRES_OK(ctx, dbiases.allocate(l, TensorShape({cols}), &t));
    }
    const int64_t params = offset[L + 1];
    const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
    const int64_t parts = std::max<int64_t>(1, std::min(kMaxPartitions, blocks));
    std::vector<float> partial(parts * params, 0.0f);
    const fm::Attrs a = attrs_;
    const float* dys = dy.flat<float>().data();
    const float* xs = x.flat<float>().data();
    const float* ys = y.flat<float>().data();
    const float* hs = hidden.flat<float>().data();
    float* dxs = dx->flat<float>().data();
    const int64_t cost = (n / parts + 1) * (in * W + (L - 1) * W * W + W * out) * 4;
    ParallelForBlocks(ctx, parts, cost, [&](int64_t p0, int64_t p1) {
      Matrix dz(kRowsPerBlock, std::max<int64_t>(W, out)), dh(kRowsPerBlock, W);
      for (int64_t p = p0; p < p1; ++p) {
        float* acc = partial.data() + p * params;
        for (int64_t b = blocks * p / parts; b < blocks * (p + 1) / parts; ++b) {
          const int64_t r0 = b * kRowsPerBlock, m = std::min(kRowsPerBlock, n - r0);
          auto layer_input = [&](int64_t l) { return l == 0 ? xs + r0 * in : hs + ((l - 1) * n + r0) * W; };
          // Output layer: dz = dy * f_out'(y).
          MatrixMap dZ(dz.data(), m, out);
          dZ = ConstMatrixMap(dys + r0 * out, m, out);
          TimesDerivative(dZ, ys + r0 * out, out, a.output_activation, a.leaky_relu_alpha);
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
            float* dh_out = l == 0 ? dxs + r0 * in : dh.data();
            MatrixMap(dh_out, m, rows_in).noalias() =
                dZl * ConstMatrixMap(kernels[l].flat<float>().data(), rows_in, cols).transpose();
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
      float* dk = dkernels[l]->flat<float>().data();
      float* db = dbiases[l]->flat<float>().data();
      for (int64_t i = 0; i < rows * cols; ++i) {
        float s = 0.0f;
        for (int64_t p = 0; p < parts; ++p) s += partial[p * params + offset[l] + i];
        dk[i] = s;
      }
      for (int64_t i = 0; i < cols; ++i) {
        float s = 0.0f;
        for (int64_t p = 0; p < parts; ++p) s += partial[p * params + offset[l] + rows * cols + i];
        db[i] = s;
      }
    }
  }

 private:
  fm::Attrs attrs_;
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsFusedMLP").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        FusedMlpOp);
REGISTER_KERNEL_BUILDER(
    Name("MetalOpsFusedMLP").Device(::tensorflow::DEVICE_CPU).TypeConstraint<Eigen::half>("T"), FusedMlpOp);
REGISTER_KERNEL_BUILDER(Name("MetalOpsFusedMLPGrad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        FusedMlpGradOp);
REGISTER_KERNEL_BUILDER(
    Name("MetalOpsFusedMLPGrad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<Eigen::half>("T"),
    FusedMlpGradOp);

}  // namespace
}  // namespace mo

// CPU kernels of MetalOpsFusedConv2D and MetalOpsFusedActivationGrad.
//
// The convolution is a blocked im2col + GEMM (Eigen tensor contraction; see
// LaunchConv). The bias, the residual and the activation are applied by an
// Eigen *output kernel*: the contraction calls it on each output block right
// after the block is computed, while it is still in cache, so the fused op
// makes one pass over the output instead of three or four.
//
// Threads: the contraction runs on ctx->eigen_device<ThreadPoolDevice>(), which
// is TensorFlow's intra-op thread pool (the same pool ParallelFor uses); the
// patch gathering, the element-wise gradient kernel and the degenerate
// in_channels == 0 case use tensorflow_cpu_worker_threads()->workers->ParallelFor.
#define EIGEN_USE_THREADS

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/activations.h"
#include "tensorflow/core/framework/kernel_shape_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/tensor_types.h"
#include "tensorflow/core/util/padding.h"
#include "tensorflow/core/util/work_sharder.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace metal_ops {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;
using CPUDevice = Eigen::ThreadPoolDevice;

// Parses the activation attr; the op registration already restricts the names.
bool ActivationFromName(const std::string& name, int* act) {
  static const char* const kNames[] = {"none", "relu", "relu6", "elu",
                                       "leaky_relu", "sigmoid", "tanh", "swish"};
  for (int i = 0; i < 8; ++i) {
    if (name == kNames[i]) {
      *act = i;
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------
// Output stage. Eigen evaluates a row-major contraction as the column-major
// product with swapped arguments, so an output block is rows = output channels
// [i, i + num_rows) and columns = output pixels; column `col` of the block is
// num_rows contiguous floats of the NHWC output. The offset of that pointer
// from the start of the output is also the residual's offset.
// ---------------------------------------------------------------------------
template <int ACT>
EIGEN_ALWAYS_INLINE void ApplyOutputStage(float* out, const float* bias, const float* residual,
                                          Eigen::Index n, float alpha) {
  if (bias != nullptr && residual != nullptr) {
    for (Eigen::Index r = 0; r < n; ++r)
      out[r] = mo::activation_forward(out[r] + bias[r] + residual[r], ACT, alpha);
  } else if (bias != nullptr) {
    for (Eigen::Index r = 0; r < n; ++r)
      out[r] = mo::activation_forward(out[r] + bias[r], ACT, alpha);
  } else if (residual != nullptr) {
    for (Eigen::Index r = 0; r < n; ++r)
      out[r] = mo::activation_forward(out[r] + residual[r], ACT, alpha);
  } else if (ACT != mo::kActNone) {
    for (Eigen::Index r = 0; r < n; ++r) out[r] = mo::activation_forward(out[r], ACT, alpha);
  }
}

// One output-kernel type (the activation is a run-time value, dispatched once
// per output column of num_rows contiguous values, so the inner loops are
// still specialised and vectorised): keeps the number of contraction
// instantiations, and the compile time, small.
struct FusedOutputKernel {
  const float* bias;      // [C] or nullptr
  const float* residual;  // output-shaped or nullptr
  const float* out_base;  // start of the output tensor
  int act;
  float alpha;

  template <typename OutputMapper, typename Index>
  EIGEN_ALWAYS_INLINE void operator()(const OutputMapper& output_mapper,
                                      const Eigen::TensorContractionParams& params, Index i,
                                      Index /*j*/, Index num_rows, Index num_cols) const {
    eigen_assert(params.swapped_arguments);
    const float* b = bias != nullptr ? bias + i : nullptr;
    for (Index col = 0; col < num_cols; ++col) {
      float* out = &output_mapper(0, col);
      const float* res = residual != nullptr ? residual + (out - out_base) : nullptr;
      switch (act) {
        case mo::kActRelu: ApplyOutputStage<mo::kActRelu>(out, b, res, num_rows, alpha); break;
        case mo::kActRelu6: ApplyOutputStage<mo::kActRelu6>(out, b, res, num_rows, alpha); break;
        case mo::kActElu: ApplyOutputStage<mo::kActElu>(out, b, res, num_rows, alpha); break;
        case mo::kActLeakyRelu:
          ApplyOutputStage<mo::kActLeakyRelu>(out, b, res, num_rows, alpha);
          break;
        case mo::kActSigmoid:
          ApplyOutputStage<mo::kActSigmoid>(out, b, res, num_rows, alpha);
          break;
        case mo::kActTanh: ApplyOutputStage<mo::kActTanh>(out, b, res, num_rows, alpha); break;
        case mo::kActSwish: ApplyOutputStage<mo::kActSwish>(out, b, res, num_rows, alpha); break;
        default: ApplyOutputStage<mo::kActNone>(out, b, res, num_rows, alpha); break;
      }
    }
  }
};

struct ConvGeometry {
  int64_t batch, in_rows, in_cols, in_depth;
  int64_t filter_rows, filter_cols, out_depth;
  int64_t out_rows, out_cols;
  int64_t stride_rows, stride_cols, dilation_rows, dilation_cols;
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  tensorflow::Padding padding;
};

// out[rows, Cout] = patches[rows, K] x filter[K, Cout], output stage fused.
void Contract(const CPUDevice& d, const float* lhs, int64_t rows, int64_t k, const float* filter,
              int64_t cout, const float* bias, const float* residual, int act, float alpha,
              float* out) {
  using Index = Eigen::Index;
  const FusedOutputKernel ok{bias, residual, out, act, alpha};
  Eigen::TensorMap<Eigen::Tensor<const float, 2, Eigen::RowMajor>, Eigen::Unaligned> a(lhs, rows, k);
  Eigen::TensorMap<Eigen::Tensor<const float, 2, Eigen::RowMajor>, Eigen::Unaligned> f(filter, k,
                                                                                      cout);
  Eigen::TensorMap<Eigen::Tensor<float, 2, Eigen::RowMajor>, Eigen::Unaligned> o(out, rows, cout);
  Eigen::array<Eigen::IndexPair<Index>, 1> dims{Eigen::IndexPair<Index>(1, 0)};
  o.device(d) = a.contract(f, dims, ok);
}

// The convolution as a matrix product: an HWIO filter is already the
// [KH*KW*Cin, Cout] matrix, and an output pixel's receptive field, gathered
// tap by tap (Cin contiguous floats each, zeros in the padding), is a row of
// the [pixels, KH*KW*Cin] patch matrix. Pixels are processed in chunks whose
// patch rows fit a bounded scratch buffer; 1x1 stride-1 unpadded convolutions
// use the input itself as the patch matrix. The GEMM is Eigen's tensor
// contraction (its AVX-512 GEMM micro-kernels under -march=native), and the
// output stage runs in its output kernel, block by block.
void LaunchConv(OpKernelContext* ctx, const ConvGeometry& g, const float* input,
                const float* filter, const float* bias, const float* residual, int act,
                float alpha, float* output) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  const int64_t cin = g.in_depth, cout = g.out_depth;
  const int64_t k = g.filter_rows * g.filter_cols * cin;
  const int64_t pixels = g.batch * g.out_rows * g.out_cols;
  const bool one_by_one = g.filter_rows == 1 && g.filter_cols == 1 && g.stride_rows == 1 &&
                          g.stride_cols == 1 && g.pad_top == 0 && g.pad_bottom == 0 &&
                          g.pad_left == 0 && g.pad_right == 0;
  if (one_by_one) {
    Contract(d, input, pixels, k, filter, cout, bias, residual, act, alpha, output);
    return;
  }
  // Chunk of output pixels whose patch rows take at most ~16 MiB.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(pixels, (int64_t{4} << 20) / k));
  Tensor scratch;
  OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({chunk * k}), &scratch));
  float* patches = scratch.flat<float>().data();
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  const int64_t ohw = g.out_rows * g.out_cols;
  for (int64_t start = 0; start < pixels; start += chunk) {
    const int64_t rows = std::min(chunk, pixels - start);
    auto gather = [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t pix = start + p;
        const int64_t n = pix / ohw, rem = pix % ohw;
        const int64_t oy = rem / g.out_cols, ox = rem % g.out_cols;
        float* dst = patches + p * k;
        for (int64_t i = 0; i < g.filter_rows; ++i) {
          const int64_t iy = oy * g.stride_rows - g.pad_top + i * g.dilation_rows;
          for (int64_t j = 0; j < g.filter_cols; ++j, dst += cin) {
            const int64_t ix = ox * g.stride_cols - g.pad_left + j * g.dilation_cols;
            if (iy < 0 || iy >= g.in_rows || ix < 0 || ix >= g.in_cols) {
              std::memset(dst, 0, sizeof(float) * cin);
            } else {
              std::memcpy(dst, input + ((n * g.in_rows + iy) * g.in_cols + ix) * cin,
                          sizeof(float) * cin);
            }
          }
        }
      }
    };
    workers->ParallelFor(rows, /*cost_per_unit=*/k, gather);
    Contract(d, patches, rows, k, filter, cout, bias,
             residual != nullptr ? residual + start * cout : nullptr, act, alpha,
             output + start * cout);
  }
}

std::string ShapeStr(const Tensor& t) { return t.shape().DebugString(); }

class FusedConv2DOp : public OpKernel {
 public:
  explicit FusedConv2DOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_bias", &num_bias_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_residual", &num_residual_));
    OP_REQUIRES(ctx, num_bias_ <= 1, InvalidArgument("num_bias must be 0 or 1, got ", num_bias_));
    OP_REQUIRES(ctx, num_residual_ <= 1,
                InvalidArgument("num_residual must be 0 or 1, got ", num_residual_));
    std::vector<int32_t> strides, dilations;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dilations", &dilations));
    OP_REQUIRES(ctx, strides.size() == 4,
                InvalidArgument("strides must have 4 elements (NHWC), got ", strides.size()));
    OP_REQUIRES(ctx, dilations.size() == 4,
                InvalidArgument("dilations must have 4 elements (NHWC), got ", dilations.size()));
    OP_REQUIRES(ctx, strides[0] == 1 && strides[3] == 1,
                InvalidArgument("strides in the batch and channel dimensions must be 1, got [",
                                strides[0], ", ", strides[1], ", ", strides[2], ", ", strides[3],
                                "]"));
    OP_REQUIRES(ctx, dilations[0] == 1 && dilations[3] == 1,
                InvalidArgument("dilations in the batch and channel dimensions must be 1"));
    OP_REQUIRES(ctx, strides[1] > 0 && strides[2] > 0,
                InvalidArgument("strides must be positive, got [", strides[1], ", ", strides[2],
                                "] for height and width"));
    OP_REQUIRES(ctx, dilations[1] > 0 && dilations[2] > 0,
                InvalidArgument("dilations must be positive"));
    stride_rows_ = strides[1];
    stride_cols_ = strides[2];
    dilation_rows_ = dilations[1];
    dilation_cols_ = dilations[2];
    std::string padding, data_format, activation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("data_format", &data_format));
    OP_REQUIRES(ctx, data_format == "NHWC",
                InvalidArgument("data_format must be NHWC on CPU, got ", data_format));
    if (padding == "SAME") {
      padding_ = tensorflow::Padding::SAME;
    } else if (padding == "VALID") {
      padding_ = tensorflow::Padding::VALID;
    } else {
      padding_ = tensorflow::Padding::EXPLICIT;
    }
    std::vector<int64_t> explicit_paddings;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("explicit_paddings", &explicit_paddings));
    if (padding_ == tensorflow::Padding::EXPLICIT) {
      OP_REQUIRES(ctx, explicit_paddings.size() == 8,
                  InvalidArgument("explicit_paddings must have 8 elements when padding is "
                                  "EXPLICIT, got ",
                                  explicit_paddings.size()));
      for (int64_t p : explicit_paddings)
        OP_REQUIRES(ctx, p >= 0, InvalidArgument("explicit_paddings must be >= 0, got ", p));
      OP_REQUIRES(ctx,
                  explicit_paddings[0] == 0 && explicit_paddings[1] == 0 &&
                      explicit_paddings[6] == 0 && explicit_paddings[7] == 0,
                  InvalidArgument("explicit_paddings of the batch and channel dimensions must "
                                  "be 0"));
      pad_top_ = explicit_paddings[2];
      pad_bottom_ = explicit_paddings[3];
      pad_left_ = explicit_paddings[4];
      pad_right_ = explicit_paddings[5];
    } else {
      OP_REQUIRES(ctx, explicit_paddings.empty(),
                  InvalidArgument("explicit_paddings must be empty unless padding is EXPLICIT"));
    }
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation", &activation));
    OP_REQUIRES(ctx, ActivationFromName(activation, &act_),
                InvalidArgument("unknown activation '", activation, "'"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("leaky_relu_alpha", &alpha_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    const Tensor& filter = ctx->input(1);
    OP_REQUIRES(ctx, input.dims() == 4,
                InvalidArgument("input must be 4-dimensional [batch, height, width, channels], "
                                "got shape ",
                                ShapeStr(input)));
    OP_REQUIRES(ctx, filter.dims() == 4,
                InvalidArgument("filter must be 4-dimensional [height, width, in_channels, "
                                "out_channels], got shape ",
                                ShapeStr(filter)));
    ConvGeometry g;
    g.batch = input.dim_size(0);
    g.in_rows = input.dim_size(1);
    g.in_cols = input.dim_size(2);
    g.in_depth = input.dim_size(3);
    g.filter_rows = filter.dim_size(0);
    g.filter_cols = filter.dim_size(1);
    g.out_depth = filter.dim_size(3);
    OP_REQUIRES(ctx, filter.dim_size(2) == g.in_depth,
                InvalidArgument("filter in_channels (", filter.dim_size(2),
                                ") must equal the input's channels (", g.in_depth,
                                "); input shape ", ShapeStr(input), ", filter shape ",
                                ShapeStr(filter)));
    OP_REQUIRES(ctx, g.filter_rows > 0 && g.filter_cols > 0,
                InvalidArgument("filter height and width must be positive, got shape ",
                                ShapeStr(filter)));
    g.stride_rows = stride_rows_;
    g.stride_cols = stride_cols_;
    g.dilation_rows = dilation_rows_;
    g.dilation_cols = dilation_cols_;
    g.padding = padding_;
    g.pad_top = pad_top_;
    g.pad_bottom = pad_bottom_;
    g.pad_left = pad_left_;
    g.pad_right = pad_right_;
    auto out_size = [&](int64_t in, int64_t k, int64_t dil, int64_t stride, int64_t* out,
                        int64_t* before, int64_t* after, const char* axis) {
      absl::Status s = tensorflow::GetWindowedOutputSizeVerbose(in, k, dil, stride, padding_, out,
                                                                before, after);
      if (!s.ok()) {
        return InvalidArgument("input ", axis, " ", in, " is too small for the filter ", axis,
                               " ", k, " (dilation ", dil, ", stride ", stride,
                               "): ", s.message());
      }
      return absl::OkStatus();
    };
    OP_REQUIRES_OK(ctx, out_size(g.in_rows, g.filter_rows, g.dilation_rows, g.stride_rows,
                                 &g.out_rows, &g.pad_top, &g.pad_bottom, "height"));
    OP_REQUIRES_OK(ctx, out_size(g.in_cols, g.filter_cols, g.dilation_cols, g.stride_cols,
                                 &g.out_cols, &g.pad_left, &g.pad_right, "width"));
    const TensorShape out_shape({g.batch, g.out_rows, g.out_cols, g.out_depth});

    const float* bias = nullptr;
    const float* residual = nullptr;
    if (num_bias_ == 1) {
      const Tensor& b = ctx->input(2);
      OP_REQUIRES(ctx, b.dims() == 1 && b.dim_size(0) == g.out_depth,
                  InvalidArgument("bias must have shape [", g.out_depth,
                                  "] (the filter's out_channels), got shape ", ShapeStr(b)));
      bias = b.flat<float>().data();
    }
    if (num_residual_ == 1) {
      const Tensor& r = ctx->input(2 + num_bias_);
      OP_REQUIRES(ctx, r.shape() == out_shape,
                  InvalidArgument("residual must have the output's shape ",
                                  out_shape.DebugString(), " (no broadcasting), got shape ",
                                  ShapeStr(r)));
      residual = r.flat<float>().data();
    }
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &output));
    if (out_shape.num_elements() == 0) return;
    float* out = output->flat<float>().data();

    if (g.in_depth == 0 || g.batch * g.in_rows * g.in_cols == 0) {
      // Empty contraction: the convolution is 0, the output stage still applies.
      const int64_t c = g.out_depth;
      const int act = act_;
      const float alpha = alpha_;
      auto work = [=](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          const float b = bias != nullptr ? bias[k % c] : 0.0f;
          const float r = residual != nullptr ? residual[k] : 0.0f;
          out[k] = mo::fused_output_element(0.0f, b, r, act, alpha);
        }
      };
      ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
          out_shape.num_elements(), /*cost_per_unit=*/20, work);
      return;
    }
    LaunchConv(ctx, g, input.flat<float>().data(), filter.flat<float>().data(), bias, residual,
               act_, alpha_, out);
  }

 private:
  int num_bias_ = 0, num_residual_ = 0;
  int64_t stride_rows_ = 1, stride_cols_ = 1, dilation_rows_ = 1, dilation_cols_ = 1;
  int64_t pad_top_ = 0, pad_bottom_ = 0, pad_left_ = 0, pad_right_ = 0;
  tensorflow::Padding padding_ = tensorflow::Padding::SAME;
  int act_ = mo::kActNone;
  float alpha_ = 0.2f;
};

REGISTER_KERNEL_BUILDER(
    Name("MetalOpsFusedConv2D").Device(DEVICE_CPU).TypeConstraint<float>("T"), FusedConv2DOp);

// ---------------------------------------------------------------------------
// backprops = gradients * f'(z), from y (or from z for swish / negative alpha).
// ---------------------------------------------------------------------------
class FusedActivationGradOp : public OpKernel {
 public:
  explicit FusedActivationGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string activation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation", &activation));
    OP_REQUIRES(ctx, ActivationFromName(activation, &act_),
                InvalidArgument("unknown activation '", activation, "'"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("leaky_relu_alpha", &alpha_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_features", &num_features_));
    OP_REQUIRES(ctx, num_features_ <= 1,
                InvalidArgument("num_features must be 0 or 1, got ", num_features_));
    OP_REQUIRES(ctx, num_features_ == 1 || mo::activation_grad_uses_output(act_, alpha_),
                InvalidArgument("features (the pre-activation) are required for activation '",
                                activation, "' with leaky_relu_alpha ", alpha_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grads = ctx->input(0);
    const Tensor& outputs = ctx->input(1);
    OP_REQUIRES(ctx, grads.shape() == outputs.shape(),
                InvalidArgument("gradients shape ", ShapeStr(grads),
                                " must equal outputs shape ", ShapeStr(outputs)));
    const float* z = nullptr;
    if (num_features_ == 1) {
      const Tensor& f = ctx->input(2);
      OP_REQUIRES(ctx, f.shape() == grads.shape(),
                  InvalidArgument("features shape ", ShapeStr(f), " must equal gradients shape ",
                                  ShapeStr(grads)));
      z = f.flat<float>().data();
    }
    Tensor* backprops = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, grads.shape(), &backprops));
    const int64_t n = grads.NumElements();
    if (n == 0) return;
    const float* g = grads.flat<float>().data();
    const float* y = outputs.flat<float>().data();
    float* dz = backprops->flat<float>().data();
    const int act = act_;
    const float alpha = alpha_;
    auto work = [=](int64_t begin, int64_t end) {
      if (z != nullptr) {
        for (int64_t k = begin; k < end; ++k)
          dz[k] = g[k] * mo::activation_derivative_from_input(z[k], act, alpha);
      } else {
        for (int64_t k = begin; k < end; ++k)
          dz[k] = g[k] * mo::activation_derivative_from_output(y[k], act, alpha);
      }
    };
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(n, /*cost_per_unit=*/10,
                                                                        work);
  }

 private:
  int act_ = mo::kActNone;
  float alpha_ = 0.2f;
  int num_features_ = 0;
};

REGISTER_KERNEL_BUILDER(
    Name("MetalOpsFusedActivationGrad").Device(DEVICE_CPU).TypeConstraint<float>("T"),
    FusedActivationGradOp);

}  // namespace
}  // namespace metal_ops

// FusedConv2D on the CPU: the CPU functors of MetalOpsFusedConv2D and
// MetalOpsFusedActivationGrad, on a cpu::Context, their TensorFlow
// registrations (the kernel classes of fused_conv2d.h) and XLA's host
// handlers, for the calls fused_conv2d_xla.cc emits.
//
// The convolution is a matrix product (patch rows x the HWIO filter) computed
// in tiles of output pixels spread over the context's pool, one
// single-threaded sgemm per tile (OpenBLAS, from the pinned scipy-openblas32
// package this library links), and the bias, the residual and the activation
// are applied to each tile right after its GEMM wrote it, while it is still in
// cache: one pass over the output instead of three or four.
#define EIGEN_USE_THREADS

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cblas.h"  // scipy-openblas32's: symbols prefixed scipy_
#include "kernels/common/activations.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/tensor_types.h"
#include "unsupported/Eigen/CXX11/Tensor"
#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"
#endif
#define MO_TF_KERNEL  // after the headers it needs: the kernel classes, fused_conv2d.h
#include "kernels/fused_conv2d/fused_conv2d.h"

namespace mo {
namespace fused_conv2d_cpu {

using fused_conv2d::ConvGeometry;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// ---------------------------------------------------------------------------
// Output stage: out = act(out + bias + residual) on a block of `pixels` output
// pixels x `channels` output channels, pixel rows `ld` floats apart in the NHWC
// output. `bias` points at the block's first channel, `residual` at the same
// offset of the residual tensor as `out` of the output. The activation is a
// template argument so the inner loops vectorise; it is dispatched per block.
// ---------------------------------------------------------------------------
template <int ACT>
EIGEN_ALWAYS_INLINE void ApplyOutputStage(float* out, const float* bias, const float* residual,
                                          int64_t n, float alpha) {
  if (bias != nullptr && residual != nullptr) {
    for (int64_t r = 0; r < n; ++r)
      out[r] = mo::activation_forward(out[r] + bias[r] + residual[r], ACT, alpha);
  } else if (bias != nullptr) {
    for (int64_t r = 0; r < n; ++r) out[r] = mo::activation_forward(out[r] + bias[r], ACT, alpha);
  } else if (residual != nullptr) {
    for (int64_t r = 0; r < n; ++r)
      out[r] = mo::activation_forward(out[r] + residual[r], ACT, alpha);
  } else if (ACT != mo::kActNone) {
    for (int64_t r = 0; r < n; ++r) out[r] = mo::activation_forward(out[r], ACT, alpha);
  }
}

template <int ACT>
void OutputStageBlock(float* out, const float* bias, const float* residual, int64_t pixels,
                      int64_t channels, int64_t ld, float alpha) {
  for (int64_t p = 0; p < pixels; ++p) {
    ApplyOutputStage<ACT>(out + p * ld, bias, residual != nullptr ? residual + p * ld : nullptr,
                          channels, alpha);
  }
}

// OutputStageBlock<act> for the op's activations, none .. swish (numbered in
// activations.h); kActNone for any other.
template <int... kActs>
void OutputStageBlockOf(std::integer_sequence<int, kActs...>, int act, float* out, const float* bias,
                        const float* residual, int64_t pixels, int64_t channels, int64_t ld, float alpha) {
  using Stage = void (*)(float*, const float*, const float*, int64_t, int64_t, int64_t, float);
  static constexpr Stage kStages[] = {&OutputStageBlock<kActs>...};
  const Stage stage = act >= 0 && act < static_cast<int>(sizeof...(kActs)) ? kStages[act] : kStages[mo::kActNone];
  stage(out, bias, residual, pixels, channels, ld, alpha);
}

inline void ApplyOutputStageBlock(float* out, const float* bias, const float* residual, int64_t pixels,
                           int64_t channels, int64_t ld, int act, float alpha) {
  OutputStageBlockOf(std::make_integer_sequence<int, mo::kActSwish + 1>(), act, out, bias, residual, pixels,
                     channels, ld, alpha);
}

// The convolution as a matrix product: an HWIO filter is already the
// [KH*KW*Cin, Cout] matrix, and an output pixel's receptive field, gathered tap
// by tap (Cin contiguous floats each, zeros in the padding), is a row of the
// [pixels, KH*KW*Cin] patch matrix. Writes the rows of output pixels
// [first, first + rows) to dst.
inline void GatherPatchRows(const ConvGeometry& g, const float* input, int64_t first, int64_t rows,
                     float* dst) {
  const int64_t cin = g.in_depth, ohw = g.out_rows * g.out_cols;
  for (int64_t pix = first; pix < first + rows; ++pix) {
    const int64_t n = pix / ohw, rem = pix % ohw;
    const int64_t oy = rem / g.out_cols, ox = rem % g.out_cols;
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
}

struct FusedEpilogue {
  const float* bias;      // [Cout] or nullptr
  const float* residual;  // output-shaped or nullptr
  int act;
  float alpha;
};

// C[m, n] = A[m, k] B[k, n], row-major with leading dimensions, on the calling
// thread: OpenBLAS is told once to use one thread, so it never starts work on
// its own pool next to TensorFlow's (the tiles are TensorFlow's parallelism).
inline void Sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
           int64_t ldc) {
  static const bool single_threaded = [] {
    scipy_openblas_set_num_threads(1);
    return true;
  }();
  (void)single_threaded;
  scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
                    static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f,
                    c, static_cast<blasint>(ldc));
}

inline int64_t L2CacheBytes() {
  static const int64_t l2_bytes = Eigen::internal::CacheSizes().m_l2;
  return l2_bytes;
}

// Tiles of output pixels run in parallel on the intra-op pool, one
// single-threaded sgemm each, the output stage applied to the tile right after
// its GEMM. Patch rows are gathered into a per-worker buffer (none for 1x1
// stride-1 convolutions, whose input is the patch matrix).
inline absl::Status LaunchConv(const cpu::Context& ctx, const ConvGeometry& g, const float* input, const float* filter,
                        const FusedEpilogue& e, float* output) {
  const int64_t k = g.patch_size(), cout = g.out_depth, pixels = g.pixels();
  const int threads = cpu::NumThreads(ctx);
  const int64_t tile_rows = mo::fused_conv_tile_rows(k, cout, pixels, threads, L2CacheBytes());
  const bool direct = g.input_is_patch_matrix();
  Tensor scratch;
  float* patches = nullptr;
  if (!direct) {
    const int64_t slots = threads + 1;  // worker ids 0..NumThreads()
    TF_RETURN_IF_ERROR(ctx.AllocateTemp(tensorflow::DT_FLOAT, TensorShape({slots * tile_rows * k}), &scratch));
    patches = scratch.flat<float>().data();
  }
  const int64_t num_tiles = (pixels + tile_rows - 1) / tile_rows;
  auto run_tiles = [&](int64_t begin, int64_t end, int worker) {
    float* my_patches = direct ? nullptr : patches + worker * tile_rows * k;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t first = t * tile_rows, rows = std::min(tile_rows, pixels - first);
      const float* a = input + first * k;
      if (!direct) {
        GatherPatchRows(g, input, first, rows, my_patches);
        a = my_patches;
      }
      float* c = output + first * cout;
      Sgemm(rows, cout, k, a, k, filter, cout, c, cout);
      ApplyOutputStageBlock(c, e.bias, e.residual != nullptr ? e.residual + first * cout : nullptr, rows, cout,
                            cout, e.act, e.alpha);
    }
  };
  cpu::ParallelForBlocksWithWorkerId(ctx, num_tiles, run_tiles);
  return absl::OkStatus();
}

}  // namespace fused_conv2d_cpu

template <>
struct FusedConv2DFunctor<Eigen::ThreadPoolDevice> {
  static absl::Status Compute(cpu::Context ctx, const FusedConv2DArgs& args, float* out) {
    const fused_conv2d::ConvGeometry& g = args.g;
    const int64_t n = g.pixels() * g.out_depth;
    AdviseHugePages(out, sizeof(float) * n, /*collapse=*/false);
    if (g.contraction_empty()) {
      const int64_t c = g.out_depth;
      const float* bias = args.bias;
      const float* residual = args.residual;
      const int act = args.act;
      const float alpha = args.alpha;
      auto work = [=](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          const float b = bias != nullptr ? bias[k % c] : 0.0f;
          const float r = residual != nullptr ? residual[k] : 0.0f;
          out[k] = mo::fused_output_element(0.0f, b, r, act, alpha);
        }
      };
      cpu::ParallelFor(ctx, n, /*cycles_per_item=*/20, work);
      return absl::OkStatus();
    }
    return fused_conv2d_cpu::LaunchConv(
        ctx, g, args.input, args.filter,
        fused_conv2d_cpu::FusedEpilogue{args.bias, args.residual, args.act, args.alpha}, out);
  }
};

// backprops = gradients * f'(z), from y (or from z for swish / negative alpha).
template <>
struct FusedActivationGradFunctor<Eigen::ThreadPoolDevice> {
  static absl::Status Compute(cpu::Context ctx, const float* g, const float* y, const float* z, int64_t n,
                              int act, float alpha, float* dz) {
    AdviseHugePages(dz, sizeof(float) * n, /*collapse=*/false);
    auto work = [=](int64_t begin, int64_t end) {
      if (z != nullptr) {
        for (int64_t k = begin; k < end; ++k)
          dz[k] = g[k] * mo::activation_derivative_from_input(z[k], act, alpha);
      } else {
        for (int64_t k = begin; k < end; ++k)
          dz[k] = g[k] * mo::activation_derivative_from_output(y[k], act, alpha);
      }
    };
    cpu::ParallelFor(ctx, n, /*cycles_per_item=*/10, work);
    return absl::OkStatus();
  }
};


using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER("MetalOpsFusedConv2D", DEVICE_CPU, float, FusedConv2DOp<CPUDevice>);
MO_REGISTER("MetalOpsFusedActivationGrad", DEVICE_CPU, float, FusedActivationGradOp<CPUDevice>);

}  // namespace mo

#if MO_XLA
// XLA's host handlers of the same functors.
namespace mo::xla_kernels {
namespace {

ffi::Error Conv(ffi::AnyBuffer input, ffi::AnyBuffer filter, ffi::RemainingArgs rest, RetBuffer output,
                fused_conv2d::Attrs attrs) {
  FusedConv2DArgs args;
  ffi::Error error = xla_ffi::FusedConv2DArgsOf(input, filter, rest, attrs, &args);
  if (error.failure() || args.g.pixels() * args.g.out_depth == 0) return error;
  return xla_ffi::ToError(
      FusedConv2DFunctor<Eigen::ThreadPoolDevice>::Compute(HostContext(), args, Data<float>(output)));
}

ffi::Error ActivationGrad(ffi::AnyBuffer grads, ffi::AnyBuffer outputs, ffi::RemainingArgs rest,
                          RetBuffer backprops, fused_activation_grad::Attrs attrs) {
  const float* features = nullptr;
  ffi::Error error = xla_ffi::ActivationFeaturesOf(rest, &features);
  const int64_t n = static_cast<int64_t>(grads.element_count());
  if (error.failure() || n == 0) return error;
  return xla_ffi::ToError(FusedActivationGradFunctor<Eigen::ThreadPoolDevice>::Compute(
      HostContext(), Data<float>(grads), Data<float>(outputs), features, n, attrs.activation,
      attrs.leaky_relu_alpha, Data<float>(backprops)));
}

MO_XLA_FFI_HANDLER("MetalOpsFusedConv2D", "Host", Conv,
                   xla_ffi::BindConvBuffers<fused_conv2d::Attrs>(ffi::Ffi::Bind()));
MO_XLA_FFI_HANDLER("MetalOpsFusedActivationGrad", "Host", ActivationGrad,
                   xla_ffi::BindConvBuffers<fused_activation_grad::Attrs>(ffi::Ffi::Bind()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA

// CPU kernels of MetalOpsFusedConv2D and MetalOpsFusedActivationGrad.
//
// The convolution is a matrix product (patch rows x the HWIO filter), and the
// bias, the residual and the activation are applied to each block of the
// output right after the GEMM wrote it, while it is still in cache: one pass
// over the output instead of three or four. The GEMM is oneDNN's sgemm, reached
// through TensorFlow (see FindOneDnnGemm), in tiles of output pixels spread over
// TF's intra-op thread pool; when this TF build does not provide it, Eigen's
// tensor contraction with an output kernel (ConvEigen).
#define EIGEN_USE_THREADS

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/activations.h"
#include "kernels/cpu/fused_conv2d_gemm.h"
#include "kernels/cpu/huge_pages.h"
#include "tensorflow/core/framework/kernel_shape_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/tensor_types.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/public/version.h"
#include "tensorflow/core/util/padding.h"
#include "tensorflow/core/util/work_sharder.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace mo {
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

void ApplyOutputStageBlock(float* out, const float* bias, const float* residual, int64_t pixels,
                           int64_t channels, int64_t ld, int act, float alpha) {
  switch (act) {
    case mo::kActRelu:
      return OutputStageBlock<mo::kActRelu>(out, bias, residual, pixels, channels, ld, alpha);
    case mo::kActRelu6:
      return OutputStageBlock<mo::kActRelu6>(out, bias, residual, pixels, channels, ld, alpha);
    case mo::kActElu:
      return OutputStageBlock<mo::kActElu>(out, bias, residual, pixels, channels, ld, alpha);
    case mo::kActLeakyRelu:
      return OutputStageBlock<mo::kActLeakyRelu>(out, bias, residual, pixels, channels, ld, alpha);
    case mo::kActSigmoid:
      return OutputStageBlock<mo::kActSigmoid>(out, bias, residual, pixels, channels, ld, alpha);
    case mo::kActTanh:
      return OutputStageBlock<mo::kActTanh>(out, bias, residual, pixels, channels, ld, alpha);
    case mo::kActSwish:
      return OutputStageBlock<mo::kActSwish>(out, bias, residual, pixels, channels, ld, alpha);
    default:
      return OutputStageBlock<mo::kActNone>(out, bias, residual, pixels, channels, ld, alpha);
  }
}

struct ConvGeometry {
  int64_t batch, in_rows, in_cols, in_depth;
  int64_t filter_rows, filter_cols, out_depth;
  int64_t out_rows, out_cols;
  int64_t stride_rows, stride_cols, dilation_rows, dilation_cols;
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  tensorflow::Padding padding;

  int64_t pixels() const { return batch * out_rows * out_cols; }
  // Rows of the patch matrix: KH*KW*Cin.
  int64_t patch_size() const { return filter_rows * filter_cols * in_depth; }
  // 1x1, stride 1, no padding: the input itself is the [pixels, Cin] patch matrix.
  bool input_is_patch_matrix() const {
    return filter_rows == 1 && filter_cols == 1 && stride_rows == 1 && stride_cols == 1 &&
           pad_top == 0 && pad_bottom == 0 && pad_left == 0 && pad_right == 0;
  }
};

// The convolution as a matrix product: an HWIO filter is already the
// [KH*KW*Cin, Cout] matrix, and an output pixel's receptive field, gathered tap
// by tap (Cin contiguous floats each, zeros in the padding), is a row of the
// [pixels, KH*KW*Cin] patch matrix. Writes the rows of output pixels
// [first, first + rows) to dst.
void GatherPatchRows(const ConvGeometry& g, const float* input, int64_t first, int64_t rows,
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

// ---------------------------------------------------------------------------
// GEMM 1: oneDNN's sgemm (what TF's own CPU convolutions and MatMul run on).
// TF's pip build links oneDNN into libtensorflow_cc.so.2 but exports none of
// its C API; the one sgemm entry it exports is MklMatMulOp<float>::MklBlasGemm
// (kernels/cpu/fused_conv2d_gemm.h): row-major C[m, n] = op(A)[m, k] op(B)[k, n]
// through dnnl::threadpool_interop::sgemm. It is a non-virtual member that
// never reads `this` (TF 2.21's machine code was checked), so it is called as a
// plain function with a dummy object; it does not depend on
// TF_ENABLE_ONEDNN_OPTS. Single-threaded below an L2-sized footprint,
// otherwise threaded on ctx's intra-op pool (then it must not be called from a
// worker of that pool: the worker would wait for tasks queued behind itself).
// ---------------------------------------------------------------------------
using MklBlasGemmFn = void (*)(const void* self, OpKernelContext* ctx, bool transa, bool transb,
                               long m, long n, long k, const float* a, long lda, const float* b,
                               long ldb, float* c, long ldc);
// Stands in for the MklMatMulOp object; never read.
const char kUnusedSelf = 0;

void OneDnnGemm(MklBlasGemmFn gemm, OpKernelContext* ctx, int64_t m, int64_t n, int64_t k,
                const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  gemm(&kUnusedSelf, ctx, false, false, m, n, k, a, lda, b, ldb, c, ldc);
}

// A 3x2 by 2x4 product with leading dimensions wider than the rows: checks the
// layout and leading-dimension conventions and that nothing outside C is written.
bool OneDnnGemmPassesSelfTest(MklBlasGemmFn gemm, OpKernelContext* ctx) {
  constexpr int kM = 3, kN = 4, kK = 2, kLda = 3, kLdb = 5, kLdc = 6;
  float a[kM * kLda], b[kK * kLdb], c[kM * kLdc];
  for (int i = 0; i < kM * kLda; ++i) a[i] = static_cast<float>(i % 7) - 3.0f;
  for (int i = 0; i < kK * kLdb; ++i) b[i] = static_cast<float>(i % 5) + 1.0f;
  constexpr float kUntouched = 1234.5f;
  std::fill(c, c + kM * kLdc, kUntouched);
  OneDnnGemm(gemm, ctx, kM, kN, kK, a, kLda, b, kLdb, c, kLdc);
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < kLdc; ++j) {
      float expected = kUntouched;
      if (j < kN) {
        expected = 0.0f;
        for (int p = 0; p < kK; ++p) expected += a[i * kLda + p] * b[p * kLdb + j];
      }
      if (c[i * kLdc + j] != expected) return false;  // small integers: exact
    }
  }
  return true;
}

// The entry, resolved and self-tested once per process; nullptr (and one
// warning) when this TensorFlow build does not provide a working one.
MklBlasGemmFn FindOneDnnGemm(OpKernelContext* ctx) {
  static const MklBlasGemmFn found = [ctx]() -> MklBlasGemmFn {
    auto fn = reinterpret_cast<MklBlasGemmFn>(mo::find_mkl_blas_gemm());
    const char* why = "libtensorflow_cc.so.2 is not loaded or does not export "
                      "MklMatMulOp<float>::MklBlasGemm";
    if (fn != nullptr && !OneDnnGemmPassesSelfTest(fn, ctx)) {
      fn = nullptr;
      why = "its MklMatMulOp<float>::MklBlasGemm failed the self-test";
    }
    if (fn == nullptr) {
      LOG(WARNING) << "MetalOpsFusedConv2D: oneDNN's sgemm is not reachable in this TensorFlow "
                      "build ("
                   << why << "); using Eigen's contraction, which is slower";
    }
    return fn;
  }();
  return found;
}

// Which GEMM path the last MetalOpsFusedConv2D on the CPU took (for the tests).
enum class GemmPath : int { kNone = 0, kOneDnnTiled, kOneDnnChunked, kEigen };
std::atomic<int> last_gemm_path{static_cast<int>(GemmPath::kNone)};

int64_t L2CacheBytes() {
  static const int64_t l2_bytes = Eigen::internal::CacheSizes().m_l2;
  return l2_bytes;
}

// Fixed-size shards of one work item. SchedulingParams::Fixed is TF 2.20+;
// TF 2.19 (the macOS pin, requirements-macos.txt) has only the constructor.
tsl::thread::ThreadPool::SchedulingParams OneItemPerShard() {
  using Params = tsl::thread::ThreadPool::SchedulingParams;
#if TF_MAJOR_VERSION > 2 || (TF_MAJOR_VERSION == 2 && TF_MINOR_VERSION >= 20)
  return Params::Fixed(1);
#else
  return Params(tsl::thread::ThreadPool::SchedulingStrategy::kFixedBlockSize, std::nullopt, 1);
#endif
}

// Tiles of output pixels run in parallel on the intra-op pool, one
// single-threaded sgemm each, the output stage applied to the tile right after
// its GEMM, while it is still in L2. Patch rows are gathered into a per-worker
// buffer (none for 1x1 stride-1 convolutions).
void ConvOneDnnTiled(OpKernelContext* ctx, MklBlasGemmFn gemm, const ConvGeometry& g,
                     int64_t tile_rows, const float* input, const float* filter,
                     const FusedEpilogue& e, float* output) {
  const int64_t k = g.patch_size(), cout = g.out_depth, pixels = g.pixels();
  const bool direct = g.input_is_patch_matrix();
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  Tensor scratch;
  float* patches = nullptr;
  if (!direct) {
    const int64_t slots = workers->NumThreads() + 1;  // ids 0..NumThreads()
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT,
                                           TensorShape({slots * tile_rows * k}), &scratch));
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
      OneDnnGemm(gemm, ctx, rows, cout, k, a, k, filter, cout, c, cout);
      ApplyOutputStageBlock(c, e.bias, e.residual != nullptr ? e.residual + first * cout : nullptr,
                            rows, cout, cout, e.act, e.alpha);
    }
  };
  workers->ParallelForWithWorkerId(num_tiles, OneItemPerShard(), run_tiles);
}

// Filters too large for a single-threaded tile: one threaded sgemm (called
// from the kernel's own thread, as TF's MatMul does) per chunk of output pixels
// whose patch rows fit a ~16 MiB buffer (all pixels at once for 1x1 stride-1
// convolutions), then a parallel output stage over the chunk.
void ConvOneDnnChunked(OpKernelContext* ctx, MklBlasGemmFn gemm, const ConvGeometry& g,
                       const float* input, const float* filter, const FusedEpilogue& e,
                       float* output) {
  const int64_t k = g.patch_size(), cout = g.out_depth, pixels = g.pixels();
  const bool direct = g.input_is_patch_matrix();
  const int64_t chunk =
      direct ? pixels : std::max<int64_t>(1, std::min<int64_t>(pixels, (int64_t{4} << 20) / k));
  Tensor scratch;
  float* patches = nullptr;
  if (!direct) {
    OP_REQUIRES_OK(ctx,
                   ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({chunk * k}), &scratch));
    patches = scratch.flat<float>().data();
  }
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  for (int64_t first = 0; first < pixels; first += chunk) {
    const int64_t rows = std::min(chunk, pixels - first);
    const float* a = input + first * k;
    if (!direct) {
      workers->ParallelFor(rows, /*cost_per_unit=*/k, [&](int64_t begin, int64_t end) {
        GatherPatchRows(g, input, first + begin, end - begin, patches + begin * k);
      });
      a = patches;
    }
    float* c = output + first * cout;
    OneDnnGemm(gemm, ctx, rows, cout, k, a, k, filter, cout, c, cout);
    const float* res = e.residual != nullptr ? e.residual + first * cout : nullptr;
    workers->ParallelFor(rows, /*cost_per_unit=*/4 * cout, [&](int64_t begin, int64_t end) {
      ApplyOutputStageBlock(c + begin * cout, e.bias, res != nullptr ? res + begin * cout : nullptr,
                            end - begin, cout, cout, e.act, e.alpha);
    });
  }
}

// ---------------------------------------------------------------------------
// GEMM 2 (fallback): Eigen's tensor contraction with an Eigen *output kernel*,
// which the contraction calls on each output block right after computing it.
// Eigen evaluates a row-major contraction as the column-major product with
// swapped arguments, so an output block is rows = output channels
// [i, i + num_rows) and columns = output pixels, each column num_rows
// contiguous floats of the NHWC output.
// ---------------------------------------------------------------------------
struct FusedOutputKernel {
  FusedEpilogue e;
  const float* out_base;  // start of the output (chunk)
  int64_t ld;             // output channels: the distance between pixels

  template <typename OutputMapper, typename Index>
  EIGEN_ALWAYS_INLINE void operator()(const OutputMapper& output_mapper,
                                      const Eigen::TensorContractionParams& params, Index i,
                                      Index /*j*/, Index num_rows, Index num_cols) const {
    eigen_assert(params.swapped_arguments);
    float* out = &output_mapper(0, 0);
    ApplyOutputStageBlock(out, e.bias != nullptr ? e.bias + i : nullptr,
                          e.residual != nullptr ? e.residual + (out - out_base) : nullptr,
                          num_cols, num_rows, ld, e.act, e.alpha);
  }
};

// out[rows, Cout] = patches[rows, K] x filter[K, Cout], output stage fused.
void EigenContract(const CPUDevice& d, const float* lhs, int64_t rows, int64_t k,
                   const float* filter, int64_t cout, const FusedEpilogue& e, float* out) {
  using Index = Eigen::Index;
  const FusedOutputKernel ok{e, out, cout};
  Eigen::TensorMap<Eigen::Tensor<const float, 2, Eigen::RowMajor>, Eigen::Unaligned> a(lhs, rows, k);
  Eigen::TensorMap<Eigen::Tensor<const float, 2, Eigen::RowMajor>, Eigen::Unaligned> f(filter, k,
                                                                                      cout);
  Eigen::TensorMap<Eigen::Tensor<float, 2, Eigen::RowMajor>, Eigen::Unaligned> o(out, rows, cout);
  Eigen::array<Eigen::IndexPair<Index>, 1> dims{Eigen::IndexPair<Index>(1, 0)};
  o.device(d) = a.contract(f, dims, ok);
}

// Chunks of output pixels whose patch rows fit a ~16 MiB scratch buffer, each
// one Eigen contraction on the intra-op pool.
void ConvEigen(OpKernelContext* ctx, const ConvGeometry& g, const float* input,
               const float* filter, const FusedEpilogue& e, float* output) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  const int64_t k = g.patch_size(), cout = g.out_depth, pixels = g.pixels();
  if (g.input_is_patch_matrix()) {
    EigenContract(d, input, pixels, k, filter, cout, e, output);
    return;
  }
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(pixels, (int64_t{4} << 20) / k));
  Tensor scratch;
  OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({chunk * k}), &scratch));
  float* patches = scratch.flat<float>().data();
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  for (int64_t first = 0; first < pixels; first += chunk) {
    const int64_t rows = std::min(chunk, pixels - first);
    workers->ParallelFor(rows, /*cost_per_unit=*/k, [&](int64_t begin, int64_t end) {
      GatherPatchRows(g, input, first + begin, end - begin, patches + begin * k);
    });
    FusedEpilogue chunk_e = e;
    if (e.residual != nullptr) chunk_e.residual = e.residual + first * cout;
    EigenContract(d, patches, rows, k, filter, cout, chunk_e, output + first * cout);
  }
}

void LaunchConv(OpKernelContext* ctx, const ConvGeometry& g, const float* input,
                const float* filter, const FusedEpilogue& e, float* output) {
  const char* choice = std::getenv("METAL_OPS_CONV_GEMM");
  const bool force_eigen = choice != nullptr && std::strcmp(choice, "eigen") == 0;
  MklBlasGemmFn gemm = force_eigen ? nullptr : FindOneDnnGemm(ctx);
  if (gemm == nullptr) {
    last_gemm_path = static_cast<int>(GemmPath::kEigen);
    ConvEigen(ctx, g, input, filter, e, output);
    return;
  }
  const int64_t k = g.patch_size(), cout = g.out_depth, pixels = g.pixels();
  if (mo::fused_conv_uses_tiles(k, cout, pixels, L2CacheBytes())) {
    // As large as the single-threaded budget allows, but at least one tile per thread.
    const int64_t threads = ctx->device()->tensorflow_cpu_worker_threads()->num_threads;
    const int64_t tile_rows = std::max<int64_t>(
        1, std::min(mo::single_threaded_gemm_max_rows(k, cout, L2CacheBytes()),
                    (pixels + threads - 1) / threads));
    last_gemm_path = static_cast<int>(GemmPath::kOneDnnTiled);
    ConvOneDnnTiled(ctx, gemm, g, tile_rows, input, filter, e, output);
  } else {
    last_gemm_path = static_cast<int>(GemmPath::kOneDnnChunked);
    ConvOneDnnChunked(ctx, gemm, g, input, filter, e, output);
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
    AdviseHugePages(out, output->TotalBytes(), /*collapse=*/false);

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
    LaunchConv(ctx, g, input.flat<float>().data(), filter.flat<float>().data(),
               FusedEpilogue{bias, residual, act_, alpha_}, out);
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
    // In place over the incoming gradients when nothing else holds them (as
    // TF's ReluGrad does): no fresh buffer to fault in. Element k reads
    // gradients[k] before writing backprops[k], so aliasing is safe.
    Tensor* backprops = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, grads.shape(), &backprops));
    const int64_t n = grads.NumElements();
    if (n == 0) return;
    const float* g = grads.flat<float>().data();
    const float* y = outputs.flat<float>().data();
    float* dz = backprops->flat<float>().data();
    AdviseHugePages(dz, backprops->TotalBytes(), /*collapse=*/false);
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
}  // namespace mo

// The GEMM path of the last MetalOpsFusedConv2D computed on the CPU in this
// process: "none", "onednn_tiled", "onednn_chunked" or "eigen" (read by the tests).
extern "C" const char* MetalOpsFusedConv2DLastGemmPath() {
  static const char* const kNames[] = {"none", "onednn_tiled", "onednn_chunked", "eigen"};
  return kNames[mo::last_gemm_path.load()];
}

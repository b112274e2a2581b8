// Where MetalOpsFusedConv2D's CPU kernel gets its GEMM, and which convolutions
// it computes in cache-sized tiles: shared by the kernel
// (kernels/cpu/fused_conv2d_kernels.cc), which acts on it, and the Grappler
// plugin (grappler/fusion_plugin.cc), which fuses only the convolutions the
// kernel runs faster than TensorFlow. CPU only (not included by CUDA or Metal code).
#ifndef METAL_OPS_KERNELS_CPU_FUSED_CONV2D_GEMM_H_
#define METAL_OPS_KERNELS_CPU_FUSED_CONV2D_GEMM_H_

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>

namespace mo {

// oneDNN's sgemm as TensorFlow's pip build exports it: the helper of the
// _MklMatMul kernel, MklMatMulOp<ThreadPoolDevice, float, false>::MklBlasGemm
// (tensorflow/core/kernels/mkl/mkl_matmul_op.cc), in libtensorflow_cc.so.2.
// Its C++ signature, which the mangled name encodes, is
//   (OpKernelContext* ctx, bool transa, bool transb, long m, long n, long k,
//    const float* a, long lda, const float* b, long ldb, float* c, long ldc).
constexpr char kMklBlasGemmSymbol[] =
    "_ZN10tensorflow11MklMatMulOpIN5Eigen16ThreadPoolDeviceEfLb0EE11MklBlasGemmEPNS_"
    "15OpKernelContextEbblllPKflS7_lPfl";

// The entry's address in the already loaded libtensorflow_cc.so.2, or nullptr
// (another TF build, macOS, or TF not loaded: RTLD_NOLOAD never loads it).
inline void* find_mkl_blas_gemm() {
  void* lib = dlopen("libtensorflow_cc.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  void* sym = dlsym(lib, kMklBlasGemmSymbol);
  dlclose(lib);  // TensorFlow keeps its own reference
  return sym;
}

// MklBlasGemm runs single-threaded (no thread pool, ctx untouched) when
// 4 * (m*n + k*(m+n)) bytes are under 1.01x the L2 size (as
// Eigen::internal::CacheSizes reports it), and on ctx's intra-op pool
// otherwise. The kernel calls it from that pool's workers, one output tile
// each, so a tile must stay single-threaded: tiles are sized for half that
// budget. Returns the most output rows a tile of A[m, k] x B[k, n] can have
// (negative when even B alone does not fit).
inline int64_t single_threaded_gemm_max_rows(int64_t k, int64_t n, int64_t l2_bytes) {
  const int64_t budget_floats = l2_bytes / 2 / static_cast<int64_t>(sizeof(float));
  return (budget_floats - k * n) / (k + n);
}

// Tiles smaller than this are not worth a GEMM call each; filters that allow
// only smaller ones run as threaded GEMMs over chunks of pixels instead.
constexpr int64_t kMinTileRows = 64;

// Whether a convolution with a [k = KH*KW*Cin, n = Cout] filter matrix and
// `pixels` output pixels (negative: unknown) runs in single-threaded tiles.
inline bool fused_conv_uses_tiles(int64_t k, int64_t n, int64_t pixels, int64_t l2_bytes) {
  const int64_t min_rows = pixels >= 0 ? std::min(kMinTileRows, pixels) : kMinTileRows;
  return single_threaded_gemm_max_rows(k, n, l2_bytes) >= std::max<int64_t>(min_rows, 1);
}

}  // namespace mo

#endif  // METAL_OPS_KERNELS_CPU_FUSED_CONV2D_GEMM_H_

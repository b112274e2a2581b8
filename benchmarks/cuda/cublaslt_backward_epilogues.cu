// Why the FusedMLP layer path's ReLU backward is a kernel of its own
// (DreluProductTf32) rather than a cuBLASLt epilogue: times one width-128
// layer's backward GEMMs at N = 2^20 through cuBLAS (the layer path's calls)
// and through cuBLASLt with the epilogues that would fold the ReLU derivative
// (DRELU, DRELU_BGRAD) and the bias gradient (BGRADA) into them, exact and
// TF32, for several workspace limits. Each cuBLASLt case is set up once (its
// descriptors and the heuristic's first algorithm) and only the matmuls are
// timed, as a caller that caches its plans would run them. Build and run on
// a GPU machine (one line):
//   nvcc -O2 -o /tmp/cublaslt_backward_epilogues benchmarks/cuda/cublaslt_backward_epilogues.cu
//       -lcublasLt -lcublas && /tmp/cublaslt_backward_epilogues
// The figures and what they decided: docs/FUSED_MLP_GPU.md ("The layer path").
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void Check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cuBLAS status %d\n", what, static_cast<int>(e));
    std::exit(1);
  }
}

constexpr int kWarmup = 3, kTimed = 20;

// Mean ms per call of f() over kTimed back-to-back calls on `stream`.
template <typename F>
float TimeIt(cudaStream_t stream, F f) {
  for (int i = 0; i < kWarmup; ++i) f();
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "cudaEventCreate");
  Check(cudaEventCreate(&b), "cudaEventCreate");
  Check(cudaEventRecord(a, stream), "cudaEventRecord");
  for (int i = 0; i < kTimed; ++i) f();
  Check(cudaEventRecord(b, stream), "cudaEventRecord");
  Check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  Check(cudaEventDestroy(a), "cudaEventDestroy");
  Check(cudaEventDestroy(b), "cudaEventDestroy");
  return ms / kTimed;
}

// Values in [-1, 1) from the index, so the GEMMs do not run on zeros.
__global__ void Fill(float* p, int64_t n, uint32_t salt) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = static_cast<float>(h & 0xFFFFFF) / 8388608.0f - 1.0f;
  }
}

// One column-major cuBLASLt matmul D[md, nd] = op(A) op(B) with an epilogue,
// its descriptors and algorithm chosen once.
class LtCase {
 public:
  LtCase(cublasLtHandle_t lt, cublasComputeType_t compute, bool ta, bool tb, int64_t md, int64_t nd, int64_t k,
         int64_t lda, int64_t ldb, int64_t ldd, cublasLtEpilogue_t epilogue, void* bias, void* aux, int64_t aux_ld,
         size_t workspace_limit)
      : lt_(lt) {
    Check(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    Check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)), "TRANSA");
    Check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)), "TRANSB");
    Check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
          "EPILOGUE");
    if (bias != nullptr) {
      Check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
            "BIAS_POINTER");
    }
    if (aux != nullptr) {
      Check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
            "EPILOGUE_AUX_POINTER");
      Check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)),
            "EPILOGUE_AUX_LD");
    }
    Check(ta ? cublasLtMatrixLayoutCreate(&a_, CUDA_R_32F, k, md, lda)
             : cublasLtMatrixLayoutCreate(&a_, CUDA_R_32F, md, k, lda), "layout A");
    Check(tb ? cublasLtMatrixLayoutCreate(&b_, CUDA_R_32F, nd, k, ldb)
             : cublasLtMatrixLayoutCreate(&b_, CUDA_R_32F, k, nd, ldb), "layout B");
    Check(cublasLtMatrixLayoutCreate(&d_, CUDA_R_32F, md, nd, ldd), "layout D");
    cublasLtMatmulPreference_t pref;
    Check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    Check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_limit,
                                               sizeof(workspace_limit)), "MAX_WORKSPACE_BYTES");
    int found = 0;
    // No algorithm is an answer here (the case is reported as such), not an error.
    if (cublasLtMatmulAlgoGetHeuristic(lt_, desc_, a_, b_, d_, d_, pref, 1, &heuristic_, &found) !=
        CUBLAS_STATUS_SUCCESS) {
      found = 0;
    }
    found_ = found > 0;
    Check(cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy");
  }
  ~LtCase() {
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(d_);
    cublasLtMatmulDescDestroy(desc_);
  }
  LtCase(const LtCase&) = delete;
  LtCase& operator=(const LtCase&) = delete;

  bool found() const { return found_; }
  size_t workspace_used() const { return heuristic_.workspaceSize; }

  void Run(const float* a, const float* b, float* d, void* workspace, cudaStream_t stream) const {
    const float one = 1.0f, zero = 0.0f;
    Check(cublasLtMatmul(lt_, desc_, &one, a, a_, b, b_, &zero, d, d_, d, d_, &heuristic_.algo, workspace,
                         heuristic_.workspaceSize, stream), "cublasLtMatmul");
  }

 private:
  cublasLtHandle_t lt_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_ = {};
  bool found_ = false;
};

}  // namespace

int main() {
  constexpr int64_t kN = 1 << 20, kW = 128;
  constexpr size_t kMaxWorkspace = 64 << 20;
  int dev = 0;
  cudaDeviceProp prop;
  Check(cudaGetDevice(&dev), "cudaGetDevice");
  Check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  int runtime = 0, sm_khz = 0;
  Check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  Check(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, dev), "cudaDeviceGetAttribute");
  std::printf("# %s, %d MHz max SM clock, CUDA runtime %d, cuBLASLt %zu; width %lld, N = %lld, mean of %d launches "
              "after %d warm-ups\n", prop.name, sm_khz / 1000, runtime, cublasLtGetVersion(),
              static_cast<long long>(kW), static_cast<long long>(kN), kTimed, kWarmup);

  cublasLtHandle_t lt;
  cublasHandle_t blas;
  cudaStream_t stream;
  Check(cublasLtCreate(&lt), "cublasLtCreate");
  Check(cublasCreate(&blas), "cublasCreate");
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  Check(cublasSetStream(blas, stream), "cublasSetStream");

  float *h, *dz, *below, *dw, *db, *ones, *w;
  void *mask, *workspace;
  Check(cudaMalloc(&h, kN * kW * 4), "cudaMalloc");
  Check(cudaMalloc(&dz, kN * kW * 4), "cudaMalloc");
  Check(cudaMalloc(&below, kN * kW * 4), "cudaMalloc");
  Check(cudaMalloc(&dw, kW * kW * 4), "cudaMalloc");
  Check(cudaMalloc(&db, kW * 4), "cudaMalloc");
  Check(cudaMalloc(&ones, kN * 4), "cudaMalloc");
  Check(cudaMalloc(&w, kW * kW * 4), "cudaMalloc");
  Check(cudaMalloc(&mask, kN * kW / 8), "cudaMalloc");  // DRELU's bit mask, one bit per element
  Check(cudaMalloc(&workspace, kMaxWorkspace), "cudaMalloc");
  Fill<<<1024, 256, 0, stream>>>(h, kN * kW, 1u);
  Fill<<<1024, 256, 0, stream>>>(dz, kN * kW, 2u);
  Fill<<<64, 256, 0, stream>>>(w, kW * kW, 3u);
  Check(cudaGetLastError(), "Fill launch");
  Check(cudaMemsetAsync(mask, 0x5A, kN * kW / 8, stream), "cudaMemsetAsync");
  {
    float* host_ones = static_cast<float*>(std::malloc(kN * 4));
    for (int64_t i = 0; i < kN; ++i) host_ones[i] = 1.0f;
    Check(cudaMemcpy(ones, host_ones, kN * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    std::free(host_ones);
  }
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  for (int tf32 = 0; tf32 < 2; ++tf32) {
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    Check(cublasSetMathMode(blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    const char* tag = tf32 ? "TF32" : "32F ";
    const float one = 1.0f, zero = 0.0f;
    // Row-major dW[W, W] = h^T dz is column-major dW^T = dz h^T: sgemm(N, T, W, W, N, dz, W, h, W).
    std::printf("%s classic wgrad       %.3f ms\n", tag, TimeIt(stream, [&] {
      Check(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, kW, kW, kN, &one, dz, kW, h, kW, &zero, dw, kW), "wgrad");
    }));
    std::printf("%s classic db (ones)   %.3f ms\n", tag, TimeIt(stream, [&] {
      Check(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kW, 1, kN, &one, dz, kW, ones, kN, &zero, db, kW), "db");
    }));
    std::printf("%s classic below       %.3f ms\n", tag, TimeIt(stream, [&] {
      Check(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, kW, kN, kW, &one, w, kW, dz, kW, &zero, below, kW), "below");
    }));
    for (size_t limit : {size_t(0), size_t(4) << 20, size_t(32) << 20}) {
      struct Spec {
        const char* name;
        bool wgrad;  // dW (with BGRADA: db) or the product below (with DRELU: the derivative)
        cublasLtEpilogue_t epilogue;
      };
      for (const Spec& c : {Spec{"wgrad", true, CUBLASLT_EPILOGUE_DEFAULT},
                            Spec{"wgrad+BGRADA", true, CUBLASLT_EPILOGUE_BGRADA},
                            Spec{"below+DRELU", false, CUBLASLT_EPILOGUE_DRELU},
                            Spec{"below+DRELU_BGRAD", false, CUBLASLT_EPILOGUE_DRELU_BGRAD}}) {
        const bool bias = c.epilogue == CUBLASLT_EPILOGUE_BGRADA || c.epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD;
        const bool aux = c.epilogue == CUBLASLT_EPILOGUE_DRELU || c.epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD;
        const LtCase lt_case = c.wgrad ? LtCase(lt, compute, false, true, kW, kW, kN, kW, kW, kW, c.epilogue,
                                                bias ? db : nullptr, nullptr, 0, limit)
                                       : LtCase(lt, compute, true, false, kW, kN, kW, kW, kW, kW, c.epilogue,
                                                bias ? db : nullptr, aux ? mask : nullptr, kW, limit);
        if (!lt_case.found()) {
          std::printf("%s lt %s ws<=%zu  no algorithm\n", tag, c.name, limit);
          continue;
        }
        const float ms = TimeIt(stream, [&] {
          if (c.wgrad) {
            lt_case.Run(dz, h, dw, workspace, stream);
          } else {
            lt_case.Run(w, dz, below, workspace, stream);
          }
        });
        std::printf("%s lt %s ws<=%zu  %.3f ms used %zu\n", tag, c.name, limit, ms, lt_case.workspace_used());
      }
    }
  }
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  for (void* p : {static_cast<void*>(h), static_cast<void*>(dz), static_cast<void*>(below), static_cast<void*>(dw),
                  static_cast<void*>(db), static_cast<void*>(ones), static_cast<void*>(w), mask, workspace}) {
    Check(cudaFree(p), "cudaFree");
  }
  Check(cublasDestroy(blas), "cublasDestroy");
  Check(cublasLtDestroy(lt), "cublasLtDestroy");
  Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return 0;
}

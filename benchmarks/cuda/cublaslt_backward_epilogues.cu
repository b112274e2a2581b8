// Why the FusedMLP layer path's ReLU backward is a kernel of its own
// (DreluProductTf32) rather than a cuBLASLt epilogue: times one width-128
// layer's backward GEMMs at N = 2^20 through cuBLAS (the layer path's calls)
// and through cuBLASLt with the epilogues that would fold the ReLU derivative
// (DRELU, DRELU_BGRAD) and the bias gradient (BGRADA) into them, exact and
// TF32, for several workspace limits. Build and run on a GPU machine:
//   nvcc -O1 -o /tmp/cublaslt_backward_epilogues benchmarks/cuda/cublaslt_backward_epilogues.cu
//       -lcublasLt -lcublas && /tmp/cublaslt_backward_epilogues   (one line)
// Results: benchmarks/results/cublaslt_backward_epilogues_h100.txt; docs/FUSED_MLP_GPU.md.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cstdio>
#include <cuda_runtime.h>
#include <functional>
cublasLtHandle_t lt; cublasHandle_t hb; cudaStream_t stream;
void* wsbuf; 
float timeit(std::function<void()> f) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f();
  cudaEventRecord(a, stream);
  for (int i = 0; i < 20; ++i) f();
  cudaEventRecord(b, stream); cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b); return ms / 20;
}
// column-major D[rows_d, cols_d] = op(A) op(B), cublasLt
bool LtRun(cublasComputeType_t ct, bool ta, bool tb, int64_t md, int64_t nd, int64_t k, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* D, int64_t ldd, cublasLtEpilogue_t e, void* bias, void* aux, int64_t auxld,
           size_t wsb, size_t* used) {
  cublasLtMatmulDesc_t d; cublasLtMatmulDescCreate(&d, ct, CUDA_R_32F);
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa));
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob));
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
  if (bias) cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
  if (aux) { cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxld, sizeof(auxld)); }
  cublasLtMatrixLayout_t la, lb, lc;
  if (ta) cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, md, lda); else cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, md, k, lda);
  if (tb) cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, nd, k, ldb); else cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, nd, ldb);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, md, nd, ldd);
  cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
  cublasLtMatmulHeuristicResult_t r; int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 1, &r, &found);
  if (!found) return false;
  *used = r.workspaceSize;
  float one = 1, zero = 0;
  cublasLtMatmul(lt, d, &one, A, la, B, lb, &zero, D, lc, D, lc, &r.algo, wsbuf, r.workspaceSize, stream);
  return true;
}
int main() {
  cublasLtCreate(&lt); cublasCreate(&hb); cudaStreamCreate(&stream); cublasSetStream(hb, stream);
  const int64_t N = 1 << 20, W = 128;
  float *h, *dz, *below, *dw, *db, *ones, *w; void* mask;
  cudaMalloc(&h, N * W * 4); cudaMalloc(&dz, N * W * 4); cudaMalloc(&below, N * W * 4); cudaMalloc(&dw, W * W * 4);
  cudaMalloc(&db, W * 4); cudaMalloc(&ones, N * 4); cudaMalloc(&w, W * W * 4); cudaMalloc(&mask, N * W / 8);
  cudaMalloc(&wsbuf, 64 << 20);
  cudaMemset(h, 0, N * W * 4); cudaMemset(dz, 0, N * W * 4); cudaMemset(ones, 0, N * 4);
  for (int tf = 0; tf < 2; ++tf) {
    cublasComputeType_t ct = tf ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasSetMathMode(hb, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    float one = 1, zero = 0; size_t used = 0;
    const char* tag = tf ? "TF32" : "32F ";
    // row-major dW[W,W] = h^T[W,N] dz[N,W]: col-major dW^T = dz^T h : sgemm(N, T, W, W, N, dz, W, h, W)
    printf("%s classic wgrad       %.3f ms\n", tag, timeit([&] { cublasSgemm(hb, CUBLAS_OP_N, CUBLAS_OP_T, W, W, N, &one, dz, W, h, W, &zero, dw, W); }));
    printf("%s classic db (ones)   %.3f ms\n", tag, timeit([&] { cublasSgemm(hb, CUBLAS_OP_N, CUBLAS_OP_N, W, 1, N, &one, dz, W, ones, N, &zero, db, W); }));
    printf("%s classic below       %.3f ms\n", tag, timeit([&] { cublasSgemm(hb, CUBLAS_OP_T, CUBLAS_OP_N, W, N, W, &one, w, W, dz, W, &zero, below, W); }));
    for (size_t wsb : {size_t(0), size_t(4 << 20), size_t(32 << 20)}) {
      float t;
      t = timeit([&] { LtRun(ct, false, true, W, W, N, dz, W, h, W, dw, W, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, wsb, &used); });
      printf("%s lt wgrad ws<=%zu  %.3f ms used %zu\n", tag, wsb, t, used);
      bool ok = LtRun(ct, false, true, W, W, N, dz, W, h, W, dw, W, CUBLASLT_EPILOGUE_BGRADA, db, nullptr, 0, wsb, &used);
      if (ok) { t = timeit([&] { LtRun(ct, false, true, W, W, N, dz, W, h, W, dw, W, CUBLASLT_EPILOGUE_BGRADA, db, nullptr, 0, wsb, &used); });
        printf("%s lt wgrad+BGRADA ws<=%zu  %.3f ms used %zu\n", tag, wsb, t, used); }
      ok = LtRun(ct, true, false, W, N, W, w, W, dz, W, below, W, CUBLASLT_EPILOGUE_DRELU, nullptr, mask, W, wsb, &used);
      if (ok) { t = timeit([&] { LtRun(ct, true, false, W, N, W, w, W, dz, W, below, W, CUBLASLT_EPILOGUE_DRELU, nullptr, mask, W, wsb, &used); });
        printf("%s lt below+DRELU ws<=%zu  %.3f ms used %zu\n", tag, wsb, t, used); }
      ok = LtRun(ct, true, false, W, N, W, w, W, dz, W, below, W, CUBLASLT_EPILOGUE_DRELU_BGRAD, db, mask, W, wsb, &used);
      if (ok) { t = timeit([&] { LtRun(ct, true, false, W, N, W, w, W, dz, W, below, W, CUBLASLT_EPILOGUE_DRELU_BGRAD, db, mask, W, wsb, &used); });
        printf("%s lt below+DRELU_BGRAD ws<=%zu  %.3f ms used %zu\n", tag, wsb, t, used); }
    }
  }
  cudaError_t e = cudaDeviceSynchronize(); printf("sync: %s\n", cudaGetErrorString(e));
  return 0;
}

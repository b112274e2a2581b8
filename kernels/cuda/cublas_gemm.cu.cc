// cuBLAS opened at run time and a pool of its handles (kernels/cuda/cublas_gemm.h).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/cublas_gemm.h"

namespace mo {
namespace cuda {
namespace {

#define MO_CUBLAS_STR2(x) #x
#define MO_CUBLAS_STR(x) MO_CUBLAS_STR2(x)
// The soname of the cuBLAS whose headers this file is compiled with (its
// functions' types below come from them).
constexpr const char* kCublasSoname = "libcublas.so." MO_CUBLAS_STR(CUBLAS_VER_MAJOR);
constexpr const char* kCublasLtSoname = "libcublasLt.so." MO_CUBLAS_STR(CUBLAS_VER_MAJOR);
#undef MO_CUBLAS_STR
#undef MO_CUBLAS_STR2

// The functions used here, X(member, function): cuBLAS's, and cuBLASLt's (the
// epilogue GEMM). Each member is typed by the library's own declaration and
// bound to the symbol of the function's name.
#define MO_CUBLAS_FUNCTIONS(X)                     \
  X(create, cublasCreate_v2)                       \
  X(set_stream, cublasSetStream_v2)                \
  X(set_math_mode, cublasSetMathMode)              \
  X(sgemm, cublasSgemm_v2)                         \
  X(status_string, cublasGetStatusString)
#define MO_CUBLASLT_FUNCTIONS(X)                   \
  X(create, cublasLtCreate)                        \
  X(desc_create, cublasLtMatmulDescCreate)         \
  X(desc_destroy, cublasLtMatmulDescDestroy)       \
  X(desc_set, cublasLtMatmulDescSetAttribute)      \
  X(layout_create, cublasLtMatrixLayoutCreate)     \
  X(layout_destroy, cublasLtMatrixLayoutDestroy)   \
  X(pref_create, cublasLtMatmulPreferenceCreate)   \
  X(pref_destroy, cublasLtMatmulPreferenceDestroy) \
  X(heuristic, cublasLtMatmulAlgoGetHeuristic)     \
  X(matmul, cublasLtMatmul)
#define MO_CUBLAS_MEMBER(member, function) decltype(&function) member = nullptr;
// In the loaders below, over their lib, a, missing and ok.
#define MO_CUBLAS_BIND(member, function) ok = Bind(lib, #function, &a->member, &missing) && ok;

struct CublasApi {
  MO_CUBLAS_FUNCTIONS(MO_CUBLAS_MEMBER)
  std::string error;  // why cuBLAS is unusable; empty when it loaded
};

struct CublasLtApi {
  MO_CUBLASLT_FUNCTIONS(MO_CUBLAS_MEMBER)
  bool ok = false;  // every function bound
};

// Binds *f to `name` in lib; a missing name is appended to *missing.
template <typename F>
bool Bind(void* lib, const char* name, F* f, std::string* missing) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *f != nullptr;
}

// Opened once per process and never closed; missing cuBLASLt only disables
// the epilogue GEMM (its callers fall back to cuBLAS and a pass of their own).
const CublasLtApi& CublasLt() {
  static const CublasLtApi* const api = [] {
    auto* a = new CublasLtApi;
    void* lib = dlopen(kCublasLtSoname, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return a;
    std::string missing;
    bool ok = true;
    MO_CUBLASLT_FUNCTIONS(MO_CUBLAS_BIND)
    a->ok = ok;
    return a;
  }();
  return *api;
}

// Opened once per process and never closed (its handles outlive any caller).
const CublasApi& Cublas() {
  static const CublasApi* const api = [] {
    auto* a = new CublasApi;
    void* lib = dlopen(kCublasSoname, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      a->error = std::string(kCublasSoname) + " could not be opened (" + (why != nullptr ? why : "no reason given") +
                 "): the op's GPU kernel needs NVIDIA's cuBLAS, which `pip install tensorflow[and-cuda]` "
                 "installs (nvidia-cublas-cu12); without it, place the op on the CPU";
      return a;
    }
    std::string missing;
    bool ok = true;
    MO_CUBLAS_FUNCTIONS(MO_CUBLAS_BIND)
    if (!ok) a->error = std::string(kCublasSoname) + " lacks " + missing;
    return a;
  }();
  return *api;
}

// A handle is bound to the device current at its creation; a stream's work is
// ordered, so handles used with one stream only never share cuBLAS's internal
// workspace between concurrent streams. Handles are never destroyed: destroying
// them at exit may come after the CUDA driver has shut down.
struct PooledHandle {
  int device;
  cudaStream_t stream;
  cublasHandle_t handle;
  cublasLtHandle_t lt;  // created on first use of the epilogue GEMM
  bool busy;
};

std::mutex& PoolMutex() {
  static std::mutex* const mutex = new std::mutex;
  return *mutex;
}

std::vector<PooledHandle>& Pool() {
  static std::vector<PooledHandle>* const pool = new std::vector<PooledHandle>;
  return *pool;
}

// A handle of the current device for `stream`, held by one caller at a time.
class HandleLease {
 public:
  ~HandleLease() {
    if (slot_ >= 0) {
      std::lock_guard<std::mutex> lock(PoolMutex());
      Pool()[slot_].busy = false;
    }
  }

  GpuStatus Acquire(const CublasApi& api, cudaStream_t stream) {
    int device = 0;
    const GpuStatus s = CudaCall("cudaGetDevice", cudaGetDevice(&device));
    if (!s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(PoolMutex());
      std::vector<PooledHandle>& pool = Pool();
      for (size_t i = 0; i < pool.size(); ++i) {
        if (!pool[i].busy && pool[i].device == device && pool[i].stream == stream) {
          pool[i].busy = true;
          slot_ = static_cast<int64_t>(i);
          handle_ = pool[i].handle;
          return GpuStatus{};
        }
      }
    }
    cublasHandle_t handle = nullptr;
    const cublasStatus_t created = api.create(&handle);
    if (created != CUBLAS_STATUS_SUCCESS) return GpuStatus{"cublasCreate", api.status_string(created)};
    std::lock_guard<std::mutex> lock(PoolMutex());
    Pool().push_back(PooledHandle{device, stream, handle, nullptr, true});
    slot_ = static_cast<int64_t>(Pool().size()) - 1;
    handle_ = handle;
    return GpuStatus{};
  }

  cublasHandle_t handle() const { return handle_; }

  // The slot's cuBLASLt handle, created on first use (nullptr if that fails).
  cublasLtHandle_t lt(const CublasLtApi& api) {
    std::lock_guard<std::mutex> lock(PoolMutex());
    cublasLtHandle_t& lt = Pool()[slot_].lt;
    if (lt == nullptr && api.create(&lt) != CUBLAS_STATUS_SUCCESS) lt = nullptr;
    return lt;
  }

 private:
  int64_t slot_ = -1;
  cublasHandle_t handle_ = nullptr;
};

// Destroys cuBLASLt descriptors when the call returns.
struct LtDescriptors {
  const CublasLtApi& api;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layouts[3] = {nullptr, nullptr, nullptr};
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (desc != nullptr) api.desc_destroy(desc);
    for (cublasLtMatrixLayout_t l : layouts) {
      if (l != nullptr) api.layout_destroy(l);
    }
    if (pref != nullptr) api.pref_destroy(pref);
  }
};

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace

const char* CublasSoname() { return kCublasSoname; }

GpuStatus RowMajorSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                        const float* b, int64_t ldb, float* c, int64_t ldc, bool allow_tf32, cudaStream_t stream) {
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(lda) || !FitsInt(ldb) || !FitsInt(ldc)) {
    return GpuStatus{"cublasSgemm", "a matrix dimension or leading dimension is negative or exceeds 2^31 - 1"};
  }
  if (k == 0) return GpuStatus{"cublasSgemm", "k is 0 (the caller sets such a product to zero itself)"};
  if (m == 0 || n == 0) return GpuStatus{};
  const CublasApi& api = Cublas();
  if (!api.error.empty()) return GpuStatus{"opening cuBLAS", api.error.c_str()};
  HandleLease lease;
  GpuStatus s = lease.Acquire(api, stream);
  if (!s.ok()) return s;
  cublasStatus_t st = api.set_stream(lease.handle(), stream);
  if (st != CUBLAS_STATUS_SUCCESS) return GpuStatus{"cublasSetStream", api.status_string(st)};
  // CUBLAS_DEFAULT_MATH keeps float32 products (it never lowers the mantissa).
  st = api.set_math_mode(lease.handle(), allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return GpuStatus{"cublasSetMathMode", api.status_string(st)};
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
  // operands swap, and a stored row-major matrix is its transpose to cuBLAS,
  // so op(X)^T is the stored buffer as it is (OP_N) unless X is transposed.
  const float one = 1.0f, zero = 0.0f;
  st = api.sgemm(lease.handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                 static_cast<int>(n), static_cast<int>(m),
                 static_cast<int>(k), &one, b, static_cast<int>(ldb), a, static_cast<int>(lda), &zero, c,
                 static_cast<int>(ldc));
  if (st != CUBLAS_STATUS_SUCCESS) return GpuStatus{"cublasSgemm", api.status_string(st)};
  return GpuStatus{};
}

GpuStatus RowMajorSgemmEpilogue(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                                int64_t ldb, const float* bias, bool relu, float* c, int64_t ldc, bool allow_tf32,
                                cudaStream_t stream, bool* done) {
  *done = false;
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(lda) || !FitsInt(ldb) || !FitsInt(ldc) || k == 0 ||
      m == 0 || n == 0 || bias == nullptr) {
    return GpuStatus{};
  }
  const CublasApi& api = Cublas();
  const CublasLtApi& lt_api = CublasLt();
  if (!api.error.empty() || !lt_api.ok) return GpuStatus{};
  HandleLease lease;
  GpuStatus s = lease.Acquire(api, stream);
  if (!s.ok()) return s;
  cublasLtHandle_t lt = lease.lt(lt_api);
  if (lt == nullptr) return GpuStatus{};
  // Column-major, as cuBLAS sees the row-major operands: C^T [n, m] =
  // B^T [n, k] A^T [k, m], and the bias (one per column of C) is one per row
  // of C^T, which is what the epilogue adds.
  LtDescriptors d{lt_api};
  const cublasComputeType_t compute = allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  bool ok = lt_api.desc_create(&d.desc, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
            lt_api.desc_set(d.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) ==
                CUBLAS_STATUS_SUCCESS &&
            lt_api.desc_set(d.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) == CUBLAS_STATUS_SUCCESS &&
            lt_api.layout_create(&d.layouts[0], CUDA_R_32F, n, k, ldb) == CUBLAS_STATUS_SUCCESS &&
            lt_api.layout_create(&d.layouts[1], CUDA_R_32F, k, m, lda) == CUBLAS_STATUS_SUCCESS &&
            lt_api.layout_create(&d.layouts[2], CUDA_R_32F, n, m, ldc) == CUBLAS_STATUS_SUCCESS &&
            lt_api.pref_create(&d.pref) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return GpuStatus{};
  // No workspace: the preference's default maximum is 0 bytes.
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (lt_api.heuristic(lt, d.desc, d.layouts[0], d.layouts[1], d.layouts[2], d.layouts[2], d.pref, 1, &heuristic,
                       &found) != CUBLAS_STATUS_SUCCESS ||
      found == 0) {
    return GpuStatus{};
  }
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = lt_api.matmul(lt, d.desc, &one, b, d.layouts[0], a, d.layouts[1], &zero, c, d.layouts[2],
                                          c, d.layouts[2], &heuristic.algo, nullptr, 0, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return GpuStatus{"cublasLtMatmul", api.status_string(st)};
  *done = true;
  return GpuStatus{};
}

}  // namespace cuda
}  // namespace mo

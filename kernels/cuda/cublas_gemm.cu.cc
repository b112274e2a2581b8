// cuBLAS opened at run time and a pool of its handles (kernels/cuda/cublas_gemm.h).
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
#undef MO_CUBLAS_STR
#undef MO_CUBLAS_STR2

// The cuBLAS functions used here, typed by cuBLAS's own declarations.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string error;  // why cuBLAS is unusable; empty when it loaded
};

template <typename F>
bool Bind(void* lib, const char* name, F* f, std::string* missing) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *f != nullptr;
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
    bool ok = Bind(lib, "cublasCreate_v2", &a->create, &missing);
    ok = Bind(lib, "cublasSetStream_v2", &a->set_stream, &missing) && ok;
    ok = Bind(lib, "cublasSetMathMode", &a->set_math_mode, &missing) && ok;
    ok = Bind(lib, "cublasSgemm_v2", &a->sgemm, &missing) && ok;
    ok = Bind(lib, "cublasGetStatusString", &a->status_string, &missing) && ok;
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
    Pool().push_back(PooledHandle{device, stream, handle, true});
    slot_ = static_cast<int64_t>(Pool().size()) - 1;
    handle_ = handle;
    return GpuStatus{};
  }

  cublasHandle_t handle() const { return handle_; }

 private:
  int64_t slot_ = -1;
  cublasHandle_t handle_ = nullptr;
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

}  // namespace cuda
}  // namespace mo

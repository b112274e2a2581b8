// C ABI over tiny-cuda-nn's GridEncodingTemplated (the multiresolution hash
// encoding) for benchmarks/cuda/ab_hash_encode_tcnn.py. Built against a
// tiny-cuda-nn checkout given by TCNN_DIR (see benchmarks/cuda/build_tcnn_shim.sh);
// nothing of tiny-cuda-nn is kept here.
#include <tiny-cuda-nn/common.h>
#include <tiny-cuda-nn/encodings/grid.h>
#include <tiny-cuda-nn/gpu_matrix.h>
#include <tiny-cuda-nn/gpu_memory.h>

#include <cstdio>
#include <memory>
#include <stdexcept>

#include "tcnn_shim.h"

using namespace tcnn;

namespace {

struct GridBase {
  virtual ~GridBase() = default;
  virtual size_t n_params() const = 0;
  virtual void* params() = 0;
  virtual void* gradients() = 0;
  virtual void forward(const float* x, void* y, uint32_t n, int out_soa, cudaStream_t s) = 0;
  virtual void forward_backward(const float* x, void* y, const void* dy, uint32_t n, int out_soa,
                                cudaStream_t s) = 0;
};

// D = 3, F = 2, coherent-prime hash, linear interpolation: the standard NeRF
// grid, tiny-cuda-nn's defaults for "HashGrid".
template <typename T>
struct Grid final : GridBase {
  GridEncodingTemplated<T, 3, 2, HashType::CoherentPrime> enc;
  GPUMemory<T> params_, grads_;

  Grid(uint32_t levels, uint32_t log2_hashmap, uint32_t base_res, float per_level_scale)
      : enc(levels * 2, log2_hashmap, base_res, per_level_scale, false, InterpolationType::Linear,
            GridType::Hash, false) {
    params_.resize(enc.n_params());
    grads_.resize(enc.n_params());
    enc.set_params(params_.data(), params_.data(), grads_.data());
  }
  size_t n_params() const override { return enc.n_params(); }
  void* params() override { return params_.data(); }
  void* gradients() override { return grads_.data(); }
  // out_soa = 1: the output is [features, n] (tiny-cuda-nn's RM, which its
  // kernels write directly); 0: [n, features] (its CM, through a transpose).
  void forward(const float* x, void* y, uint32_t n, int out_soa, cudaStream_t s) override {
    GPUMatrixDynamic<float> in(const_cast<float*>(x), 3, n, CM);
    GPUMatrixDynamic<T> out(static_cast<T*>(y), enc.padded_output_width(), n, out_soa ? RM : CM);
    enc.forward(s, in, &out, false, false);
  }
  void forward_backward(const float* x, void* y, const void* dy, uint32_t n, int out_soa,
                        cudaStream_t s) override {
    const MatrixLayout l = out_soa ? RM : CM;
    GPUMatrixDynamic<float> in(const_cast<float*>(x), 3, n, CM);
    GPUMatrixDynamic<T> out(static_cast<T*>(y), enc.padded_output_width(), n, l);
    GPUMatrixDynamic<T> dout(static_cast<T*>(const_cast<void*>(dy)), enc.padded_output_width(), n, l);
    auto ctx = enc.forward(s, in, &out, false, false);
    enc.backward(s, *ctx, in, out, dout, nullptr, false, GradientMode::Overwrite);
  }
};

}  // namespace

extern "C" {

// dtype 0: float32 table, 1: float16. Returns null on failure (message on stderr).
void* tcnn_grid_create(int dtype, int levels, int log2_hashmap, int base_res, float per_level_scale) {
  return Guarded<void*>(__func__, nullptr, [&]() -> void* {
    if (dtype == 0) return new Grid<float>(levels, log2_hashmap, base_res, per_level_scale);
    return new Grid<__half>(levels, log2_hashmap, base_res, per_level_scale);
  });
}

long long tcnn_grid_n_params(void* h) { return static_cast<long long>(static_cast<GridBase*>(h)->n_params()); }
void* tcnn_grid_params(void* h) { return static_cast<GridBase*>(h)->params(); }
void* tcnn_grid_gradients(void* h) { return static_cast<GridBase*>(h)->gradients(); }

int tcnn_grid_forward(void* h, const void* x, void* y, int n, int out_soa, cudaStream_t s) {
  return Guarded(__func__, 1, [&] {
    static_cast<GridBase*>(h)->forward(static_cast<const float*>(x), y, n, out_soa, s);
    return 0;
  });
}

// Forward (training) then backward: the table gradient for dL/dy = dy, no input gradient.
int tcnn_grid_forward_backward(void* h, const void* x, void* y, const void* dy, int n, int out_soa,
                               cudaStream_t s) {
  return Guarded(__func__, 1, [&] {
    static_cast<GridBase*>(h)->forward_backward(static_cast<const float*>(x), y, dy, n, out_soa, s);
    return 0;
  });
}

void tcnn_grid_destroy(void* h) { delete static_cast<GridBase*>(h); }

}  // extern "C"

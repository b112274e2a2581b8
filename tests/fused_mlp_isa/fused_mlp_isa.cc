// kernels/fused_mlp/fused_mlp.h's CPU bodies behind a C ABI, so that tests/test_fused_mlp.py
// can build it for each instruction set (AVX-512, AVX2, the scalar fallback)
// and check every path against NumPy, whatever the library itself was built for.
#include <cstdint>

#define MO_CPU_BODIES  // fused_mlp.h's CPU bodies
#include "kernels/fused_mlp/fused_mlp.h"

namespace {

// Runs fn on `threads` contiguous shards, one after the other, in reverse
// order (a different schedule than one shard per thread, same partitions).
struct Shards {
  int threads;
  template <typename Fn>
  void operator()(int64_t units, const Fn& fn) const {
    for (int t = threads - 1; t >= 0; --t) fn(units * t / threads, units * (t + 1) / threads);
  }
};

}  // namespace

extern "C" const char* fused_mlp_isa() { return mo::simd::kIsa; }

// Forward then backward; hidden [L, n, width] is scratch the caller owns.
extern "C" void fused_mlp_isa_run(int64_t n, int in, int width, int hidden_layers, int out, int act, int out_act,
                                  float alpha, int threads, const float* x, const float* const* kernels,
                                  const float* const* biases, float* y, float* hidden, const float* dy, float* dx,
                                  float* const* dkernels, float* const* dbiases) {
  const mo::fused_mlp_cpu::Shape s{n, in, width, hidden_layers, out, act, out_act, alpha};
  mo::fused_mlp_cpu::Forward(s, {x, kernels, biases, y, hidden}, Shards{threads});
  mo::fused_mlp_cpu::Backward(s, {dy, x, y, hidden, kernels, dx, dkernels, dbiases}, Shards{threads});
}

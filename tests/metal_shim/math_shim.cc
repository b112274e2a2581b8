// platform.h's Metal math (expm1_f, log1p_f) and the activations built on it,
// compiled through the MSL shim: the branch of platform.h the GPU runs. Driven
// by tests/test_metal_math_shim.py.
#include <cstdint>

#include "tests/metal_shim/msl_shim.h"
#include "kernels/common/activations.h"

extern "C" {

// Moves every exp, exp2, log and log2 result of the shim by `ulps` ulp.
void shim_set_math_ulp_error(int ulps) { msl_shim::math_ulp_error() = ulps; }

void shim_expm1(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = mo::expm1_f(x[i]);
}

void shim_log1p(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = mo::log1p_f(x[i]);
}

// activation_forward(z, act, alpha) of kernels/common/activations.h.
void shim_activation_forward(const float* z, float* y, int64_t n, int act, float alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = mo::activation_forward(z[i], act, alpha);
}

}  // extern "C"

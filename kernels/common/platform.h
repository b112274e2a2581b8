// Portability layer shared by every backend.
//
// Headers in kernels/common/ hold the arithmetic of each op once. They are
// compiled as plain C++ (CPU kernels, the MSL shim tests), as CUDA
// (__host__ __device__) and as Metal Shading Language (the .metal shaders
// #include them). This file gives them one vocabulary for all three.
#ifndef METAL_OPS_KERNELS_COMMON_PLATFORM_H_
#define METAL_OPS_KERNELS_COMMON_PLATFORM_H_

#if defined(__METAL_VERSION__)
// ---- Metal Shading Language -------------------------------------------------
#include <metal_stdlib>
#define MO_FN inline
#define MO_THREAD thread
#define MO_DEVICE device
#define MO_CONSTANT constant
// A kernel argument bound to threadgroup memory at index i.
#define MO_THREADGROUP_ARG(i) [[threadgroup(i)]]
namespace mo {
typedef int int32;
typedef uint uint32;
typedef long int64;
typedef ulong uint64;
MO_FN float floor_f(float x) { return metal::floor(x); }
MO_FN float ceil_f(float x) { return metal::ceil(x); }
MO_FN float exp_f(float x) { return metal::exp(x); }
MO_FN float exp2_f(float x) { return metal::exp2(x); }
MO_FN float log_f(float x) { return metal::log(x); }
MO_FN float log2_f(float x) { return metal::log2(x); }
MO_FN float sqrt_f(float x) { return metal::sqrt(x); }
MO_FN float pow_f(float x, float y) { return metal::pow(x, y); }
MO_FN float fabs_f(float x) { return metal::fabs(x); }
MO_FN float fma_f(float a, float b, float c) { return metal::fma(a, b, c); }
MO_FN float fmin_f(float a, float b) { return metal::fmin(a, b); }
MO_FN float fmax_f(float a, float b) { return metal::fmax(a, b); }
MO_FN bool isnan_f(float x) { return metal::isnan(x); }
MO_FN bool isinf_f(float x) { return metal::isinf(x); }
MO_FN float log1p_f(float x) { return metal::log(1.0f + x); }  // MSL has no log1p
MO_FN float expm1_f(float x) { return metal::exp(x) - 1.0f; }  // MSL has no expm1
}  // namespace mo

#else
// ---- C++ and CUDA -------------------------------------------------------------
#include <cmath>
#include <cstdint>
#if defined(__CUDACC__)
#define MO_FN __host__ __device__ __forceinline__
#else
#define MO_FN inline
#endif
#define MO_THREAD
#define MO_DEVICE
#define MO_CONSTANT
// The MSL shim hands threadgroup memory to a kernel itself (and its empty
// `threadgroup` macro would turn [[threadgroup(i)]] into invalid [[(i)]]).
#define MO_THREADGROUP_ARG(i)
namespace mo {
typedef int32_t int32;
typedef uint32_t uint32;
typedef int64_t int64;
typedef uint64_t uint64;
MO_FN float floor_f(float x) { return floorf(x); }
MO_FN float ceil_f(float x) { return ceilf(x); }
MO_FN float exp_f(float x) { return expf(x); }
MO_FN float exp2_f(float x) { return exp2f(x); }
MO_FN float log_f(float x) { return logf(x); }
MO_FN float log2_f(float x) { return log2f(x); }
MO_FN float sqrt_f(float x) { return sqrtf(x); }
MO_FN float pow_f(float x, float y) { return powf(x, y); }
MO_FN float fabs_f(float x) { return fabsf(x); }
MO_FN float fma_f(float a, float b, float c) { return fmaf(a, b, c); }
MO_FN float fmin_f(float a, float b) { return fminf(a, b); }
MO_FN float fmax_f(float a, float b) { return fmaxf(a, b); }
MO_FN bool isnan_f(float x) { return x != x; }
MO_FN bool isinf_f(float x) { return fabsf(x) == INFINITY; }
MO_FN float log1p_f(float x) { return log1pf(x); }
MO_FN float expm1_f(float x) { return expm1f(x); }
}  // namespace mo
#endif

#endif  // METAL_OPS_KERNELS_COMMON_PLATFORM_H_

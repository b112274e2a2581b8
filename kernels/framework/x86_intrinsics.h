// <immintrin.h> with GCC's (maybe-)uninitialized warnings silenced inside it. GCC 12's
// AVX-512 intrinsics (avx512fintrin.h) start from _mm512_undefined_*(), a
// variable initialised with itself, and -W(maybe-)uninitialized reports it at
// that line wherever such an intrinsic is inlined with optimisation (GCC bug
// 105593, a false positive; Eigen's AVX-512 packet math hits it under
// -march=x86-64-v4). GCC judges such a warning by the diagnostic state where
// the header's text was read, i.e. where it was first included, so every x86
// source includes this before anything that pulls in <immintrin.h>
// (kernels/framework/tf_eigen.h and kernels/cpu/simd.h include it first). Warnings in our
// own code, inlined intrinsics or not, are still reported at their own lines.
#ifndef MO_KERNELS_FRAMEWORK_X86_INTRINSICS_H_
#define MO_KERNELS_FRAMEWORK_X86_INTRINSICS_H_

#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#endif  // MO_KERNELS_FRAMEWORK_X86_INTRINSICS_H_

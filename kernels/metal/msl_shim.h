// MSL shim: lets a .metal shader compile as C++17 so its kernel bodies can run
// on the CPU over their dispatch grid (tests/metal_shim/). The shim tests
// compile the expanded sources the library embeds (tools/embed_metal.py). It declares only the
// address-space qualifiers, types and builtins our shaders use; a shader that
// uses anything else fails to compile here, which is the point.
//
// Not a Metal emulator: threads of a grid run one after another, so it checks
// arithmetic and indexing, not memory ordering. Atomics map to std::atomic.
// Names real MSL keeps in namespace metal live there here too.
#ifndef METAL_OPS_KERNELS_METAL_MSL_SHIM_H_
#define METAL_OPS_KERNELS_METAL_MSL_SHIM_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/platform.h"

typedef unsigned int uint;
typedef unsigned short ushort;
typedef _Float16 half;

struct float2 { float x, y; };
struct float3 { float x, y, z; };
struct float4 { float x, y, z, w; };
struct half2 { half x, y; };

namespace metal {
// Metal 3's device atomic_float / atomic_uint and the relaxed-order API. Real
// MSL declares them in namespace metal, so they are declared there here too:
// a shader that forgets `metal::` or `using namespace metal` fails to compile
// against the shim just as it would on a Mac.
typedef std::atomic<float> atomic_float;
typedef std::atomic<uint> atomic_uint;
typedef std::atomic<int> atomic_int;
enum memory_order { memory_order_relaxed };
template <typename A, typename T>
inline T atomic_fetch_add_explicit(A* object, T value, memory_order) {
  return object->fetch_add(value, std::memory_order_relaxed);
}
// std::atomic<float>::fetch_add is C++20 and the shim builds as C++17: a
// compare-exchange loop gives the same relaxed fetch-add.
inline float atomic_fetch_add_explicit(std::atomic<float>* object, float value, memory_order) {
  float old = object->load(std::memory_order_relaxed);
  while (!object->compare_exchange_weak(old, old + value, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename A, typename T>
inline void atomic_store_explicit(A* object, T value, memory_order) {
  object->store(value, std::memory_order_relaxed);
}
template <typename A>
inline auto atomic_load_explicit(const A* object, memory_order) {
  return object->load(std::memory_order_relaxed);
}
template <typename A, typename T>
inline T atomic_fetch_max_explicit(A* object, T value, memory_order) {
  T old = object->load(std::memory_order_relaxed);
  while (old < value && !object->compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
  return old;
}
}  // namespace metal

// MSL's as_type<To>(from): reinterpret the bits of a same-sized value.
template <typename To, typename From>
inline To as_type(From from) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs same-sized types");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

namespace metal {
using std::ceil;
using std::exp;
using std::exp2;
using std::fabs;
using std::floor;
using std::fmax;
using std::fmin;
using std::isinf;
using std::isnan;
using std::ldexp;
using std::log;
using std::log2;
using std::pow;
using std::rint;
using std::sqrt;
// MSL's frexp returns the exponent through a thread reference.
inline float frexp(float x, int& exponent) { return std::frexp(x, &exponent); }
template <typename T>
inline T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }
template <typename T>
inline T min(T a, T b) { return a < b ? a : b; }
template <typename T>
inline T max(T a, T b) { return a > b ? a : b; }
}  // namespace metal

// Address spaces and function qualifiers vanish in C++.
#define kernel
#define device
#define constant const
#define threadgroup
#define thread

#endif  // METAL_OPS_KERNELS_METAL_MSL_SHIM_H_

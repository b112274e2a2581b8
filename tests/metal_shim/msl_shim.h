// MSL shim: lets a .metal shader compile as C++17 so its kernel bodies can run
// on the CPU over their dispatch grid (tests/metal_shim/). The shim tests
// compile the expanded sources the library embeds (tools/build/embed_metal.py). It declares only the
// address-space qualifiers, types and builtins our shaders use; a shader that
// uses anything else fails to compile here, which is the point.
//
// Not a Metal emulator: threads of a grid run one after another, so it checks
// arithmetic and indexing, not memory ordering. Atomics map to std::atomic.
// Names real MSL keeps in namespace metal live there here too.
//
// Shaders whose threads cooperate (threadgroup memory, barriers, SIMD-group
// matrices) run through msl_shim::run_threadgroups (tests/metal_shim/
// threadgroups.cc): each thread of a threadgroup is a fiber, and a thread
// that reaches a barrier or a cooperative SIMD-group operation waits there
// until every thread it cooperates with has arrived, as MSL requires:
// threadgroup_barrier waits for the whole threadgroup, simdgroup_barrier and
// the simdgroup_matrix functions for the 32 lanes of the SIMD-group (threads
// 32 s .. 32 s + 31), which must call them with the same arguments. A thread
// that never arrives (divergent control flow, an early return) or lanes that
// disagree stop the run with an error instead of hanging. Between those
// points threads run one after another, in thread order or reversed
// (tests compare both: a missing barrier shows up as a difference), and a
// lane reads a simdgroup_load's source when it arrives, so lanes that read
// different data (another thread's write not ordered by a barrier) are an
// error too.
#ifndef MO_TESTS_METAL_SHIM_MSL_SHIM_H_
#define MO_TESTS_METAL_SHIM_MSL_SHIM_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <typeinfo>

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;  // 64 bits, as in MSL (LP64 hosts)
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

namespace msl_shim {
// MSL's exp, exp2, log and log2 are not correctly rounded (a few ulp). A test
// sets this to move each of their results by that many ulp (up when positive,
// down when negative), to check that what it tests does not depend on them
// being correctly rounded. 0 (the default): the C library's results.
inline int& math_ulp_error() {
  static int ulps = 0;
  return ulps;
}
inline float off_by_ulps(float v) {
  for (int i = 0; i < math_ulp_error(); ++i) v = std::nextafter(v, INFINITY);
  for (int i = 0; i > math_ulp_error(); --i) v = std::nextafter(v, -INFINITY);
  return v;
}
}  // namespace msl_shim

namespace metal {
using std::ceil;
using std::fabs;
using std::floor;
using std::fma;
using std::fmax;
using std::fmin;
using std::isinf;
using std::isnan;
using std::ldexp;
using std::pow;
using std::rint;
using std::sqrt;
inline float exp(float x) { return msl_shim::off_by_ulps(std::exp(x)); }
inline float exp2(float x) { return msl_shim::off_by_ulps(std::exp2(x)); }
inline float log(float x) { return msl_shim::off_by_ulps(std::log(x)); }
inline float log2(float x) { return msl_shim::off_by_ulps(std::log2(x)); }
// MSL's frexp returns the exponent through a thread reference.
inline float frexp(float x, int& exponent) { return std::frexp(x, &exponent); }
template <typename T>
inline T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }
template <typename T>
inline T min(T a, T b) { return a < b ? a : b; }
template <typename T>
inline T max(T a, T b) { return a > b ? a : b; }
}  // namespace metal

// ---- threadgroups, barriers and SIMD-group matrices --------------------------------

namespace msl_shim {

// One thread's arrival at a point where it waits for others. `complete` runs
// once, when every thread the point names has arrived with equal `what`,
// `complete`, `pointer` and `values` (else the run fails naming `what`): it
// gets every arrival (lane order) and returns an error or nullptr.
struct Arrival {
  const char* what;
  bool whole_threadgroup;  // threadgroup_barrier; else the thread's SIMD-group
  const char* (*complete)(Arrival* const* lanes, int count);
  const void* pointer;
  unsigned long long values[3];
  void* self;  // the lane's own operand(s)
};

// Blocks the calling shader thread until its cooperation completes; outside
// run_threadgroups (a plain grid loop) it fails the run.
void arrive(Arrival* arrival);

// Runs fn(arg, group, thread) for `threads` threads (a multiple of 32) of each
// of `groups` threadgroups, one threadgroup after another, its threads as
// cooperating fibers sharing `threadgroup_bytes` of threadgroup memory
// (threadgroup_memory(); filled with NaN bytes at each threadgroup's start, so
// a read before any write shows). `reverse` runs the threads in reverse order
// between waiting points. Returns nullptr, or what went wrong.
typedef void (*ThreadFn)(void* arg, uint group, uint index);
const char* run_threadgroups(uint groups, uint threads, unsigned long threadgroup_bytes, bool reverse, ThreadFn fn,
                             void* arg);
void* threadgroup_memory();

}  // namespace msl_shim

struct ulong2 {
  ulong x, y;
  ulong2(ulong v = 0) : x(v), y(v) {}  // MSL converts a scalar to every component
};

namespace metal {

enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }

inline const char* shim_barrier_done(msl_shim::Arrival* const*, int) { return nullptr; }

inline void threadgroup_barrier(mem_flags) {
  msl_shim::Arrival a = {"threadgroup_barrier", true, &shim_barrier_done, nullptr, {0, 0, 0}, nullptr};
  msl_shim::arrive(&a);
}
inline void simdgroup_barrier(mem_flags) {
  msl_shim::Arrival a = {"simdgroup_barrier", false, &shim_barrier_done, nullptr, {0, 0, 0}, nullptr};
  msl_shim::arrive(&a);
}

// An 8x8 SIMD-group matrix. Real MSL spreads its elements over the 32 lanes;
// here every lane holds all of them (the cooperative functions give every
// lane the same values), which is all a shader can observe without
// thread_elements() (not declared: a shader using it fails to compile).
template <typename T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the shim models 8x8 SIMD-group matrices");
  T e[Rows][Cols];
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;

template <typename T, int Cols, int Rows = Cols>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  for (int r = 0; r < Rows; ++r) {
    for (int c = 0; c < Cols; ++c) m.e[r][c] = value;
  }
  return m;
}

template <typename T>
inline bool shim_same_matrix(const void* a, const void* b) {
  return std::memcmp(a, b, sizeof(simdgroup_matrix<T, 8, 8>)) == 0;
}

template <typename T>
inline const char* shim_load_done(msl_shim::Arrival* const* lanes, int count) {
  for (int i = 1; i < count; ++i) {
    if (!shim_same_matrix<T>(lanes[i]->self, lanes[0]->self)) {
      return "simdgroup_load: the lanes read different values (a write by another thread is not ordered before "
             "the load by a barrier)";
    }
  }
  return nullptr;
}

// MSL: d = the 8x8 matrix at src (row r at src + r * elements_per_row), or
// its transpose. matrix_origin other than 0 is not modelled (offset src).
template <typename T>
inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, const T* src, ulong elements_per_row = 8,
                           ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false) {
  simdgroup_matrix<T, 8, 8> m;
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) {
      m.e[r][c] = transpose_matrix ? src[c * elements_per_row + r] : src[r * elements_per_row + c];
    }
  }
  msl_shim::Arrival a = {"simdgroup_load", false, &shim_load_done<T>, src,
                         {elements_per_row, (matrix_origin.x << 32) | matrix_origin.y, transpose_matrix ? 1u : 0u},
                         &m};
  if (matrix_origin.x != 0 || matrix_origin.y != 0) a.what = "simdgroup_load with a matrix_origin (not modelled)";
  msl_shim::arrive(&a);
  d = m;
}

struct ShimStore {
  const void* matrix;
  void (*write)(const void* matrix, void* dst, ulong stride, bool transpose);
};

template <typename T>
inline void shim_write_matrix(const void* matrix, void* dst, ulong stride, bool transpose) {
  const simdgroup_matrix<T, 8, 8>& m = *static_cast<const simdgroup_matrix<T, 8, 8>*>(matrix);
  T* out = static_cast<T*>(dst);
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) (transpose ? out[c * stride + r] : out[r * stride + c]) = m.e[r][c];
  }
}

template <typename T>
inline const char* shim_store_done(msl_shim::Arrival* const* lanes, int count) {
  const ShimStore* first = static_cast<const ShimStore*>(lanes[0]->self);
  for (int i = 1; i < count; ++i) {
    if (!shim_same_matrix<T>(static_cast<const ShimStore*>(lanes[i]->self)->matrix, first->matrix)) {
      return "simdgroup_store: the lanes hold different matrices";
    }
  }
  first->write(first->matrix, const_cast<void*>(lanes[0]->pointer), lanes[0]->values[0], lanes[0]->values[2] != 0);
  return nullptr;
}

// MSL: writes the 8x8 matrix (or its transpose) to dst, row r at dst + r * elements_per_row.
template <typename T>
inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& a, T* dst, ulong elements_per_row = 8,
                            ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false) {
  ShimStore store = {&a, &shim_write_matrix<T>};
  msl_shim::Arrival arrival = {"simdgroup_store", false, &shim_store_done<T>, dst,
                               {elements_per_row, (matrix_origin.x << 32) | matrix_origin.y,
                                transpose_matrix ? 1u : 0u},
                               &store};
  if (matrix_origin.x != 0 || matrix_origin.y != 0) arrival.what = "simdgroup_store with a matrix_origin (not modelled)";
  msl_shim::arrive(&arrival);
}

template <typename TD, typename TA, typename TB, typename TC>
struct ShimMultiply {
  simdgroup_matrix<TD, 8, 8>* d;
  const simdgroup_matrix<TA, 8, 8>* a;
  const simdgroup_matrix<TB, 8, 8>* b;
  const simdgroup_matrix<TC, 8, 8>* c;
};

template <typename TD, typename TA, typename TB, typename TC>
inline const char* shim_multiply_done(msl_shim::Arrival* const* lanes, int count) {
  typedef ShimMultiply<TD, TA, TB, TC> Args;
  const Args* first = static_cast<const Args*>(lanes[0]->self);
  for (int i = 1; i < count; ++i) {
    const Args* other = static_cast<const Args*>(lanes[i]->self);
    if (!shim_same_matrix<TA>(other->a, first->a) || !shim_same_matrix<TB>(other->b, first->b) ||
        !shim_same_matrix<TC>(other->c, first->c)) {
      return "simdgroup_multiply_accumulate: the lanes hold different operands";
    }
  }
  // Products of the operands' element type, sums in the accumulator's (float
  // for half operands: Apple GPUs multiply half exactly into float).
  simdgroup_matrix<TD, 8, 8> d;
  for (int r = 0; r < 8; ++r) {
    for (int col = 0; col < 8; ++col) {
      TD s = TD(first->c->e[r][col]);
      for (int k = 0; k < 8; ++k) s += TD(first->a->e[r][k]) * TD(first->b->e[k][col]);
      d.e[r][col] = s;
    }
  }
  for (int i = 0; i < count; ++i) *static_cast<const Args*>(lanes[i]->self)->d = d;
  return nullptr;
}

// MSL: d = a * b + c (d may be c).
template <typename TD, typename TA, typename TB, typename TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  ShimMultiply<TD, TA, TB, TC> args = {&d, &a, &b, &c};
  msl_shim::Arrival arrival = {"simdgroup_multiply_accumulate", false, &shim_multiply_done<TD, TA, TB, TC>, nullptr,
                               {0, 0, 0}, &args};
  msl_shim::arrive(&arrival);
}

}  // namespace metal

// ---- kernel templates by host name ------------------------------------------------

// A shader's kernel template instantiations, `template [[host_name("name")]]
// [[kernel]] decltype(f<...>) f<...>;` (the attributes mean nothing to C++):
// tests/metal_shim/kernel_table.py lists them in $(BUILD)/gen/<shader>.kernels.inc
// as MO_SHIM_KERNEL lines, which a shim .cc includes into a Kernel table to
// find each entry point by the name its .mm asks Metal for.
namespace msl_shim {

struct Kernel {
  const char* name;
  const std::type_info* type;
  void (*function)();
  bool found;  // set by find_kernel: a test checks every entry is reachable
};

// The entry point `name` of type Fn, or nullptr when the table has none (or
// one of another type).
template <typename Fn, unsigned long N>
Fn find_kernel(Kernel (&table)[N], const std::string& name) {
  for (Kernel& k : table) {
    if (name != k.name) continue;
    if (*k.type != typeid(Fn)) return nullptr;
    k.found = true;
    return reinterpret_cast<Fn>(k.function);
  }
  return nullptr;
}

// Entries of the table find_kernel has not returned.
template <unsigned long N>
int kernels_not_found(const Kernel (&table)[N]) {
  int missing = 0;
  for (const Kernel& k : table) missing += k.found ? 0 : 1;
  return missing;
}

}  // namespace msl_shim

#define MO_SHIM_KERNEL(name, ...) \
  {name, &typeid(&__VA_ARGS__), reinterpret_cast<void (*)()>(&__VA_ARGS__), false},

// Address spaces and function qualifiers vanish in C++.
#define kernel
#define device
#define constant const
#define threadgroup
#define thread

// The shaders' shared headers see the Metal branch of platform.h, the one the
// GPU compiles (its math on the functions above).
#define MO_MSL_SHIM 1
#include "kernels/common/platform.h"

#endif  // MO_TESTS_METAL_SHIM_MSL_SHIM_H_

// The MSL shim's kernels as the strict model's GPU (tests/metal_shim/shim_exec.cc): the
// generated $(BUILD)/gen/<shader>_exec.cc files (tests/metal_shim/kernel_table.py)
// register one Entry per kernel instantiation: its host name, its parameters
// as declared ([[buffer(N)]], [[threadgroup(N)]], thread positions) and a
// function calling it with a pass's bound buffers and one thread's position.
#ifndef MO_TESTS_METAL_SHIM_SHIM_EXEC_H_
#define MO_TESTS_METAL_SHIM_SHIM_EXEC_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include "tests/metal_shim/msl_shim.h"

namespace msl_shim {
namespace exec {

// MSL's thread-position attributes of one thread (1-D dispatches).
struct ThreadIds {
  uint thread_position_in_grid, threads_per_grid, threadgroup_position_in_grid, threadgroups_per_grid,
      thread_position_in_threadgroup, thread_index_in_threadgroup, threads_per_threadgroup, thread_index_in_simdgroup,
      simdgroup_index_in_threadgroup;
};

constexpr int kMaxBuffers = 31;  // Metal's buffer argument table: indices 0..30

struct Call {
  void* buffers[kMaxBuffers];  // by [[buffer(N)]]
  void* threadgroup_memory;    // [[threadgroup(0)]]
  ThreadIds ids;
};

enum ParamKind { kBuffer, kThreadgroup, kThreadAttribute };
struct Param {
  ParamKind kind;
  int index;            // kBuffer: N of [[buffer(N)]]; kThreadgroup: N of [[threadgroup(N)]]
  unsigned long bytes;  // kBuffer of a `constant T&` parameter: sizeof(T); else 0
};

struct Entry {
  const char* library;
  const char* name;  // the host name
  void (*run)(const Call& call);
  const Param* params;
  int num_params;
};

// Called by each generated file's static initializer.
bool Register(const Entry* entries, int count);
// The registered kernel `name` of `library`, or nullptr.
const Entry* Find(const std::string& library, const std::string& name);

// One bound argument of a dispatch: host memory and its length from the
// binding's offset on; `bytes`: set by setBytes.
struct Bound {
  void* data = nullptr;
  uint64_t length = 0;
  bool bytes = false;
  bool fresh = false;  // bound since the previous dispatch (an unused one is a plan's mistake)
};

// Runs `entry` over `groups` threadgroups of `threads` threads with
// `threadgroup_bytes` of threadgroup memory: the threadgroups in an order
// drawn from `order_seed` (Metal promises none), a kernel with threadgroup
// memory as cooperating fibers (threadgroups.cc), any other thread after
// thread. Checks what a Mac's encoder leaves to the GPU: every buffer the
// kernel declares is bound and nothing else was bound for it, a `constant T&` gets exactly
// sizeof(T) bytes, a buffer holds what the kernel reads of a constant.
// "" or what is wrong.
std::string Execute(const Entry& entry, const Bound (&args)[kMaxBuffers], uint64_t groups, uint64_t threads,
                    uint64_t threadgroup_bytes, uint64_t order_seed);

template <typename Fn>
struct Args;
template <typename R, typename... A>
struct Args<R (*)(A...)> {
  template <int K>
  using At = typename std::tuple_element<K, std::tuple<A...>>::type;
};

template <typename Fn, int K>
typename Args<Fn>::template At<K> BufferArg(const Call& call, int index) {
  using P = typename Args<Fn>::template At<K>;
  if constexpr (std::is_pointer<P>::value) {
    return static_cast<P>(call.buffers[index]);
  } else {
    return *static_cast<typename std::remove_reference<P>::type*>(call.buffers[index]);
  }
}

template <typename Fn, int K>
typename Args<Fn>::template At<K> ThreadgroupArg(const Call& call) {
  return static_cast<typename Args<Fn>::template At<K>>(call.threadgroup_memory);
}

template <typename Fn, int K>
constexpr unsigned long ArgBytes() {
  using P = typename Args<Fn>::template At<K>;
  if constexpr (std::is_reference<P>::value) {
    return sizeof(typename std::remove_reference<P>::type);
  } else {
    return 0;
  }
}

}  // namespace exec
}  // namespace msl_shim

#endif  // MO_TESTS_METAL_SHIM_SHIM_EXEC_H_

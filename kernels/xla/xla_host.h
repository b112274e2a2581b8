// XLA's host handlers (docs/XLA.md): the CPU functor of kernels/<op>/<op>_functor.h
// bound to the typed-FFI call that kernels/<op>/<op>_xla.cc emits, registered
// in kernels/<op>/<op>_kernels.cc beside TensorFlow's CPU kernel of the same
// functor. The handlers thus compile with the functor at the library's ISA
// level, while the XLA op kernels, which only build XLA's graph, compile once
// for every level of the Linux wheel (docs/BUILDING.md, "Wheels").
//
// MO_XLA: 1 in a build that compiles the XLA kernels (the Makefile on Linux
// passes -DMO_XLA=1); 0 on macOS (Metal has no XLA) and in the Bazel build,
// which leave the handlers out.
#ifndef MO_KERNELS_XLA_XLA_HOST_H_
#define MO_KERNELS_XLA_XLA_HOST_H_

#ifndef MO_XLA
#define MO_XLA 0
#endif

#if MO_XLA
#include <algorithm>

#include "kernels/cpu/cpu_context.h"
#include "kernels/xla/xla_ffi.h"
#include "tensorflow/core/platform/cpu_info.h"
#include "tensorflow/core/platform/env.h"

namespace mo {
namespace xla_kernels {

// The handlers' names for XLA's FFI API and their buffers (kernels/xla/xla_ffi.h).
namespace ffi = ::xla::ffi;
using xla_ffi::Data;
using xla_ffi::RetBuffer;

// The context the host handlers run the CPU functors with: the library's own
// pool, one thread per core, made on first use. (XLA's FFI offers its
// intra-op pool only as a task queue; a blocking parallel-for on it from a
// handler that runs on that same pool can deadlock.)
inline cpu::Context HostContext() {
  static tsl::thread::ThreadPool* pool = new tsl::thread::ThreadPool(
      ::tensorflow::Env::Default(), "metal_ops_xla", std::max(1, ::tensorflow::port::MaxParallelism()));
  return cpu::Context(pool);
}

}  // namespace xla_kernels
}  // namespace mo
#endif  // MO_XLA

#endif  // MO_KERNELS_XLA_XLA_HOST_H_

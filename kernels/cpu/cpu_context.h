// What a CPU functor (kernels/*/*_functor.h) runs with: a thread pool, and the
// TensorFlow kernel context when there is one. A TensorFlow kernel passes its
// OpKernelContext (the intra-op pool of the op's device, converted implicitly);
// an XLA host handler (kernels/<op>/<op>_xla.cc) passes the pool it runs on. The same
// sharding calls as kernels/cpu/thread_pool.h.
#ifndef MO_KERNELS_CPU_CPU_CONTEXT_H_
#define MO_KERNELS_CPU_CPU_CONTEXT_H_

#include <algorithm>
#include <cstdint>
#include <functional>

#include "kernels/cpu/thread_pool.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {
namespace cpu {

class Context {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor): the kernel classes pass their context.
  Context(::tensorflow::OpKernelContext* ctx) : workers_(Workers(ctx)), op_context_(ctx) {}
  explicit Context(tsl::thread::ThreadPool* workers) : workers_(workers) {}

  tsl::thread::ThreadPool* workers() const { return workers_; }
  // The TensorFlow kernel context, or nullptr (an XLA host handler).
  ::tensorflow::OpKernelContext* op_context() const { return op_context_; }

  // A temporary tensor: TensorFlow's allocator of the op's device, else the CPU allocator.
  absl::Status AllocateTemp(::tensorflow::DataType dtype, const ::tensorflow::TensorShape& shape,
                            ::tensorflow::Tensor* out) const {
    if (op_context_ != nullptr) return op_context_->allocate_temp(dtype, shape, out);
    *out = ::tensorflow::Tensor(dtype, shape);
    if (!out->IsInitialized()) {
      return absl::ResourceExhaustedError("could not allocate a temporary tensor of shape " + shape.DebugString());
    }
    return absl::OkStatus();
  }

 private:
  tsl::thread::ThreadPool* workers_;
  ::tensorflow::OpKernelContext* op_context_ = nullptr;
};

inline int NumThreads(const Context& ctx) { return std::max(1, ctx.workers()->NumThreads()); }

inline void ParallelFor(const Context& ctx, int64_t n, int64_t cycles_per_item, const RangeFn& fn) {
  ctx.workers()->ParallelFor(n, cycles_per_item, fn);
}

inline void ParallelForBlocks(const Context& ctx, int64_t blocks, const RangeFn& fn) {
  ctx.workers()->ParallelFor(blocks, OneBlockPerShard(), fn);
}

inline void ParallelForBlocksWithWorkerId(const Context& ctx, int64_t blocks,
                                          const std::function<void(int64_t, int64_t, int)>& fn) {
  ctx.workers()->ParallelForWithWorkerId(blocks, OneBlockPerShard(), fn);
}

}  // namespace cpu
}  // namespace mo

#endif  // MO_KERNELS_CPU_CPU_CONTEXT_H_

// How every CPU kernel shards its work over TensorFlow's intra-op pool (the
// pool of the op's device: inter-op parallelism and the user's thread settings
// apply). One cost model, TensorFlow's: a kernel either
//   - states the cost of one item in CPU cycles (roughly: a few cycles per
//     arithmetic operation or memory access) and lets TF size the shards
//     (ParallelFor), or
//   - cuts the work into blocks it sized itself (cache-sized tiles, blocks
//     with their own partial sums) and runs one block per shard, taken by
//     whichever thread is free (ParallelForBlocks), so a thread slowed by other
//     load holds up one block, not a fixed share of the work.
#ifndef MO_KERNELS_CPU_THREAD_POOL_H_
#define MO_KERNELS_CPU_THREAD_POOL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/lib/core/threadpool.h"
#include "tensorflow/core/public/version.h"

namespace mo {
namespace cpu {

using RangeFn = std::function<void(int64_t begin, int64_t end)>;

inline tsl::thread::ThreadPool* Workers(::tensorflow::OpKernelContext* ctx) {
  return ctx->device()->tensorflow_cpu_worker_threads()->workers;
}

// The threads of the op's pool (at least 1).
inline int NumThreads(::tensorflow::OpKernelContext* ctx) { return std::max(1, Workers(ctx)->NumThreads()); }

// fn(begin, end) over [0, n) items of about cycles_per_item CPU cycles each.
inline void ParallelFor(::tensorflow::OpKernelContext* ctx, int64_t n, int64_t cycles_per_item, const RangeFn& fn) {
  Workers(ctx)->ParallelFor(n, cycles_per_item, fn);
}

// One block per shard. SchedulingParams::Fixed is TF 2.20+; TF 2.19 (the macOS
// pin, requirements-macos.txt) has only the constructor.
inline tsl::thread::ThreadPool::SchedulingParams OneBlockPerShard() {
  using Params = tsl::thread::ThreadPool::SchedulingParams;
#if TF_MAJOR_VERSION > 2 || (TF_MAJOR_VERSION == 2 && TF_MINOR_VERSION >= 20)
  return Params::Fixed(1);
#else
  return Params(tsl::thread::ThreadPool::SchedulingStrategy::kFixedBlockSize, std::nullopt, 1);
#endif
}

// fn(begin, end) over [0, blocks) blocks the kernel sized itself, one per shard.
inline void ParallelForBlocks(::tensorflow::OpKernelContext* ctx, int64_t blocks, const RangeFn& fn) {
  Workers(ctx)->ParallelFor(blocks, OneBlockPerShard(), fn);
}

// The same with the id of the running thread, in [0, NumThreads(ctx)]
// (NumThreads(ctx) for the calling thread), for per-thread scratch.
inline void ParallelForBlocksWithWorkerId(::tensorflow::OpKernelContext* ctx, int64_t blocks,
                                          const std::function<void(int64_t, int64_t, int)>& fn) {
  Workers(ctx)->ParallelForWithWorkerId(blocks, OneBlockPerShard(), fn);
}

}  // namespace cpu
}  // namespace mo

#endif  // MO_KERNELS_CPU_THREAD_POOL_H_

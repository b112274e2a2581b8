// Scheduling on TF's intra-op pool shared by the CPU kernels.
#ifndef METAL_OPS_KERNELS_CPU_THREAD_POOL_H_
#define METAL_OPS_KERNELS_CPU_THREAD_POOL_H_

#include <optional>

#include "tensorflow/core/lib/core/threadpool.h"
#include "tensorflow/core/public/version.h"

namespace mo {

// One work item per shard, taken by whichever thread is free (so a thread
// slowed by other load holds up one item, not a fixed share of the work).
// SchedulingParams::Fixed is TF 2.20+; TF 2.19 (the macOS pin,
// requirements-macos.txt) has only the constructor.
inline tsl::thread::ThreadPool::SchedulingParams OneItemPerShard() {
  using Params = tsl::thread::ThreadPool::SchedulingParams;
#if TF_MAJOR_VERSION > 2 || (TF_MAJOR_VERSION == 2 && TF_MINOR_VERSION >= 20)
  return Params::Fixed(1);
#else
  return Params(tsl::thread::ThreadPool::SchedulingStrategy::kFixedBlockSize, std::nullopt, 1);
#endif
}

}  // namespace mo

#endif  // METAL_OPS_KERNELS_CPU_THREAD_POOL_H_

// The Metal host path: every decision between an op's plan
// (kernels/metal_plan/plan.h) and the Metal calls that run it, in plain C++
// over the interface of kernels/metal_plan/metal_api.h, so that the same code
// runs on a Mac (kernels/metal/metal_device.mm) and here against the strict
// model of Metal (tests/metal_shim/metal_model.cc).
//
// Two routes, as on a Mac:
//   - RunOnOwnQueue: the library's own command queue (TensorFlow 2.20+, no
//     tensorflow-metal): the ops' CPU kernels hand over host tensors. A
//     tensor is bound without a copy: the page-rounded range around it is
//     wrapped (newBufferWithBytesNoCopy) and the tensor bound at its offset
//     in that range; only a tensor whose offset breaks Metal's alignment, or
//     that Metal refuses to wrap, is copied (and copied back if written).
//     One command buffer, committed and waited for; its status read after
//     completion.
//   - RunOnStream: tensorflow-metal's TF_MetalStream: the tensors are Metal
//     buffers already; the passes are encoded inside the stream's queue on
//     its current command buffer and submitted by its batched commit, or,
//     when the caller reads a result on the CPU, submitted and waited for
//     outside the queue.
// A failure that the CPU kernel does not have (a size Metal refuses, a shader
// that does not compile, a missing GPU feature, a pipeline too narrow) is
// Outcome::kCpu: the caller may compute on the CPU instead. A failure of the
// GPU or its driver (no command buffer or encoder, a command buffer's error)
// is Outcome::kGpu: the own queue waited for it, so its caller may recompute
// the call on the CPU and stop trusting the GPU with the op. Anything else (a
// plan the checks refuse) is Outcome::kError.
#ifndef MO_KERNELS_METAL_PLAN_HOST_PATH_H_
#define MO_KERNELS_METAL_PLAN_HOST_PATH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/metal_plan/metal_api.h"
#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

enum class Outcome { kDone, kCpu, kGpu, kError };
struct Result {
  Outcome outcome = Outcome::kDone;
  std::string message;  // what failed (kCpu, kGpu, kError)
  bool ok() const { return outcome == Outcome::kDone; }
};

// What running a plan cost the host: bytes copied into Metal buffers and back
// out, tensors wrapped without a copy, command buffers and CPU waits for them.
struct Cost {
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t wrapped = 0;
  uint64_t command_buffers = 0;
  uint64_t waits = 0;
  void Add(const Cost& other);
};

// The page-aligned range [begin, begin + length) that holds `bytes` bytes at
// `data` (for a no-copy wrap); `offset` = data - begin.
struct PageRange {
  uintptr_t begin;
  uint64_t length;
  uint64_t offset;
};
PageRange EnclosingPages(const void* data, uint64_t bytes, uint64_t page_size);

// Runs `plan` over host tensors on `queue` of `device`; blocks until done.
Result RunOnOwnQueue(mtl::Device& device, mtl::CommandQueue& queue, const Plan& plan, const HostTensor* slots,
                     int num_slots, Cost* cost);

// The most threads per threadgroup `function` of `library` runs on `device`
// (its pipeline's maxTotalThreadsPerThreadgroup, which a kernel using many
// registers gets below the device's), for a plan that sizes its threadgroups
// to it before it is built, on every route; 0 where the device has no such
// pipeline or, with `simdgroup_matrix`, lacks MTLGPUFamilyApple7 (nothing is
// compiled then): the plan's run then says why the CPU computes.
uint64_t PipelineThreadLimit(mtl::Device& device, const std::string& library, const std::string& function,
                             bool simdgroup_matrix);

// A tensor slot of the stream route: a Metal buffer (nullptr: an empty
// tensor, bound as a placeholder) and the tensor's offset in it.
struct BoundSlot {
  mtl::Buffer* buffer;
  uint64_t offset;
};

// Runs `plan` on tensorflow-metal's stream: `slots` and `scratch` (one buffer
// per Plan::scratch entry, at least that large) are Metal buffers. With
// `wait`, returns once the GPU has completed the work (the CPU then reads the
// plan's shared slots) and reports a GPU error; without, the work may run
// later (the stream's batched commit).
Result RunOnStream(mtl::Stream& stream, mtl::Device& device, const Plan& plan, const std::vector<BoundSlot>& slots,
                   const std::vector<mtl::Buffer*>& scratch, bool wait, Cost* cost);

// What RunOnStream does around its passes, for work that others encode
// (MPSGraph): `encode` runs inside the stream's queue on its current command
// buffer; when it succeeds the buffer is submitted (batched, or with `wait`
// or METAL_OPS_GPU_SYNC=1 submitted and waited for outside the queue, its
// status read after completion). `what` names the work in a GPU error.
Result EncodeOnStream(mtl::Stream& stream, const std::string& what,
                      const std::function<Result(mtl::CommandBuffer&)>& encode, bool wait, Cost* cost);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_METAL_PLAN_HOST_PATH_H_

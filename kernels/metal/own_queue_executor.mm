// The library's own Metal path (METAL_OPS_METAL=1, or a Mac without a
// tensorflow-metal device; kernels/metal_plan/executor.h): the ops' CPU
// kernels hand it their Metal plans and host tensors; it runs the plan on the
// system's default MTLDevice through a command queue of its own, over unified
// memory, and blocks until the command buffer completes.
//   - A tensor whose data and size are page-aligned (16 KiB on Apple silicon)
//     is wrapped without a copy (newBufferWithBytesNoCopy); any other is
//     copied into a shared buffer, and copied back when the plan writes it.
//   - Pipelines and threadgroup checks come first (metal_kernel.mm
//     PlanPipelines, the stream path's); the passes are encoded by the same
//     EncodePlan, on one compute encoder.
//   - The command buffer's status is read: an error becomes the op's error,
//     naming the op (by its caller), the kernels and Metal's message.
// Never run: no Mac has executed this file (docs/ARCHITECTURE.md).
#import "kernels/metal/metal_kernel.h"

#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/metal_plan/executor.h"

namespace mo {
namespace metal_plan {
namespace {

struct OwnQueue {
  id<MTLDevice> device = nil;
  id<MTLCommandQueue> queue = nil;
  std::string why_not;
};

// The device and queue, made once for the process (never destroyed).
OwnQueue& Queue() {
  static OwnQueue* queue = [] {
    auto* q = new OwnQueue;
    @autoreleasepool {
      q->device = MTLCreateSystemDefaultDevice();
      if (q->device == nil) {
        q->why_not = "this Mac has no Metal GPU (MTLCreateSystemDefaultDevice gave none)";
      } else {
        q->queue = [q->device newCommandQueue];
        if (q->queue == nil) q->why_not = "Metal gave no command queue";
      }
    }
    return q;
  }();
  return *queue;
}

std::string Describe(NSError* error) {
  return error == nil ? "no error description" : std::string(error.localizedDescription.UTF8String);
}

void SetError(const std::string& message, char* error, size_t error_len) {
  if (error_len == 0) return;
  std::strncpy(error, message.c_str(), error_len - 1);
  error[error_len - 1] = '\0';
}

int Run(const Plan* plan, const HostTensor* slots, int num_slots, char* error, size_t error_len) {
  @autoreleasepool {
    OwnQueue& q = Queue();
    if (q.queue == nil) {
      SetError(q.why_not, error, error_len);
      return 1;
    }
    TF_Status* status = TF_NewStatus();
    const std::vector<id<MTLComputePipelineState>> pipelines = metal::PlanPipelines(q.device, *plan, status);
    if (TF_GetCode(status) != TF_OK) {
      SetError(TF_Message(status), error, error_len);
      TF_DeleteStatus(status);
      return 1;
    }
    // Each slot's buffer: wrapped (no copy) when page-aligned, else a copy.
    const uintptr_t page = static_cast<uintptr_t>(getpagesize());
    std::vector<id<MTLBuffer>> buffers(static_cast<size_t>(num_slots), nil);
    std::vector<bool> copied(static_cast<size_t>(num_slots), false);
    for (int s = 0; s < num_slots; ++s) {
      const HostTensor& t = slots[s];
      if (t.bytes == 0 || t.data == nullptr) continue;  // bound as the placeholder
      const bool aligned = reinterpret_cast<uintptr_t>(t.data) % page == 0 && t.bytes % page == 0;
      if (aligned) {
        buffers[s] = [q.device newBufferWithBytesNoCopy:t.data
                                                 length:static_cast<NSUInteger>(t.bytes)
                                                options:MTLResourceStorageModeShared
                                            deallocator:nil];
      }
      if (buffers[s] == nil) {
        buffers[s] = [q.device newBufferWithBytes:t.data
                                           length:static_cast<NSUInteger>(t.bytes)
                                          options:MTLResourceStorageModeShared];
        copied[s] = true;
      }
      if (buffers[s] == nil) {
        SetError("could not make a Metal buffer of " + std::to_string(t.bytes) + " bytes", error, error_len);
        TF_DeleteStatus(status);
        return 1;
      }
    }
    std::vector<id<MTLBuffer>> scratch;
    for (uint64_t bytes : plan->scratch) {
      scratch.push_back([q.device newBufferWithLength:static_cast<NSUInteger>(bytes > 0 ? bytes : 4)
                                              options:MTLResourceStorageModePrivate]);
    }
    id<MTLCommandBuffer> command_buffer = [q.queue commandBuffer];
    metal::Encoder encoder(command_buffer, status);
    metal::EncodePlan(encoder, *plan, pipelines, buffers, scratch);
    const bool encoded = encoder.End();
    if (TF_GetCode(status) != TF_OK) {
      SetError(TF_Message(status), error, error_len);
      TF_DeleteStatus(status);
      return 1;
    }
    TF_DeleteStatus(status);
    if (!encoded) return 0;
    [command_buffer commit];
    [command_buffer waitUntilCompleted];
    if (command_buffer.status != MTLCommandBufferStatusCompleted || command_buffer.error != nil) {
      SetError("the GPU failed running " + std::to_string(plan->passes.size()) + " pass(es) (" +
                   (plan->passes.empty() ? std::string() : plan->passes[0].function) + ", ...): " +
                   Describe(command_buffer.error),
               error, error_len);
      return 1;
    }
    for (int s = 0; s < num_slots; ++s) {
      if (copied[s] && plan->written[static_cast<size_t>(s)]) {
        std::memcpy(slots[s].data, buffers[s].contents, static_cast<size_t>(slots[s].bytes));
      }
    }
    return 0;
  }
}

const Executor kOwnQueue = {kExecutorAbi, "own-queue", &Run};

}  // namespace

const Executor* OwnQueueExecutor(std::string* why_not) {
  OwnQueue& q = Queue();
  if (q.queue == nil) {
    *why_not = q.why_not;
    return nullptr;
  }
  return &kOwnQueue;
}

// tensorflow-metal's stream class (read from its 1.2.0 binary): present when
// its plugin is loaded into this process.
bool TensorflowMetalLoaded() { return NSClassFromString(@"MetalStreamWrapper") != nil; }

}  // namespace metal_plan
}  // namespace mo

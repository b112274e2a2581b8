// The library's one interface to Metal: what the host path
// (kernels/metal_plan/host_path.h) needs of a device, as plain C++, so that
// every decision of the host path compiles and runs on any machine. Two
// implementations:
//   - kernels/metal/metal_device.mm: Apple's Metal, one Metal call per method
//     (macOS builds);
//   - tests/metal_shim/metal_model.cc: a strict model of Metal that enforces
//     Apple's documented rules, executes dispatches through the MSL shim's
//     kernels, counts copies and waits, and injects faults on request
//     (METAL_OPS_METAL=shim, the test route).
// Each method names the Metal call it stands for. Buffers and command buffers
// belong to their caller (unique_ptr); pipelines to their device.
#ifndef MO_KERNELS_METAL_PLAN_METAL_API_H_
#define MO_KERNELS_METAL_PLAN_METAL_API_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mo {
namespace mtl {

enum class Storage { kShared, kPrivate };  // MTLResourceStorageModeShared / Private

// Metal's rules on an encoder's arguments, as Apple documents them:
// setBytes:length:atIndex: "only works for data smaller than 4 kilobytes";
// setThreadgroupMemoryLength:atIndex: takes multiples of 16 bytes;
// setBuffer:offset:atIndex: (device address space) wants the offset aligned
// to the type the kernel reads, at most 16 bytes.
// kMaxSetBytesLength is the bound setBytes stays below.
constexpr uint64_t kMaxSetBytesLength = 4096, kThreadgroupMemoryGranule = 16, kBufferOffsetAlignment = 16;

// Bumped whenever a class below changes layout: a model library of another
// build is refused, not misread.
constexpr int kApiVersion = 4;

// An MTLBuffer.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual uint64_t Length() const = 0;  // .length
  // .contents: the CPU's view of a shared buffer; nullptr for a private one.
  virtual void* Contents() = 0;
};

// An MTLComputePipelineState.
class Pipeline {
 public:
  virtual ~Pipeline() = default;
  virtual uint64_t MaxTotalThreadsPerThreadgroup() const = 0;  // .maxTotalThreadsPerThreadgroup
  virtual uint64_t StaticThreadgroupMemoryLength() const = 0;  // .staticThreadgroupMemoryLength
  virtual uint64_t ThreadExecutionWidth() const = 0;           // .threadExecutionWidth (SIMD-group width)
};

// An MTLComputeCommandEncoder.
class ComputeEncoder {
 public:
  virtual ~ComputeEncoder() = default;
  virtual void SetPipeline(const Pipeline& pipeline) = 0;                            // setComputePipelineState:
  virtual void SetBuffer(Buffer& buffer, uint64_t offset, uint32_t index) = 0;       // setBuffer:offset:atIndex:
  virtual void SetBytes(const void* data, uint64_t length, uint32_t index) = 0;      // setBytes:length:atIndex:
  virtual void SetThreadgroupMemoryLength(uint64_t length, uint32_t index) = 0;      // setThreadgroupMemoryLength:atIndex:
  virtual void DispatchThreadgroups(uint64_t groups, uint64_t threads_per_group) = 0;  // dispatchThreadgroups:threadsPerThreadgroup:
  virtual void EndEncoding() = 0;                                                    // endEncoding
};

// MTLCommandBufferStatus.
enum class CommandStatus { kNotEnqueued, kEnqueued, kCommitted, kScheduled, kCompleted, kError };
const char* StatusName(CommandStatus status);

// An MTLCommandBuffer. Status() and Error() are final only once the buffer
// has completed (WaitUntilCompleted).
class CommandBuffer {
 public:
  virtual ~CommandBuffer() = default;
  // computeCommandEncoder: nullptr when Metal gives none.
  virtual std::unique_ptr<ComputeEncoder> NewComputeEncoder() = 0;
  virtual void Commit() = 0;              // commit
  virtual void WaitUntilCompleted() = 0;  // waitUntilCompleted
  virtual CommandStatus Status() = 0;     // status
  virtual std::string Error() = 0;        // error.localizedDescription, "" for none
  // The MTLCommandBuffer that carries the work encoded so far:
  // MPSCommandBuffer's rootCommandBuffer (tensorflow-metal's stream hands out
  // an MPSCommandBuffer, on which MPSGraph may commitAndContinue, committing
  // the buffer it was made with and continuing on a new one), else this
  // buffer. Its status, wait and error are the work's; nullptr when none.
  virtual std::unique_ptr<CommandBuffer> Root() = 0;
};

// An MTLCommandQueue.
class CommandQueue {
 public:
  virtual ~CommandQueue() = default;
  virtual std::unique_ptr<CommandBuffer> NewCommandBuffer() = 0;  // commandBuffer: nullptr when Metal gives none
};

// tensorflow-metal's TF_MetalStream (kernels/metal/tf_metal_stream.h).
class Stream {
 public:
  virtual ~Stream() = default;
  // dispatch_sync(stream.queue, body): the only place to read the current
  // command buffer and encode.
  virtual void Sync(const std::function<void()>& body) = 0;
  // currentCommandBuffer (inside Sync): nullptr when the stream gives none.
  virtual std::unique_ptr<CommandBuffer> CurrentCommandBuffer() = 0;
  virtual void Commit() = 0;         // commit: batched (every MPS_MAX_COMMIT_COUNT-th call submits)
  virtual void CommitAndWait() = 0;  // commitAndWait
};

// An MTLDevice's limits and features.
struct Limits {
  uint64_t max_buffer_length;              // .maxBufferLength
  uint64_t max_threadgroup_memory_length;  // .maxThreadgroupMemoryLength
  uint64_t page_size;                      // getpagesize(): 16 KiB on Apple silicon
  bool apple7;                             // supportsFamily:MTLGPUFamilyApple7 (simdgroup_matrix)
  bool metal3;                             // supportsFamily:MTLGPUFamilyMetal3 (MSL 3.0)
};

// An MTLDevice.
class Device {
 public:
  virtual ~Device() = default;
  virtual Limits GetLimits() = 0;
  // newBufferWithBytesNoCopy:length:options:deallocator: (shared storage):
  // `data` page-aligned, `length` a page multiple; nullptr otherwise.
  virtual std::unique_ptr<Buffer> NewBufferNoCopy(void* data, uint64_t length) = 0;
  // newBufferWithBytes:length:options: (shared storage, a copy of `data`).
  virtual std::unique_ptr<Buffer> NewBufferWithBytes(const void* data, uint64_t length) = 0;
  // newBufferWithLength:options: nullptr for 0 bytes, above
  // max_buffer_length or when memory runs out.
  virtual std::unique_ptr<Buffer> NewBuffer(uint64_t length, Storage storage) = 0;
  // The pipeline of `function` in the embedded shader library `library`
  // (newLibraryWithSource, newFunctionWithName,
  // newComputePipelineStateWithDescriptor), compiled once and kept by the
  // device; nullptr with *error set when it does not compile.
  virtual const Pipeline* GetPipeline(const std::string& library, const std::string& function,
                                      std::string* error) = 0;
  virtual std::unique_ptr<CommandQueue> NewCommandQueue() = 0;  // newCommandQueue
};

inline const char* StatusName(CommandStatus status) {
  switch (status) {
    case CommandStatus::kNotEnqueued: return "not enqueued";
    case CommandStatus::kEnqueued: return "enqueued";
    case CommandStatus::kCommitted: return "committed";
    case CommandStatus::kScheduled: return "scheduled";
    case CommandStatus::kCompleted: return "completed";
    case CommandStatus::kError: return "error";
  }
  return "unknown";
}

}  // namespace mtl
}  // namespace mo

#endif  // MO_KERNELS_METAL_PLAN_METAL_API_H_

// Apple's Metal behind the host path's interface (metal_device.h): an adapter,
// one Metal call per method; every decision is the host path's
// (kernels/metal_plan/host_path.cc), run here against the strict model of
// Metal. Also the own queue's device and queue, made once for the process.
#import "kernels/metal/metal_device.h"

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#import "kernels/metal/metal_kernel.h"
#include "kernels/metal_plan/executor.h"

namespace mo {
namespace metal {
namespace {

class MetalBuffer : public mtl::Buffer {
 public:
  explicit MetalBuffer(id<MTLBuffer> buffer) : buffer_(buffer) {}
  uint64_t Length() const override { return buffer_.length; }
  void* Contents() override { return buffer_.storageMode == MTLStorageModePrivate ? nullptr : buffer_.contents; }
  id<MTLBuffer> buffer() const { return buffer_; }

 private:
  id<MTLBuffer> buffer_;
};

class MetalPipeline : public mtl::Pipeline {
 public:
  explicit MetalPipeline(id<MTLComputePipelineState> pipeline) : pipeline_(pipeline) {}
  uint64_t MaxTotalThreadsPerThreadgroup() const override { return pipeline_.maxTotalThreadsPerThreadgroup; }
  uint64_t StaticThreadgroupMemoryLength() const override { return pipeline_.staticThreadgroupMemoryLength; }
  id<MTLComputePipelineState> pipeline() const { return pipeline_; }

 private:
  id<MTLComputePipelineState> pipeline_;
};

class MetalEncoder : public mtl::ComputeEncoder {
 public:
  explicit MetalEncoder(id<MTLComputeCommandEncoder> encoder) : encoder_(encoder) {}
  void SetPipeline(const mtl::Pipeline& p) override {
    [encoder_ setComputePipelineState:static_cast<const MetalPipeline&>(p).pipeline()];
  }
  void SetBuffer(mtl::Buffer& b, uint64_t offset, uint32_t index) override {
    [encoder_ setBuffer:static_cast<MetalBuffer&>(b).buffer() offset:offset atIndex:index];
  }
  void SetBytes(const void* data, uint64_t length, uint32_t index) override {
    [encoder_ setBytes:data length:length atIndex:index];
  }
  void SetThreadgroupMemoryLength(uint64_t length, uint32_t index) override {
    [encoder_ setThreadgroupMemoryLength:length atIndex:index];
  }
  void DispatchThreadgroups(uint64_t groups, uint64_t threads) override {
    [encoder_ dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(threads, 1, 1)];
  }
  void EndEncoding() override { [encoder_ endEncoding]; }

 private:
  id<MTLComputeCommandEncoder> encoder_;
};

// `holding`: the Metal command buffer that carries the work (tensorflow-metal
// hands out an MPSCommandBuffer, whose commits move on to new ones).
class MetalCommandBuffer : public mtl::CommandBuffer {
 public:
  MetalCommandBuffer(id<MTLCommandBuffer> buffer, id<MTLCommandBuffer> holding) : buffer_(buffer), holding_(holding) {}
  std::unique_ptr<mtl::ComputeEncoder> NewComputeEncoder() override {
    id<MTLComputeCommandEncoder> encoder = [buffer_ computeCommandEncoder];
    return encoder == nil ? nullptr : std::unique_ptr<mtl::ComputeEncoder>(new MetalEncoder(encoder));
  }
  void Commit() override { [buffer_ commit]; }
  void WaitUntilCompleted() override { [holding_ waitUntilCompleted]; }
  mtl::CommandStatus Status() override { return static_cast<mtl::CommandStatus>(holding_.status); }
  std::string Error() override {
    NSError* error = holding_.error;
    return error == nil ? std::string() : std::string(error.localizedDescription.UTF8String);
  }

 private:
  id<MTLCommandBuffer> buffer_;
  id<MTLCommandBuffer> holding_;
};

class MetalQueue : public mtl::CommandQueue {
 public:
  explicit MetalQueue(id<MTLCommandQueue> queue) : queue_(queue) {}
  std::unique_ptr<mtl::CommandBuffer> NewCommandBuffer() override {
    id<MTLCommandBuffer> buffer = [queue_ commandBuffer];
    return buffer == nil ? nullptr : std::unique_ptr<mtl::CommandBuffer>(new MetalCommandBuffer(buffer, buffer));
  }

 private:
  id<MTLCommandQueue> queue_;
};

class MetalDevice : public mtl::Device {
 public:
  explicit MetalDevice(id<MTLDevice> device) : device_(device) {}
  mtl::Limits GetLimits() override {
    return {device_.maxBufferLength, device_.maxThreadgroupMemoryLength, static_cast<uint64_t>(getpagesize()),
            static_cast<bool>([device_ supportsFamily:MTLGPUFamilyApple7])};
  }
  std::unique_ptr<mtl::Buffer> NewBufferNoCopy(void* data, uint64_t length) override {
    return WrapBuffer([device_ newBufferWithBytesNoCopy:data
                                               length:length
                                              options:MTLResourceStorageModeShared
                                          deallocator:nil]);
  }
  std::unique_ptr<mtl::Buffer> NewBufferWithBytes(const void* data, uint64_t length) override {
    return WrapBuffer([device_ newBufferWithBytes:data length:length options:MTLResourceStorageModeShared]);
  }
  std::unique_ptr<mtl::Buffer> NewBuffer(uint64_t length, mtl::Storage storage) override {
    return WrapBuffer([device_ newBufferWithLength:length
                                         options:(storage == mtl::Storage::kPrivate ? MTLResourceStorageModePrivate
                                                                                    : MTLResourceStorageModeShared)]);
  }
  const mtl::Pipeline* GetPipeline(const std::string& library, const std::string& function,
                                   std::string* error) override {
    TF_Status* status = TF_NewStatus();
    id<MTLComputePipelineState> pipeline = metal::GetPipeline(device_, library.c_str(), function, status);
    if (pipeline == nil) *error = TF_Message(status);
    TF_DeleteStatus(status);
    if (pipeline == nil) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<MetalPipeline>& entry = pipelines_[{library, function}];
    if (entry == nullptr) entry.reset(new MetalPipeline(pipeline));
    return entry.get();
  }
  std::unique_ptr<mtl::CommandQueue> NewCommandQueue() override {
    id<MTLCommandQueue> queue = [device_ newCommandQueue];
    return queue == nil ? nullptr : std::unique_ptr<mtl::CommandQueue>(new MetalQueue(queue));
  }

 private:
  id<MTLDevice> device_;
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<MetalPipeline>> pipelines_;
};

class MetalStream : public mtl::Stream {
 public:
  explicit MetalStream(id<TF_MetalStream> stream) : stream_(stream) {}
  void Sync(const std::function<void()>& body) override {
    dispatch_sync(stream_.queue, ^() {
      @autoreleasepool {
        body();
      }
    });
  }
  std::unique_ptr<mtl::CommandBuffer> CurrentCommandBuffer() override {
    id<MTLCommandBuffer> buffer = stream_.currentCommandBuffer;
    if (buffer == nil) return nullptr;
    id<MTLCommandBuffer> holding =
        [(id)buffer isKindOfClass:[MPSCommandBuffer class]] ? ((MPSCommandBuffer*)buffer).commandBuffer : buffer;
    return std::unique_ptr<mtl::CommandBuffer>(new MetalCommandBuffer(buffer, holding));
  }
  void Commit() override { [stream_ commit]; }
  void CommitAndWait() override { [stream_ commitAndWait]; }

 private:
  id<TF_MetalStream> stream_;
};

}  // namespace

mtl::Device* WrapDevice(id<MTLDevice> device) {
  static std::mutex* mutex = new std::mutex;
  static auto* devices = new std::map<uint64_t, MetalDevice*>;
  std::lock_guard<std::mutex> lock(*mutex);
  MetalDevice*& entry = (*devices)[device.registryID];
  if (entry == nullptr) entry = new MetalDevice(device);
  return entry;
}

std::unique_ptr<mtl::Buffer> WrapBuffer(id<MTLBuffer> buffer) {
  return buffer == nil ? nullptr : std::unique_ptr<mtl::Buffer>(new MetalBuffer(buffer));
}

std::unique_ptr<mtl::Stream> WrapStream(id<TF_MetalStream> stream) {
  return std::unique_ptr<mtl::Stream>(new MetalStream(stream));
}

}  // namespace metal

namespace metal_plan {

// The system's GPU (MTLCreateSystemDefaultDevice, which gives none in a
// process that does not link CoreGraphics; then the first of
// MTLCopyAllDevices) and its queue, made once for the process.
const Executor* OwnQueueExecutor(std::string* why_not) {
  static const Executor* own = [] {
    id<MTLDevice> device = MTLCreateSystemDefaultDevice();
    if (device == nil) device = MTLCopyAllDevices().firstObject;
    if (device == nil) return static_cast<Executor*>(nullptr);
    mtl::Device* gpu = metal::WrapDevice(device);
    mtl::CommandQueue* queue = gpu->NewCommandQueue().release();
    return queue == nullptr ? nullptr : new Executor{"own-queue", gpu, queue, nullptr};
  }();
  if (own == nullptr) *why_not = "this Mac has no Metal GPU (MTLCreateSystemDefaultDevice and MTLCopyAllDevices gave none)";
  return own;
}

// tensorflow-metal's stream class (read from its 1.2.0 binary): present when
// its plugin is loaded into this process.
bool TensorflowMetalLoaded() { return NSClassFromString(@"MetalStreamWrapper") != nil; }

}  // namespace metal_plan
}  // namespace mo

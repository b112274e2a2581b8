// Apple's Metal behind the host path's interface (metal_device.h): an adapter,
// one Metal call (or a direct sequence of them) per method; every decision is
// the C++ host path's (kernels/metal_plan/host_path.cc, metal_kernel.cc,
// pipeline_cache.h), run here against the strict model of Metal. Also the own
// queue's device and queue, made once for the process.
#import "kernels/metal/metal_device.h"

#import <Foundation/Foundation.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/metal/pipeline_cache.h"
#import "kernels/metal/tf_metal_stream.h"
#include "kernels/metal_plan/executor.h"

namespace mo {
namespace metal {
namespace {

std::string Describe(NSError* error) {
  return error == nil ? std::string() : std::string(error.localizedDescription.UTF8String);
}

// An interface object holding its Metal object.
template <typename Interface, typename Object>
class Holder : public Interface {
 public:
  explicit Holder(Object object) : object_(object) {}
  Object object() const { return object_; }

 protected:
  Object object_;
};

class MetalBuffer : public Holder<mtl::Buffer, id<MTLBuffer>> {
 public:
  using Holder::Holder;
  uint64_t Length() const override { return object_.length; }
  void* Contents() override { return object_.storageMode == MTLStorageModePrivate ? nullptr : object_.contents; }
};

// The adapter (a Holder) of a Metal object; nullptr where Metal gave nil.
template <typename Wrapper, typename Object>
std::unique_ptr<Wrapper> Wrap(Object object) {
  return object == nil ? nullptr : std::make_unique<Wrapper>(object);
}

// The adapter of the object `make` returns, made in an autorelease pool of
// its own (the object the adapter holds outlives the pool).
template <typename Wrapper, typename Make>
std::unique_ptr<Wrapper> WrapInPool(Make make) {
  @autoreleasepool {
    return Wrap<Wrapper>(make());
  }
}

class MetalPipeline : public Holder<mtl::Pipeline, id<MTLComputePipelineState>> {
 public:
  using Holder::Holder;
  uint64_t MaxTotalThreadsPerThreadgroup() const override { return object_.maxTotalThreadsPerThreadgroup; }
  uint64_t StaticThreadgroupMemoryLength() const override { return object_.staticThreadgroupMemoryLength; }
  uint64_t ThreadExecutionWidth() const override { return object_.threadExecutionWidth; }
};

class MetalEncoder : public Holder<mtl::ComputeEncoder, id<MTLComputeCommandEncoder>> {
 public:
  using Holder::Holder;
  void SetPipeline(const mtl::Pipeline& p) override {
    [object_ setComputePipelineState:static_cast<const MetalPipeline&>(p).object()];
  }
  void SetBuffer(mtl::Buffer& b, uint64_t offset, uint32_t index) override {
    [object_ setBuffer:MetalBufferOf(b) offset:offset atIndex:index];
  }
  void SetBytes(const void* data, uint64_t length, uint32_t index) override {
    [object_ setBytes:data length:length atIndex:index];
  }
  void SetThreadgroupMemoryLength(uint64_t length, uint32_t index) override {
    [object_ setThreadgroupMemoryLength:length atIndex:index];
  }
  void DispatchThreadgroups(uint64_t groups, uint64_t threads) override {
    [object_ dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(threads, 1, 1)];
  }
  void EndEncoding() override { [object_ endEncoding]; }
};

// A command buffer: the own queue's MTLCommandBuffer, or tensorflow-metal's
// MPSCommandBuffer, whose rootCommandBuffer carries the work after MPSGraph's
// commitAndContinue (the host path asks Root() before it waits).
class MetalCommandBuffer : public Holder<mtl::CommandBuffer, id<MTLCommandBuffer>> {
 public:
  using Holder::Holder;
  std::unique_ptr<mtl::ComputeEncoder> NewComputeEncoder() override {
    return WrapInPool<MetalEncoder>([&] { return [object_ computeCommandEncoder]; });
  }
  void Commit() override { [object_ commit]; }
  void WaitUntilCompleted() override { [object_ waitUntilCompleted]; }
  mtl::CommandStatus Status() override { return static_cast<mtl::CommandStatus>(object_.status); }
  std::string Error() override {
    @autoreleasepool {
      return Describe(object_.error);
    }
  }
  std::unique_ptr<mtl::CommandBuffer> Root() override {
    id<MTLCommandBuffer> root =
        [(id)object_ isKindOfClass:[MPSCommandBuffer class]] ? ((MPSCommandBuffer*)object_).rootCommandBuffer : object_;
    return Wrap<MetalCommandBuffer>(root);
  }
};

class MetalQueue : public Holder<mtl::CommandQueue, id<MTLCommandQueue>> {
 public:
  using Holder::Holder;
  std::unique_ptr<mtl::CommandBuffer> NewCommandBuffer() override {
    return WrapInPool<MetalCommandBuffer>([&] { return [object_ commandBuffer]; });
  }
};

// newLibraryWithSource of one compile's text (the pipeline cache's
// CompileUnit) with the language version its source asks for and fast
// math off (the shaders test for NaN and infinity). fastMathEnabled is
// deprecated in the macOS 15 SDK (mathMode replaces it) but is the API every
// supported macOS has.
id<MTLLibrary> CompileLibrary(id<MTLDevice> device, const CompileUnit& unit, std::string* error) {
  @autoreleasepool {
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    options.languageVersion =
        static_cast<MTLLanguageVersion>(MtlLanguageVersionValue({unit.source.msl_major, unit.source.msl_minor}));
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    options.fastMathEnabled = NO;
#pragma clang diagnostic pop
    NSError* failure = nil;
    id<MTLLibrary> library = [device newLibraryWithSource:@(unit.text.c_str()) options:options error:&failure];
    if (library == nil) *error = CompileFailure(unit) + ": " + Describe(failure);
    return library;
  }
}

// newFunctionWithName, then newComputePipelineStateWithDescriptor labelled
// with the function's name (it names the kernel in GPU errors and captures).
std::unique_ptr<mtl::Pipeline> BuildPipeline(id<MTLDevice> device, id<MTLLibrary> library, const std::string& function,
                                             std::string* error) {
  @autoreleasepool {
    MTLComputePipelineDescriptor* descriptor = [[MTLComputePipelineDescriptor alloc] init];
    descriptor.computeFunction = [library newFunctionWithName:@(function.c_str())];
    descriptor.label = @(function.c_str());
    NSError* failure = nil;
    id<MTLComputePipelineState> pipeline =
        descriptor.computeFunction == nil ? nil
                                          : [device newComputePipelineStateWithDescriptor:descriptor
                                                                                  options:MTLPipelineOptionNone
                                                                               reflection:nil
                                                                                    error:&failure];
    if (pipeline == nil) *error = "building the pipeline of Metal function '" + function + "' failed: " +
                                  (descriptor.computeFunction == nil ? "no such function" : Describe(failure));
    return Wrap<MetalPipeline>(pipeline);
  }
}

class MetalDevice : public Holder<mtl::Device, id<MTLDevice>> {
 public:
  using Holder::Holder;
  mtl::Limits GetLimits() override {
    return {object_.maxBufferLength, object_.maxThreadgroupMemoryLength, static_cast<uint64_t>(getpagesize()),
            static_cast<bool>([object_ supportsFamily:MTLGPUFamilyApple7]), Metal3()};
  }
  std::unique_ptr<mtl::Buffer> NewBufferNoCopy(void* data, uint64_t length) override {
    return Wrap<MetalBuffer>(
        [object_ newBufferWithBytesNoCopy:data length:length options:MTLResourceStorageModeShared deallocator:nil]);
  }
  std::unique_ptr<mtl::Buffer> NewBufferWithBytes(const void* data, uint64_t length) override {
    return Wrap<MetalBuffer>([object_ newBufferWithBytes:data length:length options:MTLResourceStorageModeShared]);
  }
  std::unique_ptr<mtl::Buffer> NewBuffer(uint64_t length, mtl::Storage storage) override {
    return Wrap<MetalBuffer>([object_ newBufferWithLength:length
                                     options:(storage == mtl::Storage::kPrivate ? MTLResourceStorageModePrivate
                                                                                : MTLResourceStorageModeShared)]);
  }
  const mtl::Pipeline* GetPipeline(const std::string& library, const std::string& function,
                                   std::string* error) override {
    id<MTLDevice> device = object_;
    return pipelines_.Get(
        library, function,
        MslVersionForDevice(Metal3()),
        [device](const CompileUnit& unit, std::string* e) { return CompileLibrary(device, unit, e); },
        [device](id<MTLLibrary> lib, const std::string& f, std::string* e) { return BuildPipeline(device, lib, f, e); },
        error);
  }
  std::unique_ptr<mtl::CommandQueue> NewCommandQueue() override {
    return Wrap<MetalQueue>([object_ newCommandQueue]);
  }

 private:
  bool Metal3() { return [object_ supportsFamily:static_cast<MTLGPUFamily>(kMtlGpuFamilyMetal3)]; }
  PipelineCache<id<MTLLibrary>> pipelines_;
};

class MetalStream : public Holder<mtl::Stream, id<TF_MetalStream>> {
 public:
  using Holder::Holder;
  void Sync(const std::function<void()>& body) override {
    dispatch_sync(object_.queue, ^() {
      @autoreleasepool {
        body();
      }
    });
  }
  std::unique_ptr<mtl::CommandBuffer> CurrentCommandBuffer() override {
    return Wrap<MetalCommandBuffer>(object_.currentCommandBuffer);
  }
  void Commit() override { [object_ commit]; }
  void CommitAndWait() override { [object_ commitAndWait]; }
};

// The interface's device for `device`, made once per MTLDevice (kept for the process).
mtl::Device* DeviceFor(id<MTLDevice> device) {
  static std::mutex* mutex = new std::mutex;
  static auto* devices = new std::map<uint64_t, MetalDevice*>;
  std::lock_guard<std::mutex> lock(*mutex);
  MetalDevice*& entry = (*devices)[device.registryID];
  if (entry == nullptr) entry = new MetalDevice(device);
  return entry;
}

// The tensor's data as an MTLBuffer, nil when it is none (nil, or an object
// that is not an MTLBuffer).
id<MTLBuffer> BufferOfTensorData(void* data) {
  id object = (__bridge id)data;
  return [object conformsToProtocol:@protocol(MTLBuffer)] ? (id<MTLBuffer>)object : nil;
}

}  // namespace

std::unique_ptr<mtl::Buffer> WrapTensorData(void* data) { return Wrap<MetalBuffer>(BufferOfTensorData(data)); }
mtl::Device* DeviceOfTensorData(void* data) {
  id<MTLBuffer> buffer = BufferOfTensorData(data);
  return buffer == nil ? nullptr : DeviceFor(buffer.device);
}
std::unique_ptr<mtl::Stream> WrapStream(void* stream) {
  return std::unique_ptr<mtl::Stream>(new MetalStream((__bridge id<TF_MetalStream>)stream));
}

id<MTLDevice> MetalDeviceOf(mtl::Device& device) { return static_cast<MetalDevice&>(device).object(); }
id<MTLBuffer> MetalBufferOf(mtl::Buffer& buffer) { return static_cast<MetalBuffer&>(buffer).object(); }
id<MTLCommandBuffer> MetalCommandBufferOf(mtl::CommandBuffer& command_buffer) {
  return static_cast<MetalCommandBuffer&>(command_buffer).object();
}

}  // namespace metal

namespace metal_plan {

mtl::Device* SystemDevice() {
  id<MTLDevice> device = MTLCreateSystemDefaultDevice();
  if (device == nil) device = MTLCopyAllDevices().firstObject;
  return device == nil ? nullptr : metal::DeviceFor(device);
}

// tensorflow-metal's stream class (read from its 1.2.0 binary): present when
// its plugin is loaded into this process.
bool TensorflowMetalLoaded() { return NSClassFromString(@"MetalStreamWrapper") != nil; }

}  // namespace metal_plan
}  // namespace mo

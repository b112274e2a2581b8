// The shared Metal host glue (see metal_kernel.h): pipelines compiled from the
// embedded shader sources, the encoder, the per-call state, attribute reads
// and kernel registration.
#import "kernels/metal/metal_kernel.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include "kernels/metal/embedded_sources.h"
#import "kernels/metal/metal_device.h"
#include "kernels/metal_plan/host_path.h"

namespace mo {
namespace metal {
namespace {

const EmbeddedMetalSource* FindSource(const char* library) {
  for (size_t i = 0; i < kNumEmbeddedMetalSources; ++i) {
    if (std::strcmp(kEmbeddedMetalSources[i].library, library) == 0) return &kEmbeddedMetalSources[i];
  }
  return nullptr;
}

std::string Describe(NSError* error) {
  if (error == nil) return "no error description";
  return std::string(error.localizedDescription.UTF8String);
}

// Caches live for the process (never destroyed: kernels may run during exit).
// The mutex guards the maps only, never a compile: each library and pipeline
// is built once under its own once_flag, so a compile blocks only callers
// that need that same library on that same device. A failure stays in its
// entry (code and message, the compiler's log included).
struct Built {
  std::once_flag once;
  TF_Code code = TF_OK;
  std::string error;
};
struct LibraryEntry : Built {
  id<MTLLibrary> library = nil;
};
struct PipelineEntry : Built {
  id<MTLComputePipelineState> pipeline = nil;
};

struct PipelineCache {
  std::mutex mutex;
  std::map<std::pair<uint64_t, std::string>, std::unique_ptr<LibraryEntry>> libraries;
  std::map<std::tuple<uint64_t, std::string, std::string>, std::unique_ptr<PipelineEntry>> pipelines;
};

PipelineCache& Cache() {
  static PipelineCache* cache = new PipelineCache;
  return *cache;
}

// The entry of `key` in `map`, created empty on first use.
template <typename Entry, typename Map, typename Key>
Entry* EntryOf(Map& map, const Key& key) {
  PipelineCache& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::unique_ptr<Entry>& entry = map[key];
  if (entry == nullptr) entry.reset(new Entry);
  return entry.get();
}

void Fail(Built* entry, TF_Code code, const std::string& message) {
  entry->code = code;
  entry->error = message;
}

void CompileLibrary(id<MTLDevice> device, const char* library, LibraryEntry* entry) {
  const EmbeddedMetalSource* source = FindSource(library);
  if (source == nullptr) {
    Fail(entry, TF_INTERNAL, std::string("metal_ops: no embedded Metal source named '") + library + "'");
    return;
  }
  const NSOperatingSystemVersion os = NSProcessInfo.processInfo.operatingSystemVersion;
  const MslVersion have = MslVersionForMacOS(static_cast<int>(os.majorVersion));
  const MslVersion need = {source->msl_major, source->msl_minor};
  if (!MslAtLeast(have, need)) {
    Fail(entry, TF_UNIMPLEMENTED,
         MslTooOldMessage(library, need, static_cast<int>(os.majorVersion), static_cast<int>(os.minorVersion)));
    return;
  }
  MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
  options.languageVersion = static_cast<MTLLanguageVersion>(MtlLanguageVersionValue(need));
  // The shaders test for NaN and infinity (bad rays, bounds); fast math may
  // fold those tests away. fastMathEnabled is deprecated in the macOS 15 SDK
  // (mathMode replaces it) but is the API every supported macOS has.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  options.fastMathEnabled = NO;
#pragma clang diagnostic pop
  NSError* error = nil;
  entry->library = [device newLibraryWithSource:@(source->source) options:options error:&error];
  if (entry->library == nil) {
    Fail(entry, TF_INTERNAL,
         std::string("metal_ops: compiling the Metal shaders of '") + library + "' (MSL " + MslVersionString(need) +
             ") failed: " + Describe(error));
  }
}

void BuildPipeline(id<MTLDevice> device, id<MTLLibrary> compiled, const char* library, const std::string& function,
                   PipelineEntry* entry) {
  id<MTLFunction> code = [compiled newFunctionWithName:@(function.c_str())];
  if (code == nil) {
    Fail(entry, TF_INTERNAL,
         "metal_ops: Metal function '" + function + "' is not in the shaders of '" + library + "'");
    return;
  }
  MTLComputePipelineDescriptor* descriptor = [[MTLComputePipelineDescriptor alloc] init];
  descriptor.computeFunction = code;
  descriptor.label = @(function.c_str());  // names the kernel in METAL_OPS_GPU_SYNC errors and GPU captures
  NSError* error = nil;
  entry->pipeline = [device newComputePipelineStateWithDescriptor:descriptor
                                                          options:MTLPipelineOptionNone
                                                       reflection:nil
                                                            error:&error];
  if (entry->pipeline == nil) {
    Fail(entry, TF_INTERNAL, "metal_ops: building the pipeline of Metal function '" + function +
                                 "' failed: " + Describe(error));
  }
}

}  // namespace

id<MTLComputePipelineState> GetPipeline(id<MTLDevice> device, const char* library, const std::string& function,
                                        TF_Status* status) {
  PipelineCache& cache = Cache();
  const uint64_t device_id = device.registryID;
  LibraryEntry* lib = EntryOf<LibraryEntry>(cache.libraries, std::make_pair(device_id, std::string(library)));
  std::call_once(lib->once, [&] { CompileLibrary(device, library, lib); });
  if (lib->library == nil) {
    TF_SetStatus(status, lib->code, lib->error.c_str());
    return nil;
  }
  PipelineEntry* entry =
      EntryOf<PipelineEntry>(cache.pipelines, std::make_tuple(device_id, std::string(library), function));
  std::call_once(entry->once, [&] { BuildPipeline(device, lib->library, library, function, entry); });
  if (entry->pipeline == nil) {
    TF_SetStatus(status, entry->code, entry->error.c_str());
    return nil;
  }
  return entry->pipeline;
}

// ---- Encoder -------------------------------------------------------------------------

Encoder::Encoder(id<MTLCommandBuffer> command_buffer, TF_Status* status)
    : command_buffer_(command_buffer), status_(status) {}

id<MTLBuffer> Encoder::BufferOf(TF_Tensor* tensor) {
  if (tensor == nullptr || !TensorHasMetalBuffer(TF_TensorElementCount(tensor))) return nil;
  return (__bridge id<MTLBuffer>)TF_TensorData(tensor);
}

id<MTLCommandBuffer> Encoder::ExternalEncoding(const std::string& what) {
  kernels_.push_back(what);
  return command_buffer_;
}

// ---- KernelCall ----------------------------------------------------------------------

KernelCall::KernelCall(TF_OpKernelContext* ctx) : ctx_(ctx), status_(TF_NewStatus()) {}

KernelCall::~KernelCall() {
  if (!ok()) TF_OpKernelContext_Failure(ctx_, status_);
  for (TF_Tensor* tensor : tensors_) TF_DeleteTensor(tensor);
  TF_DeleteStatus(status_);
}

void KernelCall::Fail(TF_Code code, const std::string& message) {
  if (ok()) TF_SetStatus(status_, code, message.c_str());
}

TF_Tensor* KernelCall::Keep(TF_Tensor* tensor) {
  if (tensor != nullptr) tensors_.push_back(tensor);
  return ok() ? tensor : nullptr;
}

TF_Tensor* KernelCall::Input(int index) {
  if (!ok()) return nullptr;
  TF_Tensor* tensor = nullptr;
  TF_GetInput(ctx_, index, &tensor, status_);
  return Keep(tensor);
}

namespace {
size_t ByteSize(TF_DataType dtype, const std::vector<int64_t>& dims) {
  size_t n = TF_DataTypeSize(dtype);
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n;
}
}  // namespace

TF_Tensor* KernelCall::Output(int index, TF_DataType dtype, const std::vector<int64_t>& dims) {
  if (!ok()) return nullptr;
  return Keep(TF_AllocateOutput(ctx_, index, dtype, dims.data(), static_cast<int>(dims.size()),
                                ByteSize(dtype, dims), status_));
}

TF_Tensor* KernelCall::Temp(TF_DataType dtype, const std::vector<int64_t>& dims) {
  if (!ok()) return nullptr;
  TF_AllocatorAttributes attrs;
  attrs.struct_size = TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE;
  attrs.on_host = 0;
  return Keep(TF_AllocateTemp(ctx_, dtype, dims.data(), static_cast<int>(dims.size()), &attrs, status_));
}

id<MTLDevice> KernelCall::Device() {
  if (!ok()) return nil;
  if (device_ != nil) return device_;
  for (TF_Tensor* tensor : tensors_) {
    id<MTLBuffer> buffer = Encoder::BufferOf(tensor);
    if (buffer != nil) {
      device_ = buffer.device;
      return device_;
    }
  }
  Fail(TF_INTERNAL, "metal_ops: no tensor of this call is a Metal buffer, so its GPU is unknown");
  return nil;
}

id<MTLComputePipelineState> KernelCall::Pipeline(const char* library, const std::string& function) {
  id<MTLDevice> device = Device();
  if (device == nil) return nil;
  return GetPipeline(device, library, function, status_);
}

bool KernelCall::CheckThreadgroups(id<MTLComputePipelineState> pipeline, uint32_t threads,
                                   uint32_t threadgroup_bytes) {
  id<MTLDevice> device = Device();
  if (device == nil || pipeline == nil) return false;
  const std::string misfit = ThreadgroupFitError(pipeline.maxTotalThreadsPerThreadgroup, threads,
                                                 pipeline.staticThreadgroupMemoryLength, threadgroup_bytes,
                                                 device.maxThreadgroupMemoryLength);
  if (!misfit.empty()) Fail(TF_UNIMPLEMENTED, misfit);
  return misfit.empty();
}

namespace {
std::string StatusName(MTLCommandBufferStatus status) {
  switch (status) {
    case MTLCommandBufferStatusNotEnqueued: return "not enqueued";
    case MTLCommandBufferStatusEnqueued: return "enqueued";
    case MTLCommandBufferStatusCommitted: return "committed";
    case MTLCommandBufferStatusScheduled: return "scheduled";
    case MTLCommandBufferStatusCompleted: return "completed";
    case MTLCommandBufferStatusError: return "error";
  }
  return "unknown (" + std::to_string(static_cast<unsigned long>(status)) + ")";
}
}  // namespace

id<MTLBuffer> KernelCall::SharedBuffer(size_t length) {
  id<MTLDevice> device = Device();
  if (!ok()) return nil;
  id<MTLBuffer> buffer = [device newBufferWithLength:(length > 0 ? length : 4) options:MTLResourceStorageModeShared];
  if (buffer == nil) {
    Fail(TF_RESOURCE_EXHAUSTED, "metal_ops: could not allocate a shared Metal buffer");
    return nil;
  }
  std::memset(buffer.contents, 0, buffer.length);
  return buffer;
}

namespace {
// The Metal command buffer that holds what was encoded on `command_buffer`:
// tensorflow-metal hands out an MPSCommandBuffer, whose commitAndContinue
// moves on to a new underlying buffer; the work stays on this one.
id<MTLCommandBuffer> HoldingBuffer(id<MTLCommandBuffer> command_buffer) {
  if ([(id)command_buffer isKindOfClass:[MPSCommandBuffer class]]) {
    return ((MPSCommandBuffer*)command_buffer).commandBuffer;
  }
  return command_buffer;
}

bool Submitted(id<MTLCommandBuffer> command_buffer) {
  const MTLCommandBufferStatus status = command_buffer.status;
  return status != MTLCommandBufferStatusNotEnqueued && status != MTLCommandBufferStatusEnqueued;
}
}  // namespace

void KernelCall::EncodeImpl(void (*fn)(void*, Encoder&), void* arg) {
  if (!ok()) return;
  id<TF_MetalStream> stream = (__bridge id<TF_MetalStream>)TF_GetStream(ctx_, status_);
  if (!ok()) return;
  if (stream == nil) {
    Fail(TF_INTERNAL, "metal_ops: the device gave no TF_MetalStream (is tensorflow-metal the GPU plugin?)");
    return;
  }
  TF_Status* status = status_;
  id<MTLDevice> device = device_;
  const bool sync = GpuSyncOn();
  __block std::string gpu_error;
  // With `sync`: the command buffer to wait for once the queue is released, and what it holds.
  __block id<MTLCommandBuffer> submitted = nil;
  __block std::vector<std::string> kernels;
  TF_OpKernelContext* ctx = ctx_;
  auto failure = [ctx](id<MTLCommandBuffer> command_buffer, const std::vector<std::string>& encoded) {
    if (command_buffer.status != MTLCommandBufferStatusError && command_buffer.error == nil) return std::string();
    const TF_StringView name = TF_GetOpKernelName(ctx);
    return GpuErrorMessage(std::string(name.data, name.len), encoded, StatusName(command_buffer.status),
                           Describe(command_buffer.error));
  };
  dispatch_sync(stream.queue, ^() {
    @autoreleasepool {
      id<MTLCommandBuffer> command_buffer = stream.currentCommandBuffer;
      if (device != nil && command_buffer.device != device) {
        TF_SetStatus(status, TF_INTERNAL,
                     "metal_ops: the stream's command buffer is on another GPU than the call's tensors");
        return;
      }
      Encoder encoder(command_buffer, status);
      fn(arg, encoder);
      if (!encoder.End()) return;
      if (!sync) {
        [stream commit];  // batched by tensorflow-metal: may submit later (top of metal_kernel.h)
        return;
      }
      // Submit without waiting here, so the wait below does not hold the
      // queue TensorFlow encodes every op on (dispatch_rules.h CommitUntilSubmitted).
      id<MTLCommandBuffer> holding = HoldingBuffer(command_buffer);
      if (CommitUntilSubmitted([&] { [stream commit]; }, [&] { return Submitted(holding); })) {
        submitted = holding;
        kernels = encoder.kernels();
        return;
      }
      [stream commitAndWait];
      gpu_error = failure(holding, encoder.kernels());
    }
  });
  if (submitted != nil) {
    [submitted waitUntilCompleted];
    gpu_error = failure(submitted, kernels);
  }
  if (!gpu_error.empty()) Fail(TF_INTERNAL, gpu_error);
}

// ---- AttrReader ----------------------------------------------------------------------

AttrReader::AttrReader(TF_OpKernelConstruction* ctx) : ctx_(ctx), status_(TF_NewStatus()) {}

AttrReader::~AttrReader() {
  Finish();
  TF_DeleteStatus(status_);
}

void AttrReader::InvalidArgument(const std::string& message) {
  if (ok()) TF_SetStatus(status_, TF_INVALID_ARGUMENT, message.c_str());
}

namespace {
// One TF_OpKernelConstruction_GetAttr<Type> call, skipped after a failure.
template <typename T, typename Getter>
T ReadAttr(TF_OpKernelConstruction* ctx, TF_Status* status, const char* name, Getter getter) {
  T value{};
  if (TF_GetCode(status) == TF_OK) getter(ctx, name, &value, status);
  return value;
}
}  // namespace

int32_t AttrReader::Int(const char* name) {
  return ReadAttr<int32_t>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrInt32);
}

int64_t AttrReader::Int64(const char* name) {
  return ReadAttr<int64_t>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrInt64);
}

float AttrReader::Float(const char* name) {
  return ReadAttr<float>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrFloat);
}

bool AttrReader::Bool(const char* name) {
  return ReadAttr<TF_Bool>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrBool) != 0;
}

std::string AttrReader::String(const char* name) {
  if (!ok()) return std::string();
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx_, name, &list_size, &total_size, status_);
  if (!ok() || total_size < 0) return std::string();
  std::string value(static_cast<size_t>(total_size), '\0');
  if (total_size > 0) {
    TF_OpKernelConstruction_GetAttrString(ctx_, name, &value[0], static_cast<size_t>(total_size), status_);
  }
  return value;
}

namespace {
// A list attribute: its size, then one TF_OpKernelConstruction_GetAttr<Type>List
// call; empty after a failure.
template <typename T, typename Getter>
std::vector<T> ReadListAttr(TF_OpKernelConstruction* ctx, TF_Status* status, const char* name, Getter getter) {
  if (TF_GetCode(status) != TF_OK) return {};
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total_size, status);
  if (TF_GetCode(status) != TF_OK || list_size < 0) return {};
  std::vector<T> values(static_cast<size_t>(list_size));
  if (list_size > 0) getter(ctx, name, values.data(), list_size, status);
  return values;
}
}  // namespace

std::vector<float> AttrReader::FloatList(const char* name) {
  return ReadListAttr<float>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrFloatList);
}

std::vector<int64_t> AttrReader::IntList(const char* name) {
  return ReadListAttr<int64_t>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrInt64List);
}

void AttrReader::Finish() {
  if (finished_) return;
  finished_ = true;
  if (!ok()) TF_OpKernelConstruction_Failure(ctx_, status_);
}

// ---- registration and small helpers --------------------------------------------------

bool RegisterKernel(const char* op, TF_DataType type, void* (*create)(TF_OpKernelConstruction*),
                    void (*compute)(void*, TF_OpKernelContext*), void (*destroy)(void*)) {
  TF_Status* status = TF_NewStatus();
  TF_KernelBuilder* builder = TF_NewKernelBuilder(op, "GPU", create, compute, destroy);
  if (type != kNoTypeConstraint) TF_KernelBuilder_TypeConstraint(builder, "T", type, status);
  if (TF_GetCode(status) == TF_OK) {
    TF_RegisterKernelBuilder((std::string(op) + "Metal").c_str(), builder, status);
  } else {
    TF_DeleteKernelBuilder(builder);
  }
  const bool registered = TF_GetCode(status) == TF_OK;
  TF_DeleteStatus(status);
  return registered;
}

metal_plan::Dtype PlanDtype(TF_DataType dtype) {
  switch (dtype) {
    case TF_HALF: return metal_plan::Dtype::kFloat16;
    case TF_INT32: return metal_plan::Dtype::kInt32;
    case TF_INT64: return metal_plan::Dtype::kInt64;
    default: return metal_plan::Dtype::kFloat32;
  }
}

std::vector<int64_t> DimsOf(TF_Tensor* tensor) {
  std::vector<int64_t> dims(static_cast<size_t>(TF_NumDims(tensor)));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = TF_Dim(tensor, static_cast<int>(d));
  return dims;
}


}  // namespace metal
}  // namespace mo

// ---- plans: the host path on tensorflow-metal's stream ---------------------------------

namespace mo {
namespace metal {

void KernelCall::RunPlan(const metal_plan::Plan& plan, const std::vector<PlanSlot>& slot_list, bool wait) {
  if (!ok() || plan.empty()) return;
  id<MTLDevice> device = Device();
  if (device == nil) return;
  id<TF_MetalStream> stream = (__bridge id<TF_MetalStream>)TF_GetStream(ctx_, status_);
  if (!ok()) return;
  if (stream == nil) {
    Fail(TF_INTERNAL, "metal_ops: the device gave no TF_MetalStream (is tensorflow-metal the GPU plugin?)");
    return;
  }
  std::vector<std::unique_ptr<mtl::Buffer>> owned;
  std::vector<metal_plan::BoundSlot> slots;
  std::vector<mtl::Buffer*> scratch;
  for (const PlanSlot& s : slot_list) {
    owned.push_back(WrapBuffer(s.tensor != nullptr ? Encoder::BufferOf(s.tensor) : s.buffer));
    slots.push_back({owned.back().get(), 0});
  }
  for (uint64_t bytes : plan.scratch) {
    owned.push_back(WrapBuffer(Encoder::BufferOf(Temp(TF_UINT8, {static_cast<int64_t>(bytes > 0 ? bytes : 1)}))));
    scratch.push_back(owned.back().get());
  }
  if (!ok()) return;
  metal_plan::Cost cost;
  const metal_plan::Result result =
      metal_plan::RunOnStream(*WrapStream(stream), *WrapDevice(device), plan, slots, scratch, wait, &cost);
  if (!result.ok()) {
    const TF_StringView name = TF_GetOpKernelName(ctx_);
    Fail(result.outcome == metal_plan::Outcome::kCpu ? TF_UNIMPLEMENTED : TF_INTERNAL,
         "metal_ops: op '" + std::string(name.data, name.len) + "': " + result.message);
  }
}

}  // namespace metal
}  // namespace mo

// The shared Metal host glue (see metal_kernel.h): the per-call state, plans
// and other encoders on the stream, attribute reads and kernel registration,
// over the interface to Metal (kernels/metal/metal_device.h). macOS builds only.
#include "kernels/metal/metal_kernel.h"

#include <cstring>
#include <optional>
#include <utility>

#include "kernels/metal/embedded_sources.h"
#include "kernels/metal/metal_device.h"
#include "kernels/metal/metal_rules.h"
#include "kernels/metal_plan/executor.h"

namespace mo {
namespace metal {

// ---- KernelCall ----------------------------------------------------------------------

KernelCall::~KernelCall() {
  buffers_.clear();
  for (TF_Tensor* tensor : tensors_) TF_DeleteTensor(tensor);
}

void KernelCall::Fail(TF_Code code, const std::string& message) {
  if (ok()) TF_SetStatus(status_, code, message.c_str());
}

std::string KernelCall::NodeName() const {
  const TF_StringView name = TF_GetOpKernelName(ctx_);
  return std::string(name.data, name.len);
}

void KernelCall::Refuse(const std::string& library, const std::string& reason) {
  Fail(TF_FAILED_PRECONDITION, StreamRefusalMessage(NodeName(), library, reason));
}

void KernelCall::FailResult(const metal_plan::Result& result, const std::string& library) {
  if (result.ok()) return;
  if (result.outcome == metal_plan::Outcome::kCpu) return Refuse(library, result.message);
  Fail(TF_INTERNAL, "metal_ops: op '" + NodeName() + "': " + result.message);
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

std::vector<TF_Tensor*> KernelCall::Inputs(int count) {
  std::vector<TF_Tensor*> tensors;
  for (int i = 0; i < count; ++i) tensors.push_back(Input(i));
  return tensors;
}

TF_Tensor* KernelCall::Output(int index, TF_DataType dtype, const std::vector<int64_t>& dims) {
  if (!ok()) return nullptr;
  size_t bytes = TF_DataTypeSize(dtype);
  for (int64_t d : dims) bytes *= static_cast<size_t>(d);
  return Keep(TF_AllocateOutput(ctx_, index, dtype, dims.data(), static_cast<int>(dims.size()), bytes, status_));
}

TF_Tensor* KernelCall::Temp(TF_DataType dtype, const std::vector<int64_t>& dims) {
  if (!ok()) return nullptr;
  TF_AllocatorAttributes attrs;
  attrs.struct_size = TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE;
  attrs.on_host = 0;
  return Keep(TF_AllocateTemp(ctx_, dtype, dims.data(), static_cast<int>(dims.size()), &attrs, status_));
}

mtl::Buffer* KernelCall::BufferOf(TF_Tensor* tensor) {
  if (tensor == nullptr || !TensorHasMetalBuffer(TF_TensorElementCount(tensor))) return nullptr;
  std::unique_ptr<mtl::Buffer> buffer = WrapTensorData(TF_TensorData(tensor));
  const std::string misfit =
      TensorBufferError(buffer != nullptr, buffer != nullptr ? buffer->Length() : 0, TF_TensorByteSize(tensor));
  if (!misfit.empty()) {
    Fail(TF_INTERNAL, misfit);
    return nullptr;
  }
  buffers_.push_back(std::move(buffer));
  return buffers_.back().get();
}

mtl::Device* KernelCall::Device() {
  if (!ok()) return nullptr;
  if (device_ != nullptr) return device_;
  for (TF_Tensor* tensor : tensors_) {
    if (TensorHasMetalBuffer(TF_TensorElementCount(tensor))) {
      device_ = DeviceOfTensorData(TF_TensorData(tensor));
      if (device_ == nullptr) Fail(TF_INTERNAL, "metal_ops: a tensor's data is not a Metal buffer, so its GPU is unknown");
      return device_;
    }
  }
  Fail(TF_INTERNAL, "metal_ops: no tensor of this call is a Metal buffer, so its GPU is unknown");
  return nullptr;
}

const mtl::Pipeline* KernelCall::Pipeline(const std::string& library, const std::string& function) {
  mtl::Device* device = Device();
  if (device == nullptr) return nullptr;
  std::string error;
  const mtl::Pipeline* pipeline = device->GetPipeline(library, function, &error);
  library_ = library;
  if (pipeline == nullptr) Refuse(library, function + ": " + error);
  return pipeline;
}

bool KernelCall::CheckSimdWidth(const mtl::Pipeline* pipeline) {
  if (!ok() || pipeline == nullptr) return false;
  const std::string narrow = SimdWidthError(pipeline->ThreadExecutionWidth());
  if (!narrow.empty()) Refuse(library_, narrow);
  return narrow.empty();
}

bool KernelCall::CheckThreadgroups(const mtl::Pipeline* pipeline, uint32_t threads, uint32_t threadgroup_bytes) {
  mtl::Device* device = Device();
  if (device == nullptr || pipeline == nullptr) return false;
  const std::string misfit =
      ThreadgroupFitError(pipeline->MaxTotalThreadsPerThreadgroup(), threads, pipeline->StaticThreadgroupMemoryLength(),
                          threadgroup_bytes, device->GetLimits().max_threadgroup_memory_length);
  if (!misfit.empty()) Refuse(library_, misfit);
  return misfit.empty();
}

mtl::Buffer* KernelCall::SharedBuffer(size_t length) {
  mtl::Device* device = Device();
  if (device == nullptr) return nullptr;
  std::unique_ptr<mtl::Buffer> buffer = device->NewBuffer(length > 0 ? length : 4, mtl::Storage::kShared);
  if (buffer == nullptr) {
    Fail(TF_RESOURCE_EXHAUSTED, "metal_ops: could not allocate a shared Metal buffer of " + std::to_string(length) +
                                    " bytes");
    return nullptr;
  }
  std::memset(buffer->Contents(), 0, static_cast<size_t>(buffer->Length()));
  buffers_.push_back(std::move(buffer));
  return buffers_.back().get();
}

std::unique_ptr<mtl::Stream> KernelCall::Stream() {
  if (!ok()) return nullptr;
  void* stream = TF_GetStream(ctx_, status_);
  if (!ok()) return nullptr;
  if (stream == nullptr) {
    Fail(TF_INTERNAL, "metal_ops: the device gave no TF_MetalStream (is tensorflow-metal the GPU plugin?)");
    return nullptr;
  }
  return WrapStream(stream);
}

void KernelCall::RunPlan(const metal_plan::Plan& plan, const std::vector<PlanSlot>& slot_list, bool wait) {
  if (!ok() || plan.empty()) return;
  mtl::Device* device = Device();
  std::unique_ptr<mtl::Stream> stream = Stream();
  if (device == nullptr || stream == nullptr) return;
  std::vector<metal_plan::BoundSlot> slots;
  for (const PlanSlot& s : slot_list) slots.push_back({s.tensor != nullptr ? BufferOf(s.tensor) : s.buffer, 0});
  std::vector<mtl::Buffer*> scratch;
  for (uint64_t bytes : plan.scratch) {
    scratch.push_back(BufferOf(Temp(TF_UINT8, {static_cast<int64_t>(bytes > 0 ? bytes : 1)})));
  }
  if (!ok()) return;
  metal_plan::Cost cost;
  FailResult(metal_plan::RunOnStream(*stream, *device, plan, slots, scratch, wait, &cost), plan.passes.front().library);
}

void KernelCall::RunPointwise(TF_Tensor* like, const std::vector<int64_t>& dims, int64_t point_size,
                              std::vector<PlanSlot> inputs,
                              const std::function<metal_plan::Plan(metal_plan::Dtype, int64_t)>& plan) {
  if (!ok()) return;
  const TF_DataType dtype = TF_TensorType(like);
  TF_Tensor* output = Output(0, dtype, dims);
  const int64_t points = TF_TensorElementCount(like) / point_size;
  if (!ok() || points == 0) return;
  inputs.push_back(output);
  RunPlan(plan(PlanDtype(dtype), points), inputs);
}

void KernelCall::EncodeOnStream(const std::string& what,
                                const std::function<std::string(mtl::CommandBuffer&)>& encode) {
  std::unique_ptr<mtl::Stream> stream = Stream();
  if (stream == nullptr) return;
  metal_plan::Cost cost;
  FailResult(metal_plan::EncodeOnStream(
      *stream, what,
      [&](mtl::CommandBuffer& command_buffer) {
        const std::string why = encode(command_buffer);
        return why.empty() ? metal_plan::Result{} : metal_plan::Result{metal_plan::Outcome::kError, why};
      },
      false, &cost));
}

// ---- AttrReader ----------------------------------------------------------------------

bool AttrReader::Check(const checks::Result& result) {
  if (!result.ok && ok()) TF_SetStatus(status_, TF_INVALID_ARGUMENT, result.message.c_str());
  return result.ok;
}

namespace {
// One TF_OpKernelConstruction_GetAttr<Type> call, skipped after a failure.
template <typename T, typename V, typename Getter>
bool ReadAttr(TF_OpKernelConstruction* ctx, TF_Status* status, const char* name, Getter getter, V* out) {
  T value{};
  if (TF_GetCode(status) == TF_OK) getter(ctx, name, &value, status);
  *out = static_cast<V>(value);
  return TF_GetCode(status) == TF_OK;
}

// A list attribute: its size, then one TF_OpKernelConstruction_GetAttr<Type>List
// call; empty after a failure.
template <typename T, typename Getter>
bool ReadListAttr(TF_OpKernelConstruction* ctx, TF_Status* status, const char* name, Getter getter,
                  std::vector<T>* values) {
  values->clear();
  if (TF_GetCode(status) != TF_OK) return false;
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total_size, status);
  if (TF_GetCode(status) != TF_OK || list_size < 0) return false;
  values->resize(static_cast<size_t>(list_size));
  if (list_size > 0) getter(ctx, name, values->data(), list_size, status);
  return TF_GetCode(status) == TF_OK;
}
}  // namespace

bool AttrReader::Get(const char* name, int* value) {
  return ReadAttr<int32_t>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrInt32, value);
}
bool AttrReader::Get(const char* name, int64_t* value) {
  return ReadAttr<int64_t>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrInt64, value);
}
bool AttrReader::Get(const char* name, float* value) {
  return ReadAttr<float>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrFloat, value);
}
bool AttrReader::Get(const char* name, bool* value) {
  TF_Bool raw = 0;
  const bool read = ReadAttr<TF_Bool>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrBool, &raw);
  *value = raw != 0;
  return read;
}
bool AttrReader::Get(const char* name, std::vector<float>* value) {
  return ReadListAttr<float>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrFloatList, value);
}
bool AttrReader::Get(const char* name, std::vector<int64_t>* value) {
  return ReadListAttr<int64_t>(ctx_, status_, name, &TF_OpKernelConstruction_GetAttrInt64List, value);
}

bool AttrReader::Get(const char* name, std::string* value) {
  value->clear();
  if (!ok()) return false;
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx_, name, &list_size, &total_size, status_);
  if (!ok() || total_size < 0) return false;
  value->resize(static_cast<size_t>(total_size));
  if (total_size > 0) {
    TF_OpKernelConstruction_GetAttrString(ctx_, name, &(*value)[0], static_cast<size_t>(total_size), status_);
  }
  return ok();
}

// ---- registration and small helpers --------------------------------------------------

namespace {
// The answers of the GPU that tensorflow-metal's device runs on (the
// system's GPU: supportsFamily:MTLGPUFamilyMetal3 and Apple7), asked once.
// nullptr where there is nothing to ask (tensorflow-metal is not loaded: no
// GPU device runs these kernels; no Metal device: none is made).
const GpuFeatures* Gpu() {
  static const std::optional<GpuFeatures> features = []() -> std::optional<GpuFeatures> {
    mtl::Device* gpu = metal_plan::TensorflowMetalLoaded() ? metal_plan::SystemDevice() : nullptr;
    if (gpu == nullptr) return std::nullopt;
    const mtl::Limits limits = gpu->GetLimits();
    return GpuFeatures{MslVersionForDevice(limits.metal3), limits.apple7};
  }();
  return features.has_value() ? &*features : nullptr;
}
}  // namespace

bool RegisterKernel(const char* op, TF_DataType type, void* (*create)(TF_OpKernelConstruction*),
                    void (*compute)(void*, TF_OpKernelContext*), void (*destroy)(void*), const char* file) {
  const GpuFeatures* gpu = Gpu();
  const std::string refusal =
      gpu == nullptr ? std::string()
                     : GpuRegistrationRefusal(file, *gpu, TfMetalOffSetting(), kEmbeddedMetalSources,
                                              kNumEmbeddedMetalSources);
  if (!refusal.empty()) {
    metal_plan::LeaveToCpu(op, refusal);
    return true;
  }
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

namespace {
void* CreateNothing(TF_OpKernelConstruction*) { return nullptr; }
void DeleteNothing(void*) {}
}  // namespace

bool RegisterStateless(const char* op, void (*forward)(void*, TF_OpKernelContext*), const char* grad_op,
                       void (*backward)(void*, TF_OpKernelContext*), std::initializer_list<TF_DataType> types,
                       const char* file) {
  bool ok = true;
  for (TF_DataType type : types) {
    ok = RegisterKernel(op, type, &CreateNothing, forward, &DeleteNothing, file) && ok;
    ok = RegisterKernel(grad_op, type, &CreateNothing, backward, &DeleteNothing, file) && ok;
  }
  return ok;
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

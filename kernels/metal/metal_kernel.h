// The shared host glue of every Metal kernel (kernel C API + tensorflow-metal's
// TF_MetalStream), so each op's *_metal.mm holds only what is specific to it:
//
//   void Compute(void* kernel, mo::metal::KernelCall& call) {
//     TF_Tensor* x = call.Input(0);
//     ... checks: call.InvalidArgument("...") ...
//     TF_Tensor* y = call.Output(0, TF_FLOAT, {n});
//     id<MTLComputePipelineState> p = call.Pipeline("my_op", "my_op_forward");
//     if (!call.ok()) return;
//     call.Encode([&](mo::metal::Encoder& e) {
//       e.Tensor(0, x).Tensor(1, y).Value(2, params).Dispatch(p, n);
//     });
//   }
//   mo::metal::RegisterKernel("MetalOpsMyOp", TF_FLOAT, &Create, &mo::metal::Compute<MyCompute>, &Delete);
//
// What it takes care of: an autorelease pool around every Compute and every
// queue block (TF's executor threads live as long as the process); pipelines
// compiled once per device from the shader sources embedded in the library,
// before and outside the stream's queue (a compile never holds the queue or a
// lock other devices or libraries wait on; a failure is remembered with the
// compiler's log and reported again at once); every check before the first
// encode; reading the stream's currentCommandBuffer and encoding only inside
// dispatch_sync(stream.queue) (tensorflow-metal creates the buffer lazily and
// its commit drops it on that queue); never binding an empty tensor's data as
// a buffer; status reporting and tensor cleanup.
//
// Submission: after encoding, the glue calls the stream's `commit`, which in
// tensorflow-metal 1.2.0 is not a submit (tf_metal_stream.h): it commits only
// every MPS_MAX_COMMIT_COUNT-th call (2 by default). Nothing here reads a
// result on the CPU or waits for the GPU, so nothing relies on the work having
// run or even been submitted when Compute returns; TensorFlow's own
// synchronisation (device-to-host copies) orders later reads. With
// METAL_OPS_GPU_SYNC=1 (dispatch_rules.h) every op instead waits for its command
// buffer (outside the queue) and turns a failed one into its error; RayMarch
// (the count decides its outputs' shapes) and PackedVolumeRender (its
// validation passes' error) always wait so.
#ifndef MO_KERNELS_METAL_METAL_KERNEL_H_
#define MO_KERNELS_METAL_METAL_KERNEL_H_

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/metal/metal_rules.h"
#include "kernels/metal_plan/plan.h"
#include "kernels/spec/checks.h"
#import "kernels/metal/tf_metal_stream.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

namespace mo {
namespace metal {

// The pipeline of `function` in the embedded shader library `library` (the
// stem of a kernels/metal/<library>.metal file), compiled on first use per
// device and cached for the process (labelled with the function's name).
// nil, with `status` set naming the function (and the compiler's log), on
// failure; a failure is cached too, so later calls fail at once with the same
// message. Never call it inside the stream's queue (KernelCall::Pipeline).
id<MTLComputePipelineState> GetPipeline(id<MTLDevice> device, const char* library, const std::string& function,
                                        TF_Status* status);

// The stream's command buffer while the stream's queue is held, handed out by
// KernelCall::Encode to encoders of others (MPSGraph); the plans encode
// through the host path instead (KernelCall::RunPlan).
class Encoder {
 public:
  Encoder(id<MTLCommandBuffer> command_buffer, TF_Status* status);
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  bool ok() const { return TF_GetCode(status_) == TF_OK; }
  TF_Status* status() const { return status_; }
  id<MTLCommandBuffer> command_buffer() const { return command_buffer_; }
  // What was encoded ("MPSGraph <op>"), for error messages.
  const std::vector<std::string>& kernels() const { return kernels_; }

  // A tensor's MTLBuffer; nil for an empty tensor, whose data is no buffer
  // (TensorHasMetalBuffer).
  static id<MTLBuffer> BufferOf(TF_Tensor* tensor);

  // The command buffer for work encoded by others (MPS, MPSGraph), `what`
  // naming it; counts as encoded work.
  id<MTLCommandBuffer> ExternalEncoding(const std::string& what);
  // True when any work was encoded.
  bool End() const { return !kernels_.empty(); }

 private:
  std::vector<std::string> kernels_;
  id<MTLCommandBuffer> command_buffer_;
  TF_Status* status_;
};

// One Compute call: owns the status and every tensor it hands out, reports
// the failure to TensorFlow and frees them when it goes out of scope.
class KernelCall {
 public:
  explicit KernelCall(TF_OpKernelContext* ctx);
  ~KernelCall();
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;

  bool ok() const { return TF_GetCode(status_) == TF_OK; }
  TF_Status* status() const { return status_; }
  TF_OpKernelContext* context() const { return ctx_; }
  void Fail(TF_Code code, const std::string& message);
  void InvalidArgument(const std::string& message) { Fail(TF_INVALID_ARGUMENT, message); }
  // One of the kernels/<op>/<op>_spec.h checks: false (the call failed with its
  // message) when it did not pass.
  bool Check(const checks::Result& result) {
    if (!result.ok) InvalidArgument(result.message);
    return result.ok;
  }

  // nullptr once the call has failed (every later step is then skipped).
  TF_Tensor* Input(int index);
  TF_Tensor* Output(int index, TF_DataType dtype, const std::vector<int64_t>& dims);
  TF_Tensor* Temp(TF_DataType dtype, const std::vector<int64_t>& dims);

  // The GPU the call runs on: the device of the MTLBuffer of any non-empty
  // tensor it holds (tensorflow-metal makes every one an MTLBuffer), found
  // without touching the stream's queue. nil, failing the call, when it holds
  // none.
  id<MTLDevice> Device();
  // GetPipeline on Device(), outside the stream's queue. Take every pipeline
  // (and make every check) before Encode, so a failure encodes nothing.
  id<MTLComputePipelineState> Pipeline(const char* library, const std::string& function);
  // Whether `pipeline` can run threadgroups of `threads` threads with
  // `threadgroup_bytes` of threadgroup memory on Device() (else the call
  // fails with TF_UNIMPLEMENTED saying why: dispatch_rules.h ThreadgroupFitError).
  bool CheckThreadgroups(id<MTLComputePipelineState> pipeline, uint32_t threads, uint32_t threadgroup_bytes);

  // Runs body(Encoder&) inside dispatch_sync(stream.queue) and an autorelease
  // pool, on the stream's current command buffer, then, if the body encoded
  // anything, calls the stream's commit (batched: see the top of this file)
  // or, with METAL_OPS_GPU_SYNC=1, submits it, waits outside the queue and
  // checks the command buffer's status. Does nothing once the call has failed.
  template <typename Body>
  void Encode(Body&& body) {
    using B = typename std::remove_reference<Body>::type;
    EncodeImpl([](void* arg, Encoder& encoder) { (*static_cast<B*>(arg))(encoder); }, &body);
  }
  // A plan's tensor slot: a tensor of the call, or a buffer of its own (SharedBuffer).
  struct PlanSlot {
    PlanSlot(TF_Tensor* t) : tensor(t) {}        // NOLINT: implicit, as the slot lists read
    PlanSlot(id<MTLBuffer> b) : buffer(b) {}     // NOLINT
    TF_Tensor* tensor = nullptr;
    id<MTLBuffer> buffer = nil;
  };
  // Runs an op's Metal plan (kernels/metal_plan/plan.h) on the stream
  // through the host path (kernels/metal_plan/host_path.h RunOnStream):
  // `slots` are the plan's tensor slots in order; scratch buffers are
  // temporary tensors. With `wait` it returns once the GPU has completed the
  // work (the CPU then reads the plan's SharedBuffer slots). Does nothing
  // once the call has failed or for a plan without passes.
  void RunPlan(const metal_plan::Plan& plan, const std::vector<PlanSlot>& slots, bool wait = false);
  void RunPlan(const metal_plan::Plan& plan, std::initializer_list<PlanSlot> slots, bool wait = false) {
    RunPlan(plan, std::vector<PlanSlot>(slots), wait);
  }

  // A buffer of `length` bytes in shared storage on Device(), zeroed, which
  // the CPU can read once the work writing it has completed (RunPlan with `wait`);
  // nil, failing the call, if it cannot be made.
  id<MTLBuffer> SharedBuffer(size_t length);

 private:
  void EncodeImpl(void (*fn)(void*, Encoder&), void* arg);
  TF_Tensor* Keep(TF_Tensor* tensor);

  TF_OpKernelContext* ctx_;
  TF_Status* status_;
  std::vector<TF_Tensor*> tensors_;
  id<MTLDevice> device_ = nil;
};

// The TF compute callback for `F(void* kernel, KernelCall&)`, inside an
// autorelease pool.
template <void (*F)(void*, KernelCall&)>
void Compute(void* kernel, TF_OpKernelContext* ctx) {
  @autoreleasepool {
    KernelCall call(ctx);
    F(kernel, call);
  }
}

// Attribute reads during kernel construction; the first failure sticks and
// is reported by Finish().
class AttrReader {
 public:
  explicit AttrReader(TF_OpKernelConstruction* ctx);
  ~AttrReader();
  AttrReader(const AttrReader&) = delete;
  AttrReader& operator=(const AttrReader&) = delete;

  bool ok() const { return TF_GetCode(status_) == TF_OK; }
  void InvalidArgument(const std::string& message);
  bool Check(const checks::Result& result) {
    if (!result.ok) InvalidArgument(result.message);
    return result.ok;
  }
  int32_t Int(const char* name);
  int64_t Int64(const char* name);
  float Float(const char* name);
  bool Bool(const char* name);
  std::string String(const char* name);
  std::vector<int64_t> IntList(const char* name);
  std::vector<float> FloatList(const char* name);
  // One attribute into *value: true when it was read (else the failure sticks).
  bool Get(const char* name, int* value) { *value = Int(name); return ok(); }
  bool Get(const char* name, int64_t* value) { *value = Int64(name); return ok(); }
  bool Get(const char* name, float* value) { *value = Float(name); return ok(); }
  bool Get(const char* name, bool* value) { *value = Bool(name); return ok(); }
  bool Get(const char* name, std::string* value) { *value = String(name); return ok(); }
  bool Get(const char* name, std::vector<float>* value) { *value = FloatList(name); return ok(); }
  bool Get(const char* name, std::vector<int64_t>* value) { *value = IntList(name); return ok(); }
  // The reader an op's ReadAttrs(get, &attrs) takes (kernels/<op>/<op>_spec.h):
  //   reader.Check(mo::<op>::ReadAttrs(reader.Getter(), &attrs));
  auto Getter() {
    return [this](const char* name, auto* value) { return Get(name, value); };
  }
  // Reports a failure to TensorFlow (the kernel then never runs).
  void Finish();

 private:
  TF_OpKernelConstruction* ctx_;
  TF_Status* status_;
  bool finished_ = false;
};

// The create and delete callbacks of a kernel whose state is its op's
// attributes: the Attrs of kernels/<op>/<op>_spec.h, read and checked by its
// ReadAttrs(get, args..., &attrs) (found by the type of `attrs`), as the
// shape function and the C++ kernels read them. A failure is reported to
// TensorFlow, which then never runs the kernel.
template <typename Attrs, auto... args>
void* CreateWithAttrs(TF_OpKernelConstruction* ctx) {
  auto* attrs = new Attrs;
  AttrReader reader(ctx);
  reader.Check(ReadAttrs(reader.Getter(), args..., attrs));
  return attrs;
}

template <typename Attrs>
void DeleteAttrs(void* attrs) {
  delete static_cast<Attrs*>(attrs);
}

// Registers `compute` for `op` on the Metal device ("GPU"), constrained to
// `type` for the attribute "T" unless `type` is kNoTypeConstraint.
constexpr TF_DataType kNoTypeConstraint = static_cast<TF_DataType>(0);
bool RegisterKernel(const char* op, TF_DataType type, void* (*create)(TF_OpKernelConstruction*),
                    void (*compute)(void*, TF_OpKernelContext*), void (*destroy)(void*));

// Registers `compute` for `op` for each of `types`, with the op's attributes
// as the kernel's state (CreateWithAttrs<Attrs, args...>, DeleteAttrs<Attrs>).
template <typename Attrs, auto... args>
bool RegisterWithAttrs(const char* op, std::initializer_list<TF_DataType> types,
                       void (*compute)(void*, TF_OpKernelContext*)) {
  bool ok = true;
  for (TF_DataType type : types) {
    ok = RegisterKernel(op, type, &CreateWithAttrs<Attrs, args...>, compute, &DeleteAttrs<Attrs>) && ok;
  }
  return ok;
}

// For ops whose kernels keep no state.
inline void* CreateNothing(TF_OpKernelConstruction*) { return nullptr; }
inline void DeleteNothing(void*) {}

std::vector<int64_t> DimsOf(TF_Tensor* tensor);
// The plan's element type of a registered dtype (float32 for anything but
// half / int32 / int64: the kernels register no other).
metal_plan::Dtype PlanDtype(TF_DataType dtype);
using checks::ShapeString;

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_METAL_KERNEL_H_

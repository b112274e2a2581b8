// The shared host glue of every Metal kernel (kernel C API + tensorflow-metal's
// TF_MetalStream), plain C++ over the interface to Metal
// (kernels/metal_plan/metal_api.h), so each op's <op>_metal.cc holds only what
// is specific to it:
//
//   void Compute(void* kernel, mo::metal::KernelCall& call) {
//     TF_Tensor* x = call.Input(0);
//     ... checks: call.Check(mo::my_op::Shapes(...)) ...
//     TF_Tensor* y = call.Output(0, TF_FLOAT, {n});
//     if (!call.ok()) return;
//     call.RunPlan(mo::metal_plan::MyOp(...), {x, y});
//   }
//   mo::metal::RegisterWithAttrs<mo::my_op::Attrs>("MetalOpsMyOp", {TF_FLOAT}, &mo::metal::Compute<Compute>);
//
// What it takes care of: pipelines compiled once per device from the shader
// sources embedded in the library (the device's GetPipeline), before and
// outside the stream's queue; every check before the first encode; reading
// the stream's currentCommandBuffer and encoding only inside its queue
// (kernels/metal_plan/host_path.h RunOnStream, EncodeOnStream); never
// binding an empty tensor's data as a buffer; status reporting and tensor
// cleanup. The Objective-C++ under it (kernels/metal/metal_device.mm) makes
// one Metal call per method and holds the autorelease pools.
//
// Submission: after encoding, the stream's `commit`, which in
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

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/metal_plan/host_path.h"
#include "kernels/metal_plan/metal_api.h"
#include "kernels/metal_plan/plan.h"
#include "kernels/spec/checks.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

namespace mo {
namespace metal {

// A TF_Status of a kernel callback's context: the first failure sticks and
// goes to TensorFlow through `Report` (TF_OpKernelContext_Failure,
// TF_OpKernelConstruction_Failure) when the holder goes out of scope.
template <typename Context, void (*Report)(Context*, TF_Status*)>
class ContextStatus {
 public:
  explicit ContextStatus(Context* ctx) : ctx_(ctx), status_(TF_NewStatus()) {}
  ~ContextStatus() {
    if (!ok()) Report(ctx_, status_);
    TF_DeleteStatus(status_);
  }
  ContextStatus(const ContextStatus&) = delete;
  ContextStatus& operator=(const ContextStatus&) = delete;

  bool ok() const { return TF_GetCode(status_) == TF_OK; }
  Context* context() const { return ctx_; }

 protected:
  Context* ctx_;
  TF_Status* status_;
};

// One Compute call: owns the status and every tensor and buffer it hands out,
// reports the failure to TensorFlow and frees them when it goes out of scope.
class KernelCall : public ContextStatus<TF_OpKernelContext, &TF_OpKernelContext_Failure> {
 public:
  using ContextStatus::ContextStatus;
  ~KernelCall();

  void Fail(TF_Code code, const std::string& message);
  // One of the kernels/<op>/<op>_spec.h checks: false (the call failed with its
  // message) when it did not pass.
  bool Check(const checks::Result& result) {
    if (!result.ok) Fail(TF_INVALID_ARGUMENT, result.message);
    return result.ok;
  }

  // nullptr once the call has failed (every later step is then skipped).
  TF_Tensor* Input(int index);
  // Inputs 0 .. count - 1 (nullptr from the first that fails on).
  std::vector<TF_Tensor*> Inputs(int count);
  TF_Tensor* Output(int index, TF_DataType dtype, const std::vector<int64_t>& dims);
  TF_Tensor* Temp(TF_DataType dtype, const std::vector<int64_t>& dims);

  // The GPU the call runs on: the device of the Metal buffer of any non-empty
  // tensor it holds (tensorflow-metal makes every one a buffer), found
  // without touching the stream's queue. nullptr, failing the call, when it
  // holds none.
  mtl::Device* Device();
  // Fails the call because this GPU cannot run the kernel of `library`
  // (`reason`), as only the call finds out: TF_FAILED_PRECONDITION with
  // metal_rules.h StreamRefusalMessage (the setting that places the
  // library's ops on the CPU; what is decided as the library loads is
  // GpuRegistrationRefusal's). docs/METAL_COMPAT.md says why the CPU kernel
  // does not take the call over.
  void Refuse(const std::string& library, const std::string& reason);
  // The pipeline of `function` in the embedded shader library `library` on
  // Device(), outside the stream's queue; nullptr, failing the call
  // (Refuse), when it does not compile. Take every pipeline (and make every
  // check) before encoding.
  const mtl::Pipeline* Pipeline(const std::string& library, const std::string& function);
  // Whether `pipeline` (the last one Pipeline gave) runs the 32-wide
  // SIMD-groups the simdgroup_matrix shaders assume (else the call is refused
  // saying why: dispatch_rules.h SimdWidthError).
  bool CheckSimdWidth(const mtl::Pipeline* pipeline);
  // Whether `pipeline` (the last one Pipeline gave) can run threadgroups of
  // `threads` threads with `threadgroup_bytes` of threadgroup memory on
  // Device() (else the call is refused saying why: dispatch_rules.h
  // ThreadgroupFitError).
  bool CheckThreadgroups(const mtl::Pipeline* pipeline, uint32_t threads, uint32_t threadgroup_bytes);

  // A plan's tensor slot: a tensor of the call, or a buffer of its own (SharedBuffer).
  struct PlanSlot {
    PlanSlot(TF_Tensor* t) : tensor(t) {}     // NOLINT: implicit, as the slot lists read
    PlanSlot(mtl::Buffer* b) : buffer(b) {}   // NOLINT
    TF_Tensor* tensor = nullptr;
    mtl::Buffer* buffer = nullptr;
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
  // An op over points of `point_size` elements of `like`: allocates output 0
  // of `dims` in `like`'s dtype and runs `plan(dtype, points)` with `inputs`
  // and that output as its slots (no plan for 0 points).
  void RunPointwise(TF_Tensor* like, const std::vector<int64_t>& dims, int64_t point_size,
                    std::vector<PlanSlot> inputs,
                    const std::function<metal_plan::Plan(metal_plan::Dtype, int64_t)>& plan);
  // Work encoded by others (MPSGraph) on the stream's command buffer, `what`
  // naming it (kernels/metal_plan/host_path.h EncodeOnStream): `encode`
  // returns "" or why it encoded nothing.
  void EncodeOnStream(const std::string& what, const std::function<std::string(mtl::CommandBuffer&)>& encode);

  // The Metal buffer of a non-empty tensor of the call; nullptr for an
  // empty one, whose data is no buffer (metal_rules.h TensorHasMetalBuffer).
  mtl::Buffer* BufferOf(TF_Tensor* tensor);
  // A buffer of `length` bytes in shared storage on Device(), zeroed, which
  // the CPU can read once the work writing it has completed (RunPlan with
  // `wait`); nullptr, failing the call, if it cannot be made.
  mtl::Buffer* SharedBuffer(size_t length);

 private:
  TF_Tensor* Keep(TF_Tensor* tensor);
  std::unique_ptr<mtl::Stream> Stream();
  std::string NodeName() const;  // TF_GetOpKernelName
  // Refuse(library, message) for an Outcome::kCpu result (a plan of
  // `library` this GPU cannot run), else "metal_ops: op '<name>': <message>".
  void FailResult(const metal_plan::Result& result, const std::string& library = "");

  std::vector<TF_Tensor*> tensors_;
  std::vector<std::unique_ptr<mtl::Buffer>> buffers_;
  mtl::Device* device_ = nullptr;
  std::string library_;  // the library of the last Pipeline
};

// The TF compute callback for `F(void* kernel, KernelCall&)`.
template <void (*F)(void*, KernelCall&)>
void Compute(void* kernel, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  F(kernel, call);
}

// Attribute reads during kernel construction; the first failure sticks and
// is reported when the reader goes out of scope.
class AttrReader : public ContextStatus<TF_OpKernelConstruction, &TF_OpKernelConstruction_Failure> {
 public:
  using ContextStatus::ContextStatus;
  bool Check(const checks::Result& result);
  // One attribute into *value: true when it was read (else the failure sticks).
  bool Get(const char* name, int* value);
  bool Get(const char* name, int64_t* value);
  bool Get(const char* name, float* value);
  bool Get(const char* name, bool* value);
  bool Get(const char* name, std::string* value);
  bool Get(const char* name, std::vector<float>* value);
  bool Get(const char* name, std::vector<int64_t>* value);
  // The reader an op's ReadAttrs(get, &attrs) takes (kernels/<op>/<op>_spec.h):
  //   reader.Check(mo::<op>::ReadAttrs(reader.Getter(), &attrs));
  auto Getter() {
    return [this](const char* name, auto* value) { return Get(name, value); };
  }
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
// `type` for the attribute "T" unless `type` is kNoTypeConstraint. `file`
// (the caller's source file, kernels/<op>/<op>_metal.cc) names the kernel's
// shader library: where tensorflow-metal's GPU does not offer the language or
// the GPU family it needs, or METAL_OPS_TF_METAL_OFF names it, the kernel is
// left off the GPU device (metal_rules.h GpuRegistrationRefusal) and
// TensorFlow places the op on the CPU; one log line names the ops left there
// and why (executor.h LeaveToCpu).
constexpr TF_DataType kNoTypeConstraint = static_cast<TF_DataType>(0);
bool RegisterKernel(const char* op, TF_DataType type, void* (*create)(TF_OpKernelConstruction*),
                    void (*compute)(void*, TF_OpKernelContext*), void (*destroy)(void*),
                    const char* file = __builtin_FILE());

// Registers `compute` for `op` for each of `types`, with the op's attributes
// as the kernel's state (CreateWithAttrs<Attrs, args...>, DeleteAttrs<Attrs>).
template <typename Attrs, auto... args>
bool RegisterWithAttrs(const char* op, std::initializer_list<TF_DataType> types,
                       void (*compute)(void*, TF_OpKernelContext*), const char* file = __builtin_FILE()) {
  bool ok = true;
  for (TF_DataType type : types) {
    ok = RegisterKernel(op, type, &CreateWithAttrs<Attrs, args...>, compute, &DeleteAttrs<Attrs>, file) && ok;
  }
  return ok;
}

// For ops whose kernels keep no state: `forward` for `op` and `backward` for
// `grad_op`, each for every one of `types`.
bool RegisterStateless(const char* op, void (*forward)(void*, TF_OpKernelContext*), const char* grad_op,
                       void (*backward)(void*, TF_OpKernelContext*), std::initializer_list<TF_DataType> types,
                       const char* file = __builtin_FILE());

std::vector<int64_t> DimsOf(TF_Tensor* tensor);
// The plan's element type of a registered dtype (float32 for anything but
// half / int32 / int64: the kernels register no other).
metal_plan::Dtype PlanDtype(TF_DataType dtype);

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_METAL_KERNEL_H_

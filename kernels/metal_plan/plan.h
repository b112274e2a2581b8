// A Metal plan: an op's GPU work as data, built by portable C++ from shapes
// and attributes (kernels/<op>/<op>_plan.cc) and run by the host path
// (kernels/metal_plan/host_path.h; docs/ARCHITECTURE.md, "Metal plans") on
// one of two routes: tensorflow-metal's TF_MetalStream (kernels/metal/
// metal_kernel.cc, RunPlan) or the library's own queue (the CPU kernels,
// kernels/cpu/metal_offload.h), against Apple's Metal (kernels/metal/
// metal_device.mm) or the strict model of it (tests/metal_shim/metal_model.cc).
// A plan names tensors by slot (the op's own enum, in its <op>_plan.h); the
// executor maps each slot to a buffer. A pass binds buffers at the shader's
// named indices (the enums in kernels/<op>/<op>.h, which the .metal uses too).
#ifndef MO_KERNELS_METAL_PLAN_PLAN_H_
#define MO_KERNELS_METAL_PLAN_PLAN_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mo {
namespace metal_plan {

// The element type of a tensor, as the shaders' host names spell it.
enum class Dtype { kFloat32, kFloat16, kInt32, kInt64 };
const char* DtypeSuffix(Dtype dtype);  // "float32", "float16", "int32", "int64"

struct Binding {
  enum Kind { kTensor, kBytes, kScratch };
  Kind kind;
  uint32_t index;              // the shader's [[buffer(index)]]
  int slot;                    // kTensor: tensor slot; kScratch: scratch buffer
  std::vector<uint8_t> bytes;  // kBytes: the value (setBytes)
};

struct Pass {
  // kThreads: about `threads` threads in groups of the pipeline's width (at most
  // 256; dispatch_rules.h ThreadgroupCount), shaders loop grid-stride and do not
  // cooperate. kThreadgroups: exactly `groups` threadgroups of
  // `threads_per_group` threads, `threadgroup_bytes` at [[threadgroup(0)]].
  enum Kind { kThreads, kThreadgroups };
  Kind kind = kThreads;
  std::string library;   // kernels/metal/<library>.metal
  std::string function;  // its host name
  std::vector<Binding> bindings;
  uint64_t threads = 0;
  uint64_t groups = 0;
  uint32_t threads_per_group = 0;
  uint32_t threadgroup_bytes = 0;
};

struct Plan {
  std::vector<Pass> passes;          // in order; each sees every earlier pass's writes
  std::vector<bool> written;         // per tensor slot: a pass writes it (own queue: copied back)
  std::vector<uint64_t> scratch;     // bytes of each scratch buffer (executor-owned, uninitialised)
  // The shaders use simdgroup_matrix (Apple7+ GPUs, MTLGPUFamilyApple7): a Mac
  // executor refuses a GPU without it before compiling any library.
  bool needs_simdgroup_matrix = false;
  // The plan sums floats with atomics, so its results depend on the order in
  // which the GPU runs threads: not bitwise reproducible. The CPU kernels
  // promise reproducible results, so their route to Metal
  // (kernels/cpu/metal_offload.h) never takes such a plan.
  bool order_dependent = false;
  bool empty() const { return passes.empty(); }
};

// A shader's buffer index and the tensor slot bound there.
struct Arg {
  uint32_t index;
  int slot;
};

// Builds a plan pass by pass:
//   PlanBuilder b(kSlots);
//   b.Threads("trunc_exp", "trunc_exp_forward_float32", n)
//       .Tensor(kTruncExpX, kX).Output(kTruncExpY, kY).Value(kTruncExpParams, params);
class PlanBuilder {
 public:
  explicit PlanBuilder(int num_slots) { plan_.written.assign(static_cast<size_t>(num_slots), false); }

  PlanBuilder& Threads(const std::string& library, const std::string& function, uint64_t threads);
  PlanBuilder& Threadgroups(const std::string& library, const std::string& function, uint64_t groups,
                            uint32_t threads_per_group, uint32_t threadgroup_bytes);
  // Zeroes the first `bytes` bytes of a tensor slot: a compute pass of the
  // fill shader (kernels/metal/fill.metal), encoded with the others so one
  // compute encoder orders it before the passes that read it.
  PlanBuilder& Zero(int slot, uint64_t bytes);
  // The same for the first `bytes` bytes of a scratch buffer.
  PlanBuilder& ZeroScratch(int scratch, uint64_t bytes);

  // Bindings of the last pass: a tensor it reads, one it writes, a value, a scratch buffer.
  PlanBuilder& Tensor(uint32_t index, int slot);
  PlanBuilder& Output(uint32_t index, int slot);
  PlanBuilder& Bytes(uint32_t index, const void* data, size_t length);
  template <typename T>
  PlanBuilder& Value(uint32_t index, const T& value) {
    static_assert(std::is_trivially_copyable<T>::value, "Metal argument structs are plain data");
    return Bytes(index, &value, sizeof(T));
  }
  PlanBuilder& Scratch(uint32_t index, int scratch);
  // Tensor() for each of `inputs`, then Output() for each of `outputs`.
  PlanBuilder& Tensors(std::initializer_list<Arg> inputs, std::initializer_list<Arg> outputs);
  // A new scratch buffer of `bytes` bytes; its number for Scratch().
  int NewScratch(uint64_t bytes);

  // The plan's shaders use simdgroup_matrix (Plan::needs_simdgroup_matrix).
  void NeedsSimdgroupMatrix() { plan_.needs_simdgroup_matrix = true; }
  // The plan's results depend on the GPU's thread order (Plan::order_dependent).
  void OrderDependent() { plan_.order_dependent = true; }

  Plan Finish() { return std::move(plan_); }

 private:
  Pass& Last() { return plan_.passes.back(); }
  // The fill pass of Zero and ZeroScratch with its parameters: for `bytes` > 0;
  // the caller binds the buffer it zeroes.
  PlanBuilder& FillZero(uint64_t bytes);
  Plan plan_;
};

// The plan of one pass of `threads` threads (an element-wise op's): the
// shader's inputs and outputs, then its parameters at `params_index`.
template <typename Params>
Plan OnePass(int num_slots, const std::string& library, const std::string& function, uint64_t threads,
             std::initializer_list<Arg> inputs, std::initializer_list<Arg> outputs, uint32_t params_index,
             const Params& params) {
  PlanBuilder b(num_slots);
  b.Threads(library, function, threads).Tensors(inputs, outputs).Value(params_index, params);
  return b.Finish();
}

// A tensor slot's memory as an executor sees it on the CPU side.
struct HostTensor {
  void* data;
  uint64_t bytes;
};

// What went wrong running a plan, or "" — checks every executor makes before
// it encodes anything: every tensor binding names a slot of `num_slots`, a
// scratch buffer that exists; values fit setBytes (4 KiB); passes have work.
std::string Validate(const Plan& plan, int num_slots);

// One line per pass, for error messages and tests:
//   "trunc_exp_forward_float32 threads=1000 [0]=slot0 [1]=slot1* [2]=bytes8"
std::string Describe(const Plan& plan);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_METAL_PLAN_PLAN_H_

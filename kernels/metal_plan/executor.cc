// Route selection, the run wrapper and the counters (kernels/metal_plan/executor.h).
#include "kernels/metal_plan/executor.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "kernels/metal_plan/dispatch_rules.h"

namespace mo {
namespace metal_plan {
namespace {

// What every route leaves to the CPU: the MPSGraph ops have no plan.
constexpr const char* kNotPlanned =
    "; FusedConv2D and FusedActivationGrad (MPSGraph, no plan) compute on the CPU";

std::atomic<int64_t> g_plans{0};
std::atomic<int64_t> g_passes{0};
std::atomic<int64_t> g_fallbacks{0};

struct Totals {
  std::mutex mutex;
  Cost cost;
  std::set<std::string> warned;
  std::set<std::string> checked;     // "library/function" of the pipelines checked
  std::set<std::string> turned_off;  // op types
  CheckTotals checks;
  std::map<mtl::Device*, const Executor*> own_queues;  // OwnQueueOn's, per device
  bool warned_no_device = false;
  std::vector<std::pair<std::string, std::string>> left_to_cpu;  // LeaveToCpu's (op, why)
  bool warned_left_to_cpu = false;
};

std::string PipelineKey(const Pass& pass) { return pass.library + "/" + pass.function; }
Totals& GetTotals() {
  static Totals* totals = new Totals;
  return *totals;
}

// The model library's hooks, if a loaded library provides them (the test
// harness, tests/metal_shim/model.py, loads build/libmetal_ops_shim_exec.so
// for the model routes).
const ModelHooks* Model(const std::string& value, std::string* why_not) {
  using Getter = const ModelHooks* (*)();
  Getter get = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "metal_ops_model_hooks"));
  if (get == nullptr) {
    *why_not = "METAL_OPS_METAL=" + value +
               ", but the model of Metal is not loaded (`make metal-shim` builds "
               "build/libmetal_ops_shim_exec.so; the test harness, tests/metal_shim/model.py, loads it)";
    return nullptr;
  }
  const ModelHooks* hooks = get();
  if (hooks == nullptr || hooks->api != mtl::kApiVersion) {
    *why_not = "METAL_OPS_METAL=" + value +
               ", but the loaded model of Metal is of another build (rebuild it: make metal-shim)";
    return nullptr;
  }
  return hooks;
}

// The model's route: its own queue on the system device, or its stream.
const Executor* ModelRoute(const ModelHooks* hooks, bool stream, std::string* why_not) {
  static const Executor* through_stream = new Executor{"shim-stream", hooks->device, nullptr, hooks->stream};
  const Executor* own = OwnQueueOn(hooks->system_device(), "shim", why_not);
  return own != nullptr && stream ? through_stream : own;
}

void Copy(const std::string& text, char* out, size_t len) {
  if (out == nullptr || len == 0) return;
  std::strncpy(out, text.c_str(), len - 1);
  out[len - 1] = '\0';
}

// Counters into a C caller's array of as many.
void CopyCounts(std::initializer_list<uint64_t> counts, uint64_t* out) {
  for (uint64_t count : counts) *out++ = count;
}

// The stream route on the model for a CPU kernel's host tensors: the tensors
// become private Metal buffers as tensorflow-metal's allocator makes them
// (TensorFlow's copies in and out are not the op's), scratch buffers are
// temporaries of the same kind, the plan is encoded and committed on the
// batching stream, and TensorFlow's device-to-host copy waits for it.
Result RunOnModelStream(const ModelHooks& hooks, const Plan& plan, const HostTensor* slots, int num_slots,
                        Cost* cost) {
  mtl::Device& device = *hooks.device;
  std::vector<std::unique_ptr<mtl::Buffer>> owned;
  std::vector<BoundSlot> bound;
  for (int s = 0; s < num_slots; ++s) {
    std::unique_ptr<mtl::Buffer> buffer =
        slots[s].bytes > 0 ? device.NewBuffer(slots[s].bytes, mtl::Storage::kPrivate) : nullptr;
    if (slots[s].bytes > 0 && buffer == nullptr) {
      return {Outcome::kCpu, "tensorflow-metal's allocator gave no buffer of " + std::to_string(slots[s].bytes) + " bytes"};
    }
    if (buffer != nullptr) hooks.upload(buffer.get(), slots[s].data, slots[s].bytes);
    bound.push_back({buffer.get(), 0});
    owned.push_back(std::move(buffer));
  }
  std::vector<mtl::Buffer*> scratch;
  for (uint64_t bytes : plan.scratch) {
    owned.push_back(device.NewBuffer(bytes > 0 ? bytes : 1, mtl::Storage::kPrivate));
    if (owned.back() == nullptr) return {Outcome::kCpu, "tensorflow-metal's allocator gave no scratch buffer"};
    scratch.push_back(owned.back().get());
  }
  Result result = RunOnStream(*hooks.stream, device, plan, bound, scratch, false, cost);
  if (!result.ok()) return result;
  hooks.stream->Sync([&] { hooks.stream->CommitAndWait(); });  // TensorFlow's copy out, on the queue
  for (int s = 0; s < num_slots; ++s) {
    if (plan.written[static_cast<size_t>(s)] && bound[static_cast<size_t>(s)].buffer != nullptr) {
      hooks.download(bound[static_cast<size_t>(s)].buffer, slots[s].data, slots[s].bytes);
    }
  }
  return result;
}

}  // namespace

const Executor* SelectedExecutor(std::string* name, std::string* reason) {
  const char* env = std::getenv("METAL_OPS_METAL");
  const std::string value = env == nullptr ? "" : env;
  std::string why_not;
  if (value == "0") {
    *name = "cpu";
    *reason = "METAL_OPS_METAL=0";
    return nullptr;
  }
  if (value == "shim" || value == "shim-stream") {
    const ModelHooks* hooks = Model(value, &why_not);
    const bool stream = value == "shim-stream";
    const Executor* route = hooks != nullptr ? ModelRoute(hooks, stream, &why_not) : nullptr;
    *name = route != nullptr ? value : hooks != nullptr ? "cpu" : "unavailable";
    *reason = route != nullptr
                  ? "METAL_OPS_METAL=" + value + ": the Metal host path (" +
                        (stream ? "tensorflow-metal's stream" : "the own queue") +
                        ") runs on the strict model of Metal, its dispatches through the MSL shim on the CPU" +
                        kNotPlanned
                  : hooks != nullptr ? "METAL_OPS_METAL=" + value + " (the model of Metal): " + why_not : why_not;
    return route;
  }
  if (value == "1") {
    const Executor* own = OwnQueueExecutor(&why_not);
    *name = own != nullptr ? "own-queue" : "unavailable";
    *reason = own != nullptr ? std::string("METAL_OPS_METAL=1") + kNotPlanned : "METAL_OPS_METAL=1, but " + why_not;
    return own;
  }
  if (!value.empty()) {
    *name = "unavailable";
    *reason = "METAL_OPS_METAL=" + value + " is not one of 0, 1, shim, shim-stream";
    return nullptr;
  }
  if (TensorflowMetalLoaded()) {
    *name = "tensorflow-metal";
    *reason = "tensorflow-metal's GPU device is loaded: ops placed on it run their TF_MetalStream kernels; "
              "ops placed on the CPU compute there";
    Totals& totals = GetTotals();
    std::lock_guard<std::mutex> lock(totals.mutex);
    const std::string left = metal::LeftToCpuMessage(totals.left_to_cpu);
    if (!left.empty()) *reason += "; " + left;
    if (!left.empty() && !totals.warned_left_to_cpu) {
      totals.warned_left_to_cpu = true;
      std::fprintf(stderr, "%s\n", left.c_str());
    }
    return nullptr;
  }
  const Executor* own = OwnQueueExecutor(&why_not);
  if (own == nullptr) {
    *name = "cpu";
    *reason = why_not;
    return nullptr;
  }
  *name = "own-queue";
  *reason = "no tensorflow-metal device: the CPU kernels send work of at least " + std::to_string(MinWork(own)) +
            " elements to the library's own Metal queue" + kNotPlanned;
  return own;
}

int64_t MinWork(const Executor* executor) {
  const char* env = std::getenv("METAL_OPS_METAL_MIN_WORK");
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0) return v;
  }
  if (executor != nullptr && std::strncmp(executor->name, "shim", 4) == 0) return 0;
  return kDefaultMinWork;
}

bool CpuFallbackAllowed() {
  const char* env = std::getenv("METAL_OPS_METAL");
  return env == nullptr || std::strcmp(env, "1") != 0;
}

Result Run(const Executor* executor, const std::string& op, const Plan& plan, const HostTensor* slots,
           int num_slots) {
  std::string why_not;
  const ModelHooks* hooks = std::strncmp(executor->name, "shim", 4) == 0 ? Model(executor->name, &why_not) : nullptr;
  if (hooks != nullptr) hooks->poison_outputs(&plan, slots, num_slots);
  Cost cost;
  Result result = executor->stream != nullptr && hooks != nullptr
                      ? RunOnModelStream(*hooks, plan, slots, num_slots, &cost)
                      : RunOnOwnQueue(*executor->device, *executor->queue, plan, slots, num_slots, &cost);
  {
    Totals& totals = GetTotals();
    std::lock_guard<std::mutex> lock(totals.mutex);
    totals.cost.Add(cost);
  }
  if (!result.ok()) {
    result.message = op + " on Metal (" + executor->name + "): " + result.message;
    return result;
  }
  g_plans.fetch_add(1);
  g_passes.fetch_add(static_cast<int64_t>(plan.passes.size()));
  return result;
}

bool CountFallback(const std::string& op) {
  g_fallbacks.fetch_add(1);
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  return totals.warned.insert(op).second;
}

bool NeedsCheck(const Plan& plan) {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  for (const Pass& pass : plan.passes) {
    if (totals.checked.count(PipelineKey(pass)) == 0) return true;
  }
  return false;
}

void MarkChecked(const Plan& plan) {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  for (const Pass& pass : plan.passes) totals.checked.insert(PipelineKey(pass));
}

bool TurnedOff(const std::string& op) {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  return totals.turned_off.count(op) != 0;
}

bool TurnOff(const std::string& op) {
  g_fallbacks.fetch_add(1);
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  if (!totals.turned_off.insert(op).second) return false;
  totals.checks.turned_off += 1;
  return true;
}

void CountCheck(uint64_t bytes, uint64_t nanoseconds) {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  totals.checks.checks += 1;
  totals.checks.bytes += bytes;
  totals.checks.nanoseconds += nanoseconds;
}

CheckTotals Checks() {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  return totals.checks;
}

int64_t PlansRun() { return g_plans.load(); }
int64_t PassesRun() { return g_passes.load(); }
int64_t Fallbacks() { return g_fallbacks.load(); }
Cost TotalCost() {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  return totals.cost;
}

const Executor* OwnQueueOn(mtl::Device* device, const char* name, std::string* why_not) {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  if (device == nullptr) {
    *why_not = "no Metal device: MTLCreateSystemDefaultDevice and MTLCopyAllDevices gave none (a virtual machine "
               "or a session without access to the GPU)";
    if (CpuFallbackAllowed() && !totals.warned_no_device) {
      totals.warned_no_device = true;
      std::fprintf(stderr, "metal_ops: %s; the ops compute on the CPU (METAL_OPS_METAL=0 keeps them there without "
                   "asking)\n", why_not->c_str());
    }
    return nullptr;
  }
  const Executor*& own = totals.own_queues[device];
  if (own == nullptr) {
    mtl::CommandQueue* queue = device->NewCommandQueue().release();
    if (queue != nullptr) own = new Executor{name, device, queue, nullptr};
  }
  if (own == nullptr) *why_not = "Metal gave no command queue (newCommandQueue)";
  return own;
}

void LeaveToCpu(const std::string& op, const std::string& why) {
  Totals& totals = GetTotals();
  std::lock_guard<std::mutex> lock(totals.mutex);
  totals.left_to_cpu.push_back({op, why});
}

#if defined(__APPLE__)
const Executor* OwnQueueExecutor(std::string* why_not) {
  static mtl::Device* const device = SystemDevice();
  return OwnQueueOn(device, "own-queue", why_not);
}
#else
const Executor* OwnQueueExecutor(std::string* why_not) {
  *why_not = "this build has no Metal; the library's own Metal queue is part of the macOS build";
  return nullptr;
}
bool TensorflowMetalLoaded() { return false; }
#endif

}  // namespace metal_plan
}  // namespace mo

extern "C" {
int64_t metal_ops_metal_path(char* name, size_t name_len, char* reason, size_t reason_len) {
  std::string n, r;
  mo::metal_plan::SelectedExecutor(&n, &r);
  mo::metal_plan::Copy(n, name, name_len);
  mo::metal_plan::Copy(r, reason, reason_len);
  return mo::metal_plan::PlansRun();
}
int64_t metal_ops_metal_passes_run() { return mo::metal_plan::PassesRun(); }
int64_t metal_ops_metal_fallbacks() { return mo::metal_plan::Fallbacks(); }
int metal_ops_cpu_fallback_allowed() { return mo::metal_plan::CpuFallbackAllowed() ? 1 : 0; }
void metal_ops_metal_cost(uint64_t out[5]) {
  const mo::metal_plan::Cost c = mo::metal_plan::TotalCost();
  mo::metal_plan::CopyCounts({c.bytes_in, c.bytes_out, c.wrapped, c.command_buffers, c.waits}, out);
}
void metal_ops_metal_checks(uint64_t out[4]) {
  const mo::metal_plan::CheckTotals c = mo::metal_plan::Checks();
  mo::metal_plan::CopyCounts({c.checks, c.turned_off, c.bytes, c.nanoseconds}, out);
}
}

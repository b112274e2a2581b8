// Executor selection and the run wrapper (kernels/metal_plan/executor.h).
#include "kernels/metal_plan/executor.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mo {
namespace metal_plan {
namespace {

// What every executor leaves to the CPU: the MPSGraph ops have no plan.
constexpr const char* kNotPlanned =
    "; FusedConv2D and FusedActivationGrad (MPSGraph, no plan) compute on the CPU";

std::atomic<int64_t> g_plans{0};
std::atomic<int64_t> g_passes{0};

// The shim executor, if a loaded library provides one (import metal_ops loads
// build/libmetal_ops_shim_exec.so when METAL_OPS_METAL=shim).
const Executor* ShimExecutor(std::string* why_not) {
  using Getter = const Executor* (*)();
  Getter get = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "metal_ops_shim_executor"));
  if (get == nullptr) {
    *why_not = "METAL_OPS_METAL=shim, but the shim executor library is not loaded (`make metal-shim` builds "
               "build/libmetal_ops_shim_exec.so; `import metal_ops` loads it, or the file METAL_OPS_SHIM_EXEC_LIB names)";
    return nullptr;
  }
  const Executor* executor = get();
  if (executor == nullptr || executor->abi != kExecutorAbi) {
    *why_not = "METAL_OPS_METAL=shim, but the loaded shim executor library is of another build (rebuild it: make metal-shim)";
    return nullptr;
  }
  return executor;
}

void Copy(const std::string& text, char* out, size_t len) {
  if (out == nullptr || len == 0) return;
  std::strncpy(out, text.c_str(), len - 1);
  out[len - 1] = '\0';
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
  if (value == "shim") {
    const Executor* shim = ShimExecutor(&why_not);
    *name = shim != nullptr ? "shim" : "unavailable";
    *reason = shim != nullptr
                  ? std::string("METAL_OPS_METAL=shim: the Metal plans run through the MSL shim on the CPU") + kNotPlanned
                  : why_not;
    return shim;
  }
  if (value == "1") {
    const Executor* own = OwnQueueExecutor(&why_not);
    *name = own != nullptr ? "own-queue" : "unavailable";
    *reason = own != nullptr ? std::string("METAL_OPS_METAL=1") + kNotPlanned : "METAL_OPS_METAL=1, but " + why_not;
    return own;
  }
  if (!value.empty()) {
    *name = "unavailable";
    *reason = "METAL_OPS_METAL=" + value + " is not one of 0, 1, shim";
    return nullptr;
  }
  if (TensorflowMetalLoaded()) {
    *name = "tensorflow-metal";
    *reason = "tensorflow-metal's GPU device is loaded: ops placed on it run their TF_MetalStream kernels; "
              "ops placed on the CPU compute there";
    return nullptr;
  }
  const Executor* own = OwnQueueExecutor(&why_not);
  if (own == nullptr) {
    *name = "cpu";
    *reason = why_not;
    return nullptr;
  }
  *name = "own-queue";
  *reason = "no tensorflow-metal device: the CPU kernels send work of at least " +
            std::to_string(MinWork(own)) + " elements to the library's own Metal queue" + kNotPlanned;
  return own;
}

int64_t MinWork(const Executor* executor) {
  const char* env = std::getenv("METAL_OPS_METAL_MIN_WORK");
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0) return v;
  }
  if (executor != nullptr && std::strcmp(executor->name, "shim") == 0) return 0;
  return kDefaultMinWork;
}

std::string Run(const Executor* executor, const char* op, const Plan& plan, const HostTensor* slots, int num_slots) {
  const std::string invalid = Validate(plan, num_slots);
  if (!invalid.empty()) return std::string(op) + " on Metal (" + executor->name + "): invalid plan: " + invalid;
  char error[1024] = {0};
  if (executor->run(&plan, slots, num_slots, error, sizeof(error)) != 0) {
    return std::string(op) + " on Metal (" + executor->name + "): " + error;
  }
  CountRun(plan);
  return "";
}

void CountRun(const Plan& plan) {
  g_plans.fetch_add(1);
  g_passes.fetch_add(static_cast<int64_t>(plan.passes.size()));
}
int64_t PlansRun() { return g_plans.load(); }
int64_t PassesRun() { return g_passes.load(); }

#if !defined(__APPLE__)
const Executor* OwnQueueExecutor(std::string* why_not) {
  *why_not = "this build has no Metal (the library's own Metal queue is part of the macOS build)";
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
}

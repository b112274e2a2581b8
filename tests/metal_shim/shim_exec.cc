// The shim executor (METAL_OPS_METAL=shim, docs/ARCHITECTURE.md "Metal plans"):
// runs an op's Metal plan on the CPU, each pass's kernel compiled as C++
// through the MSL shim (msl_shim.h), inside TensorFlow, on the tensors' host
// memory. What it checks that a Mac's encoder would leave to the GPU: every
// entry point a pass names exists in its library; every [[buffer(N)]] the
// kernel declares is bound and nothing else is; a `constant T&` gets exactly
// sizeof(T) bytes; a kernel with threadgroup memory runs as threadgroups with
// some; threadgroups fit Apple's limits (1024 threads, 32 KiB).
// 1-D passes run their grid (metal_rules.h ThreadgroupCount, groups of 256
// as Encoder::Dispatch picks on every Apple GPU) thread after thread;
// threadgroup passes run each threadgroup's threads as fibers
// (threadgroups.cc), so barriers and SIMD-group matrices work.
// Built into build/libmetal_ops_shim_exec.so by `make metal-shim`, never into
// the op library; the op library finds metal_ops_shim_executor() once
// `import metal_ops` has loaded this library.
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/metal_plan/executor.h"
#include "kernels/metal_plan/plan.h"
#include "tests/metal_shim/shim_exec.h"

namespace msl_shim {
namespace exec {
namespace {

using mo::metal_plan::Binding;
using mo::metal_plan::HostTensor;
using mo::metal_plan::Pass;
using mo::metal_plan::Plan;

// Apple-silicon limits the shim enforces (every Apple GPU of the Metal 3 family).
constexpr uint64_t kMaxThreadsPerThreadgroup = 1024;
constexpr uint64_t kMaxThreadgroupBytes = 32 * 1024;
constexpr uint64_t kDispatchWidth = 256;  // Encoder::Dispatch: min(256, the pipeline's maximum)

std::map<std::pair<std::string, std::string>, const Entry*>& Registry() {
  static auto* registry = new std::map<std::pair<std::string, std::string>, const Entry*>;
  return *registry;
}

// What a 0-byte tensor is bound as (Metal: a small placeholder buffer).
alignas(64) unsigned char g_placeholder[64];

struct ThreadgroupArgs {
  const Entry* entry;
  Call* call;
  uint groups;
  uint threads;
};

void RunThreadgroupThread(void* arg, uint group, uint index) {
  ThreadgroupArgs* a = static_cast<ThreadgroupArgs*>(arg);
  Call call = *a->call;
  call.threadgroup_memory = threadgroup_memory();
  call.ids = {group * a->threads + index, a->groups * a->threads, group, a->groups, index, index, a->threads,
              index % 32u, index / 32u};
  a->entry->run(call);
}

std::string RunPass(const Pass& pass, const HostTensor* slots, std::vector<std::vector<uint64_t>>& scratch) {
  const std::string where = pass.library + "/" + pass.function + ": ";
  auto found = Registry().find({pass.library, pass.function});
  if (found == Registry().end()) return where + "no such entry point in the library's instantiations";
  const Entry* entry = found->second;
  Call call = {};
  uint64_t lengths[kMaxBuffers] = {};
  bool is_bytes[kMaxBuffers] = {};
  for (const Binding& b : pass.bindings) {
    if (b.index >= static_cast<uint32_t>(kMaxBuffers)) return where + "buffer index " + std::to_string(b.index) + " > 30";
    if (b.kind == Binding::kTensor) {
      const HostTensor& t = slots[b.slot];
      call.buffers[b.index] = t.bytes == 0 || t.data == nullptr ? g_placeholder : t.data;
      lengths[b.index] = t.bytes;
    } else if (b.kind == Binding::kScratch) {
      call.buffers[b.index] = scratch[static_cast<size_t>(b.slot)].data();
      lengths[b.index] = scratch[static_cast<size_t>(b.slot)].size() * sizeof(uint64_t);
    } else {
      call.buffers[b.index] = const_cast<uint8_t*>(b.bytes.data());
      lengths[b.index] = b.bytes.size();
      is_bytes[b.index] = true;
    }
  }
  bool declared[kMaxBuffers] = {};
  bool wants_threadgroup = false;
  for (int i = 0; i < entry->num_params; ++i) {
    const Param& p = entry->params[i];
    if (p.kind == kThreadgroup) {
      wants_threadgroup = true;
      if (p.index != 0) return where + "threadgroup memory at index " + std::to_string(p.index) + " (plans bind index 0)";
      continue;
    }
    if (p.kind != kBuffer) continue;
    if (p.index < 0 || p.index >= kMaxBuffers) return where + "declares buffer " + std::to_string(p.index);
    declared[p.index] = true;
    if (call.buffers[p.index] == nullptr) return where + "buffer " + std::to_string(p.index) + " is not bound";
    if (p.bytes != 0 && is_bytes[p.index] && lengths[p.index] != p.bytes) {
      return where + "buffer " + std::to_string(p.index) + " takes " + std::to_string(p.bytes) + " bytes, the plan sets " +
             std::to_string(lengths[p.index]);
    }
    if (p.bytes != 0 && lengths[p.index] < p.bytes) {
      return where + "buffer " + std::to_string(p.index) + " holds " + std::to_string(lengths[p.index]) +
             " bytes, the kernel reads " + std::to_string(p.bytes);
    }
  }
  for (const Binding& b : pass.bindings) {
    if (!declared[b.index]) return where + "buffer " + std::to_string(b.index) + " is bound but the kernel has no such parameter";
  }
  if (pass.kind == Pass::kThreads) {
    if (wants_threadgroup) return where + "a kernel with threadgroup memory dispatched as a 1-D grid";
    const uint64_t groups = GridThreadgroups(pass.threads, kDispatchWidth);
    const uint grid = static_cast<uint>(groups * kDispatchWidth);
    for (uint gid = 0; gid < grid; ++gid) {
      const uint index = gid % kDispatchWidth;
      call.ids = {gid, grid, gid / uint(kDispatchWidth), uint(groups), index, index, uint(kDispatchWidth), index % 32u,
                  index / 32u};
      entry->run(call);
    }
    return "";
  }
  const std::string misfit = ThreadgroupMisfit(kMaxThreadsPerThreadgroup, pass.threads_per_group, pass.threadgroup_bytes,
                                                 kMaxThreadgroupBytes);
  if (!misfit.empty()) return where + misfit;
  if (wants_threadgroup && pass.threadgroup_bytes == 0) return where + "the kernel takes threadgroup memory, the plan gives none";
  ThreadgroupArgs args = {entry, &call, static_cast<uint>(pass.groups), pass.threads_per_group};
  const char* failed = run_threadgroups(static_cast<uint>(pass.groups), pass.threads_per_group,
                                        ThreadgroupBytes(pass.threadgroup_bytes), false,
                                        &RunThreadgroupThread, &args);
  return failed == nullptr ? "" : where + failed;
}

int Run(const Plan* plan, const HostTensor* slots, int num_slots, char* error, size_t error_len) {
  // Metal never zeroes an output: every written slot starts as NaN bytes, so
  // a plan that reads an output before writing it (a missing zero-fill) shows.
  // Not a slot whose memory overlaps another's (TensorFlow may forward an
  // input's buffer to an output).
  for (int s = 0; s < num_slots; ++s) {
    if (!plan->written[static_cast<size_t>(s)] || slots[s].bytes == 0) continue;
    const char* begin = static_cast<const char*>(slots[s].data);
    bool shared = false;
    for (int o = 0; o < num_slots && !shared; ++o) {
      const char* other = static_cast<const char*>(slots[o].data);
      shared = o != s && slots[o].bytes > 0 && other < begin + slots[s].bytes && begin < other + slots[o].bytes;
    }
    if (!shared) std::memset(slots[s].data, 0xff, slots[s].bytes);
  }
  std::vector<std::vector<uint64_t>> scratch;
  for (uint64_t bytes : plan->scratch) scratch.emplace_back((bytes + 7) / 8 + 1, ~uint64_t(0));  // NaN bytes: unwritten reads show
  for (const Pass& pass : plan->passes) {
    const std::string failed = RunPass(pass, slots, scratch);
    if (!failed.empty()) {
      std::snprintf(error, error_len, "MSL shim: %s", failed.c_str());
      return 1;
    }
  }
  return 0;
}

const mo::metal_plan::Executor kExecutor = {mo::metal_plan::kExecutorAbi, "shim", &Run};

}  // namespace

bool Register(const Entry* entries, int count) {
  for (int i = 0; i < count; ++i) Registry()[{entries[i].library, entries[i].name}] = &entries[i];
  return true;
}

}  // namespace exec
}  // namespace msl_shim

extern "C" const mo::metal_plan::Executor* metal_ops_shim_executor() { return &msl_shim::exec::kExecutor; }

// Entry points registered (tests: every instantiation of every shader is reachable).
extern "C" int metal_ops_shim_exec_entries() { return static_cast<int>(msl_shim::exec::Registry().size()); }

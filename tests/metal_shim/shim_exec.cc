// The kernels of the MSL shim as a GPU for the strict model of Metal
// (tests/metal_shim/metal_model.cc): the generated $(BUILD)/gen/<shader>_exec.cc
// files register each kernel instantiation (shim_exec.h), and Execute runs one
// dispatch of it on the CPU, on the dispatch's bound host memory. 1-D
// kernels run thread after thread; kernels with threadgroup memory run each
// threadgroup's threads as fibers (threadgroups.cc), so barriers and
// SIMD-group matrices work. Threadgroups run in a shuffled order: a kernel
// whose result depends on it (float atomics) shows it.
// Built into build/libmetal_ops_shim_exec.so by `make metal-shim`, never into
// the op library.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/metal_shim/shim_exec.h"

namespace msl_shim {
namespace exec {
namespace {

std::map<std::pair<std::string, std::string>, const Entry*>& Registry() {
  static auto* registry = new std::map<std::pair<std::string, std::string>, const Entry*>;
  return *registry;
}

struct ThreadgroupArgs {
  const Entry* entry;
  Call* call;
  const std::vector<uint>* order;
  uint groups;
  uint threads;
};

void RunThreadgroupThread(void* arg, uint slot, uint index) {
  ThreadgroupArgs* a = static_cast<ThreadgroupArgs*>(arg);
  const uint group = (*a->order)[slot];
  Call call = *a->call;
  call.threadgroup_memory = threadgroup_memory();
  call.ids = {group * a->threads + index, a->groups * a->threads, group, a->groups, index, index, a->threads,
              index % 32u, index / 32u};
  a->entry->run(call);
}

}  // namespace

bool Register(const Entry* entries, int count) {
  for (int i = 0; i < count; ++i) Registry()[{entries[i].library, entries[i].name}] = &entries[i];
  return true;
}

const Entry* Find(const std::string& library, const std::string& name) {
  auto found = Registry().find({library, name});
  return found == Registry().end() ? nullptr : found->second;
}

std::string Execute(const Entry& entry, const Bound (&args)[kMaxBuffers], uint64_t groups, uint64_t threads,
                    uint64_t threadgroup_bytes, uint64_t order_seed) {
  Call call = {};
  bool declared[kMaxBuffers] = {};
  bool wants_threadgroup = false;
  for (int i = 0; i < kMaxBuffers; ++i) call.buffers[i] = args[i].data;
  for (int i = 0; i < entry.num_params; ++i) {
    const Param& p = entry.params[i];
    if (p.kind == kThreadgroup) {
      wants_threadgroup = true;
      if (p.index != 0) return "threadgroup memory at index " + std::to_string(p.index) + " (plans bind index 0)";
      continue;
    }
    if (p.kind != kBuffer) continue;
    if (p.index < 0 || p.index >= kMaxBuffers) return "declares buffer " + std::to_string(p.index);
    declared[p.index] = true;
    const Bound& b = args[p.index];
    if (b.data == nullptr) return "buffer " + std::to_string(p.index) + " is not bound";
    if (p.bytes != 0 && b.bytes && b.length != p.bytes) {
      return "buffer " + std::to_string(p.index) + " takes " + std::to_string(p.bytes) + " bytes, setBytes gave " +
             std::to_string(b.length);
    }
    if (p.bytes != 0 && b.length < p.bytes) {
      return "buffer " + std::to_string(p.index) + " holds " + std::to_string(b.length) + " bytes, the kernel reads " +
             std::to_string(p.bytes);
    }
  }
  for (int i = 0; i < kMaxBuffers; ++i) {
    if (args[i].data != nullptr && args[i].fresh && !declared[i]) {
      return "buffer " + std::to_string(i) + " is bound but the kernel has no such parameter";
    }
  }
  if (wants_threadgroup && threadgroup_bytes == 0) return "the kernel takes threadgroup memory, none was set";
  std::vector<uint> order(static_cast<size_t>(groups));
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(order_seed));
  const uint n_groups = static_cast<uint>(groups), width = static_cast<uint>(threads);
  if (!wants_threadgroup) {
    const uint grid = n_groups * width;
    for (uint group : order) {
      for (uint index = 0; index < width; ++index) {
        call.ids = {group * width + index, grid, group, n_groups, index, index, width, index % 32u, index / 32u};
        entry.run(call);
      }
    }
    return "";
  }
  ThreadgroupArgs targs = {&entry, &call, &order, n_groups, width};
  const char* failed = run_threadgroups(n_groups, width, threadgroup_bytes, false, &RunThreadgroupThread, &targs);
  return failed == nullptr ? "" : failed;
}

}  // namespace exec
}  // namespace msl_shim

// Entry points registered (tests: every instantiation of every shader is reachable).
extern "C" int metal_ops_shim_exec_entries() { return static_cast<int>(msl_shim::exec::Registry().size()); }

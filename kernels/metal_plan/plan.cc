// Plan building, checking and description (kernels/metal_plan/plan.h).
#include "kernels/metal_plan/plan.h"

#include "kernels/common/fill.h"
#include "kernels/metal_plan/metal_api.h"

namespace mo {
namespace metal_plan {

const char* DtypeSuffix(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32: return "float32";
    case Dtype::kFloat16: return "float16";
    case Dtype::kInt32: return "int32";
    case Dtype::kInt64: return "int64";
  }
  return "unknown";
}

PlanBuilder& PlanBuilder::Threads(const std::string& library, const std::string& function, uint64_t threads) {
  Pass pass;
  pass.kind = Pass::kThreads;
  pass.library = library;
  pass.function = function;
  pass.threads = threads;
  plan_.passes.push_back(std::move(pass));
  return *this;
}

PlanBuilder& PlanBuilder::Threadgroups(const std::string& library, const std::string& function, uint64_t groups,
                                       uint32_t threads_per_group, uint32_t threadgroup_bytes) {
  Pass pass;
  pass.kind = Pass::kThreadgroups;
  pass.library = library;
  pass.function = function;
  pass.groups = groups;
  pass.threads_per_group = threads_per_group;
  pass.threadgroup_bytes = threadgroup_bytes;
  plan_.passes.push_back(std::move(pass));
  return *this;
}

PlanBuilder& PlanBuilder::FillZero(uint64_t bytes) {
  const FillParams params = {static_cast<int64>(bytes)};
  return Threads("fill", "fill_zero", (bytes + 3) / 4).Value(kFillParams, params);
}

PlanBuilder& PlanBuilder::Zero(int slot, uint64_t bytes) {
  return bytes == 0 ? *this : FillZero(bytes).Output(kFillWords, slot).Output(kFillBytes, slot);
}

PlanBuilder& PlanBuilder::ZeroScratch(int scratch, uint64_t bytes) {
  return bytes == 0 ? *this : FillZero(bytes).Scratch(kFillWords, scratch).Scratch(kFillBytes, scratch);
}

PlanBuilder& PlanBuilder::Tensor(uint32_t index, int slot) {
  Last().bindings.push_back({Binding::kTensor, index, slot, {}});
  return *this;
}

PlanBuilder& PlanBuilder::Output(uint32_t index, int slot) {
  if (slot >= 0 && static_cast<size_t>(slot) < plan_.written.size()) plan_.written[static_cast<size_t>(slot)] = true;
  return Tensor(index, slot);
}

PlanBuilder& PlanBuilder::Tensors(std::initializer_list<Arg> inputs, std::initializer_list<Arg> outputs) {
  for (const Arg& a : inputs) Tensor(a.index, a.slot);
  for (const Arg& a : outputs) Output(a.index, a.slot);
  return *this;
}

PlanBuilder& PlanBuilder::Bytes(uint32_t index, const void* data, size_t length) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  Last().bindings.push_back({Binding::kBytes, index, -1, std::vector<uint8_t>(p, p + length)});
  return *this;
}

PlanBuilder& PlanBuilder::Scratch(uint32_t index, int scratch) {
  Last().bindings.push_back({Binding::kScratch, index, scratch, {}});
  return *this;
}

int PlanBuilder::NewScratch(uint64_t bytes) {
  plan_.scratch.push_back(bytes);
  return static_cast<int>(plan_.scratch.size()) - 1;
}

std::string Validate(const Plan& plan, int num_slots) {
  if (static_cast<int>(plan.written.size()) != num_slots) {
    return "the plan has " + std::to_string(plan.written.size()) + " tensor slots, the call " +
           std::to_string(num_slots);
  }
  for (const Pass& pass : plan.passes) {
    const std::string where = pass.library + "/" + pass.function + ": ";
    if (pass.kind == Pass::kThreads && pass.threads == 0) return where + "a dispatch of no threads";
    if (pass.kind == Pass::kThreadgroups && (pass.groups == 0 || pass.threads_per_group == 0)) {
      return where + "a dispatch of no threadgroups";
    }
    for (size_t i = 0; i < pass.bindings.size(); ++i) {
      const Binding& b = pass.bindings[i];
      if (b.kind == Binding::kTensor && (b.slot < 0 || b.slot >= num_slots)) {
        return where + "buffer " + std::to_string(b.index) + " names tensor slot " + std::to_string(b.slot);
      }
      if (b.kind == Binding::kScratch && (b.slot < 0 || static_cast<size_t>(b.slot) >= plan.scratch.size())) {
        return where + "buffer " + std::to_string(b.index) + " names scratch buffer " + std::to_string(b.slot);
      }
      if (b.kind == Binding::kBytes && b.bytes.empty()) return where + "empty bytes at " + std::to_string(b.index);
      if (b.kind == Binding::kBytes && b.bytes.size() >= mtl::kMaxSetBytesLength) {
        return where + std::to_string(b.bytes.size()) + " bytes at " + std::to_string(b.index) + " (setBytes takes fewer than " +
               std::to_string(mtl::kMaxSetBytesLength) + ")";
      }
      for (size_t j = 0; j < i; ++j) {
        if (pass.bindings[j].index == b.index) {
          return where + "buffer index " + std::to_string(b.index) + " bound twice";
        }
      }
    }
  }
  return "";
}

std::string Describe(const Plan& plan) {
  std::string out;
  for (const Pass& pass : plan.passes) {
    out += pass.library + "/" + pass.function;
    if (pass.kind == Pass::kThreads) {
      out += " threads=" + std::to_string(pass.threads);
    } else {
      out += " groups=" + std::to_string(pass.groups) + "x" + std::to_string(pass.threads_per_group) +
             " tg_bytes=" + std::to_string(pass.threadgroup_bytes);
    }
    for (const Binding& b : pass.bindings) {
      out += " [" + std::to_string(b.index) + "]=";
      if (b.kind == Binding::kTensor) {
        out += "slot" + std::to_string(b.slot);
      } else if (b.kind == Binding::kScratch) {
        out += "scratch" + std::to_string(b.slot);
      } else {
        out += "bytes" + std::to_string(b.bytes.size());
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace metal_plan
}  // namespace mo

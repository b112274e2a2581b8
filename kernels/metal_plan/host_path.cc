// The Metal host path's decisions (kernels/metal_plan/host_path.h).
#include "kernels/metal_plan/host_path.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/metal_plan/dispatch_rules.h"

namespace mo {
namespace metal_plan {
namespace {

Result Fail(Outcome outcome, const std::string& message) { return {outcome, message}; }

// The kernels a plan encodes, for error messages: "a, b, c".
std::string KernelNames(const Plan& plan) {
  std::vector<std::string> names;
  for (const Pass& pass : plan.passes) names.push_back(pass.function);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

// Every pass's pipeline, before anything is encoded: no GPU feature, no
// compile, no threadgroup size that fits is Outcome::kCpu.
Result Pipelines(mtl::Device& device, const Plan& plan, std::vector<const mtl::Pipeline*>* pipelines) {
  const mtl::Limits limits = device.GetLimits();
  if (plan.needs_simdgroup_matrix && !plan.passes.empty() && !limits.apple7) {
    return Fail(Outcome::kCpu, plan.passes.front().library +
                                   ": the shaders need an Apple-silicon GPU (MTLGPUFamilyApple7: simdgroup_matrix); "
                                   "this GPU lacks it");
  }
  for (const Pass& pass : plan.passes) {
    std::string error;
    const mtl::Pipeline* pipeline = device.GetPipeline(pass.library, pass.function, &error);
    if (pipeline == nullptr) return Fail(Outcome::kCpu, pass.function + ": " + error);
    if (plan.needs_simdgroup_matrix) {
      const std::string narrow = metal::SimdWidthError(pipeline->ThreadExecutionWidth());
      if (!narrow.empty()) return Fail(Outcome::kCpu, pass.function + ": " + narrow);
    }
    if (pass.kind == Pass::kThreadgroups) {
      const std::string misfit =
          metal::ThreadgroupFitError(pipeline->MaxTotalThreadsPerThreadgroup(), pass.threads_per_group,
                                     pipeline->StaticThreadgroupMemoryLength(), pass.threadgroup_bytes,
                                     limits.max_threadgroup_memory_length);
      if (!misfit.empty()) return Fail(Outcome::kCpu, pass.function + ": " + misfit);
    }
    pipelines->push_back(pipeline);
  }
  return {};
}

// The 1-D grid's threadgroup width: 256, or less where the pipeline runs fewer.
uint64_t GridWidth(const mtl::Pipeline& pipeline) {
  const uint64_t max = pipeline.MaxTotalThreadsPerThreadgroup();
  return max < 256 ? max : 256;
}

// Encodes the plan's passes on one compute encoder, in order.
void Encode(mtl::ComputeEncoder& encoder, const Plan& plan, const std::vector<const mtl::Pipeline*>& pipelines,
            const std::vector<BoundSlot>& slots, const std::vector<mtl::Buffer*>& scratch, mtl::Buffer& placeholder) {
  for (size_t p = 0; p < plan.passes.size(); ++p) {
    const Pass& pass = plan.passes[p];
    encoder.SetPipeline(*pipelines[p]);
    for (const Binding& b : pass.bindings) {
      if (b.kind == Binding::kBytes) {
        encoder.SetBytes(b.bytes.data(), b.bytes.size(), b.index);
        continue;
      }
      const BoundSlot bound = b.kind == Binding::kTensor ? slots[static_cast<size_t>(b.slot)]
                                                         : BoundSlot{scratch[static_cast<size_t>(b.slot)], 0};
      if (bound.buffer == nullptr) {
        encoder.SetBuffer(placeholder, 0, b.index);
      } else {
        encoder.SetBuffer(*bound.buffer, bound.offset, b.index);
      }
    }
    if (pass.kind == Pass::kThreads) {
      const uint64_t width = GridWidth(*pipelines[p]);
      encoder.DispatchThreadgroups(metal::ThreadgroupCount(pass.threads, width), width);
    } else {
      const uint64_t bytes = metal::ThreadgroupMemoryLength(pass.threadgroup_bytes);
      if (bytes > 0) encoder.SetThreadgroupMemoryLength(bytes, 0);
      encoder.DispatchThreadgroups(pass.groups, pass.threads_per_group);
    }
  }
  encoder.EndEncoding();
}

// "N bytes": Metal refused a buffer (Outcome::kCpu: the CPU needs none).
Result NoBuffer(const std::string& what, uint64_t bytes, const mtl::Limits& limits) {
  return Fail(Outcome::kCpu, "Metal gave no buffer for " + what + " of " + std::to_string(bytes) + " bytes (" +
                                 (bytes > limits.max_buffer_length
                                      ? "above the device's maxBufferLength of " +
                                            std::to_string(limits.max_buffer_length)
                                      : std::string("out of memory")) +
                                 ")");
}

// The GPU's verdict on a completed command buffer holding `what`.
Result Completed(mtl::CommandBuffer& command_buffer, const std::string& what) {
  const mtl::CommandStatus status = command_buffer.Status();
  const std::string error = command_buffer.Error();
  if (status == mtl::CommandStatus::kCompleted && error.empty()) return {};
  return Fail(Outcome::kGpu, "the GPU failed the command buffer (kernels: " + what + "): status " +
                                   mtl::StatusName(status) + ": " + (error.empty() ? "no error description" : error));
}

// Scratch buffers (private, exact sizes; none for 0 bytes: the placeholder).
Result Scratch(mtl::Device& device, const Plan& plan, const mtl::Limits& limits,
               std::vector<std::unique_ptr<mtl::Buffer>>* owned, std::vector<mtl::Buffer*>* scratch) {
  for (size_t i = 0; i < plan.scratch.size(); ++i) {
    const uint64_t bytes = plan.scratch[i];
    std::unique_ptr<mtl::Buffer> buffer = bytes > 0 ? device.NewBuffer(bytes, mtl::Storage::kPrivate) : nullptr;
    if (bytes > 0 && buffer == nullptr) return NoBuffer("scratch buffer " + std::to_string(i), bytes, limits);
    scratch->push_back(buffer.get());
    owned->push_back(std::move(buffer));
  }
  return {};
}

}  // namespace

void Cost::Add(const Cost& other) {
  bytes_in += other.bytes_in;
  bytes_out += other.bytes_out;
  wrapped += other.wrapped;
  command_buffers += other.command_buffers;
  waits += other.waits;
}

PageRange EnclosingPages(const void* data, uint64_t bytes, uint64_t page_size) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = at / page_size * page_size;
  const uint64_t end = (static_cast<uint64_t>(at) + bytes + page_size - 1) / page_size * page_size;
  return {begin, end - begin, at - begin};
}

uint64_t PipelineThreadLimit(mtl::Device& device, const std::string& library, const std::string& function,
                             bool simdgroup_matrix) {
  if (simdgroup_matrix && !device.GetLimits().apple7) return 0;
  std::string error;
  const mtl::Pipeline* pipeline = device.GetPipeline(library, function, &error);
  return pipeline == nullptr ? 0 : pipeline->MaxTotalThreadsPerThreadgroup();
}

Result RunOnOwnQueue(mtl::Device& device, mtl::CommandQueue& queue, const Plan& plan, const HostTensor* slots,
                     int num_slots, Cost* cost) {
  const std::string invalid = Validate(plan, num_slots);
  if (!invalid.empty()) return Fail(Outcome::kError, "invalid plan: " + invalid);
  if (plan.empty()) return {};
  std::vector<const mtl::Pipeline*> pipelines;
  Result result = Pipelines(device, plan, &pipelines);
  if (!result.ok()) return result;
  const mtl::Limits limits = device.GetLimits();

  // Each tensor: its page-rounded range wrapped without a copy, bound at the
  // tensor's offset; a copy when Metal refuses the wrap or the offset breaks
  // the alignment rule. Empty tensors bind the placeholder.
  std::vector<std::unique_ptr<mtl::Buffer>> owned;
  std::vector<BoundSlot> bound(static_cast<size_t>(num_slots), BoundSlot{nullptr, 0});
  std::vector<bool> copied(static_cast<size_t>(num_slots), false);
  for (int s = 0; s < num_slots; ++s) {
    const HostTensor& t = slots[s];
    if (t.bytes == 0 || t.data == nullptr) continue;
    const PageRange range = EnclosingPages(t.data, t.bytes, limits.page_size);
    if (range.length > limits.max_buffer_length) return NoBuffer("tensor slot " + std::to_string(s), range.length, limits);
    std::unique_ptr<mtl::Buffer> buffer;
    if (range.offset % mtl::kBufferOffsetAlignment == 0) {
      buffer = device.NewBufferNoCopy(reinterpret_cast<void*>(range.begin), range.length);
    }
    if (buffer != nullptr) {
      bound[static_cast<size_t>(s)] = {buffer.get(), range.offset};
      cost->wrapped += 1;
    } else {
      buffer = device.NewBufferWithBytes(t.data, t.bytes);
      if (buffer == nullptr) return NoBuffer("a copy of tensor slot " + std::to_string(s), t.bytes, limits);
      bound[static_cast<size_t>(s)] = {buffer.get(), 0};
      copied[static_cast<size_t>(s)] = true;
      cost->bytes_in += t.bytes;
    }
    owned.push_back(std::move(buffer));
  }
  std::vector<mtl::Buffer*> scratch;
  result = Scratch(device, plan, limits, &owned, &scratch);
  if (!result.ok()) return result;
  std::unique_ptr<mtl::Buffer> placeholder = device.NewBuffer(mtl::kThreadgroupMemoryGranule, mtl::Storage::kPrivate);
  if (placeholder == nullptr) return NoBuffer("the empty tensors' placeholder", mtl::kThreadgroupMemoryGranule, limits);

  std::unique_ptr<mtl::CommandBuffer> command_buffer = queue.NewCommandBuffer();
  if (command_buffer == nullptr) return Fail(Outcome::kGpu, "Metal gave no command buffer");
  std::unique_ptr<mtl::ComputeEncoder> encoder = command_buffer->NewComputeEncoder();
  if (encoder == nullptr) return Fail(Outcome::kGpu, "Metal gave no compute command encoder");
  Encode(*encoder, plan, pipelines, bound, scratch, *placeholder);
  command_buffer->Commit();
  command_buffer->WaitUntilCompleted();
  cost->command_buffers += 1;
  cost->waits += 1;
  result = Completed(*command_buffer, KernelNames(plan));
  if (!result.ok()) return result;
  for (int s = 0; s < num_slots; ++s) {
    if (!copied[static_cast<size_t>(s)] || !plan.written[static_cast<size_t>(s)]) continue;
    std::memcpy(slots[s].data, bound[static_cast<size_t>(s)].buffer->Contents(), static_cast<size_t>(slots[s].bytes));
    cost->bytes_out += slots[s].bytes;
  }
  return {};
}

Result RunOnStream(mtl::Stream& stream, mtl::Device& device, const Plan& plan, const std::vector<BoundSlot>& slots,
                   const std::vector<mtl::Buffer*>& scratch, bool wait, Cost* cost) {
  const std::string invalid = Validate(plan, static_cast<int>(slots.size()));
  if (!invalid.empty()) return Fail(Outcome::kError, "invalid plan: " + invalid);
  if (plan.empty()) return {};
  if (scratch.size() != plan.scratch.size()) return Fail(Outcome::kError, "scratch buffers missing");
  std::vector<const mtl::Pipeline*> pipelines;
  Result result = Pipelines(device, plan, &pipelines);
  if (!result.ok()) return result;
  std::unique_ptr<mtl::Buffer> placeholder = device.NewBuffer(mtl::kThreadgroupMemoryGranule, mtl::Storage::kPrivate);
  if (placeholder == nullptr) {
    return NoBuffer("the empty tensors' placeholder", mtl::kThreadgroupMemoryGranule, device.GetLimits());
  }
  auto encode = [&](mtl::CommandBuffer& command_buffer) -> Result {
    std::unique_ptr<mtl::ComputeEncoder> encoder = command_buffer.NewComputeEncoder();
    if (encoder == nullptr) {
      return Fail(Outcome::kGpu, "Metal gave no compute command encoder on the stream's command buffer");
    }
    Encode(*encoder, plan, pipelines, slots, scratch, *placeholder);
    return {};
  };
  return EncodeOnStream(stream, KernelNames(plan), encode, wait, cost);
}

Result EncodeOnStream(mtl::Stream& stream, const std::string& what,
                      const std::function<Result(mtl::CommandBuffer&)>& encode, bool wait, Cost* cost) {
  const bool sync = wait || metal::GpuSyncOn();
  Result result;
  // With `sync`: the command buffer to wait for once the queue is released.
  std::unique_ptr<mtl::CommandBuffer> submitted;
  stream.Sync([&] {
    std::unique_ptr<mtl::CommandBuffer> command_buffer = stream.CurrentCommandBuffer();
    if (command_buffer == nullptr) {
      result = Fail(Outcome::kGpu, "tensorflow-metal's stream gave no command buffer");
      return;
    }
    result = encode(*command_buffer);
    if (!result.ok()) return;
    if (!sync) {
      stream.Commit();  // batched: may submit later (kernels/metal/tf_metal_stream.h)
      return;
    }
    // The buffer that carries the work once encoding is done (MPSGraph may
    // have committed the one the stream gave and continued on another).
    std::unique_ptr<mtl::CommandBuffer> root = command_buffer->Root();
    if (root == nullptr) {
      result = Fail(Outcome::kGpu, "tensorflow-metal's command buffer has no root command buffer");
      return;
    }
    // Submitted without waiting here, so the wait does not hold the queue
    // TensorFlow encodes every op on.
    mtl::CommandBuffer* cb = root.get();
    if (metal::CommitUntilSubmitted([&] { stream.Commit(); }, [&] {
          const mtl::CommandStatus status = cb->Status();
          return status != mtl::CommandStatus::kNotEnqueued && status != mtl::CommandStatus::kEnqueued;
        })) {
      submitted = std::move(root);
      return;
    }
    stream.CommitAndWait();
    cost->waits += 1;
    result = Completed(*root, what);
  });
  if (submitted != nullptr) {
    submitted->WaitUntilCompleted();
    cost->waits += 1;
    result = Completed(*submitted, what);
  }
  return result;
}

}  // namespace metal_plan
}  // namespace mo

// A strict model of Metal (kernels/metal_plan/metal_api.h) for the test
// routes METAL_OPS_METAL=shim (the own queue) and shim-stream (tensorflow-
// metal's stream): the op library's Metal host path runs against it as it
// would against a Mac's GPU. What it enforces, from Apple's documentation:
//   - newBufferWithBytesNoCopy: a page-aligned pointer (16 KiB pages) and a
//     length that is a page multiple, else nil; every buffer: nil for 0
//     bytes or above maxBufferLength; new buffers hold garbage (NaN bytes);
//   - a private buffer's contents are not the CPU's (Contents() is nullptr);
//   - setBuffer offsets aligned (16 bytes) and inside the buffer; setBytes
//     smaller than 4 KiB; no kernel reading or writing past the end of a
//     buffer the model allocated (a guard page after each, below);
//     threadgroup memory a multiple of 16 within 32 KiB with the
//     pipeline's own; threads per threadgroup within the pipeline's
//     maxTotalThreadsPerThreadgroup; nothing encoded after endEncoding; a
//     command buffer committed with its encoder ended, waited for only once
//     committed; its error read only once completed (status says
//     "committed" until the wait);
//   - tensorflow-metal's stream (MetalStream, read from its 1.2.0 binary):
//     the current command buffer read only inside the queue, created lazily,
//     submitted by every MPS_MAX_COMMIT_COUNT-th commit (2 by default).
// A broken rule is a violation: counted, reported on stderr, and the command
// buffer holding it fails (tests/test_metal_plans.py reads the count).
// Dispatches run the shim's kernels (shim_exec.cc) when the command buffer is
// committed, threadgroups in a shuffled order. It counts bytes copied, no-copy
// wraps, command buffers and waits, and injects faults named in
// METAL_OPS_MODEL_FAULTS (comma-separated, read at each call): nil_device
// (MTLCreateSystemDefaultDevice gives none: a virtual machine), nil_buffer,
// nil_private (private buffers only: scratch), compile (every library fails
// to compile), compile=LIB (the library LIB alone), compile=LIB@FUNCTION (the
// compile of that instantiation of LIB alone), no_metal3 (the device is
// not of MTLGPUFamilyMetal3: no MSL 3.0), gpu_error, no_apple7,
// nil_encoder, nil_command_buffer, max_threads=N (every pipeline's
// maxTotalThreadsPerThreadgroup), max_threads=N@FUNCTION (the pipeline of
// FUNCTION alone: a kernel using many registers), max_buffer=N, no_copy (every
// newBufferWithBytesNoCopy refused, as Metal may refuse memory that is not
// from vm_allocate or mmap), simd_width=N (the pipelines' threadExecutionWidth),
// wrong_result (the last dispatch of each command buffer perturbs the first
// element it wrote in each buffer the model allocated: a GPU that computes
// differently; no-copy wraps are refused meanwhile, so the tensors are
// copies and a wrapped page's other allocations are never touched),
// commit_and_continue (on tensorflow-metal's stream, MPSGraph's
// commitAndContinue on the stream's command buffer before each encoder).
// Its pipelines come through the library's own pipeline cache and language
// gate (kernels/metal/pipeline_cache.h over the embedded sources), one cache
// per set of compile faults (a Mac compiles each text once); a compiled
// library holds the functions its text defines, no other, and each compile
// is recorded (metal_ops_model_compiles).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/metal_plan/executor.h"
#include "kernels/metal_plan/metal_api.h"
#include "tests/metal_shim/shim_exec.h"
// After the shim: the shaders' mo:: helpers name the shim's ::metal, which
// mo::metal (the glue's namespace) would hide.
#include "kernels/metal/embedded_sources.h"
#include "kernels/metal/pipeline_cache.h"

namespace msl_shim {
namespace model {
namespace {

using mo::mtl::Buffer;
using mo::mtl::CommandStatus;
using mo::mtl::Storage;

constexpr uint64_t kPage = 16384;                          // Apple silicon's page
constexpr uint64_t kMaxThreadgroupMemory = 32 * 1024;      // maxThreadgroupMemoryLength
constexpr uint64_t kMaxThreadsPerThreadgroup = 1024;       // every Apple GPU's pipelines, at most
constexpr uint64_t kMaxBufferLength = uint64_t(8) << 30;   // maxBufferLength of a 16 GB M1

struct Faults {
  bool nil_buffer = false, nil_private = false, compile = false, gpu_error = false, no_apple7 = false, nil_encoder = false,
       nil_command_buffer = false, no_copy = false, wrong_result = false, commit_and_continue = false, no_metal3 = false,
       nil_device = false;
  std::string compile_library;   // compile=LIB
  std::string compile_function;  // compile=LIB@FUNCTION
  uint64_t simd_width = 32;
  uint64_t max_threads = kMaxThreadsPerThreadgroup;
  uint64_t max_buffer = kMaxBufferLength;
  std::map<std::string, uint64_t> pipeline_max_threads;  // max_threads=N@FUNCTION: that pipeline's limit
};

// The faults without a value, and those with a number, by name.
constexpr std::pair<const char*, bool Faults::*> kFlags[] = {
    {"nil_buffer", &Faults::nil_buffer}, {"nil_private", &Faults::nil_private}, {"compile", &Faults::compile},
    {"no_metal3", &Faults::no_metal3}, {"nil_device", &Faults::nil_device}, {"gpu_error", &Faults::gpu_error},
    {"no_apple7", &Faults::no_apple7}, {"nil_encoder", &Faults::nil_encoder},
    {"nil_command_buffer", &Faults::nil_command_buffer}, {"no_copy", &Faults::no_copy},
    {"wrong_result", &Faults::wrong_result}, {"commit_and_continue", &Faults::commit_and_continue}};
constexpr std::pair<const char*, uint64_t Faults::*> kNumbers[] = {
    {"max_threads", &Faults::max_threads}, {"max_buffer", &Faults::max_buffer}, {"simd_width", &Faults::simd_width}};

Faults ReadFaults() {
  Faults f;
  const char* env = std::getenv("METAL_OPS_MODEL_FAULTS");
  std::string list = env == nullptr ? "" : env;
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(at, end - at);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const uint64_t value = eq == std::string::npos ? 0 : std::strtoull(item.c_str() + eq + 1, nullptr, 10);
    for (const auto& [name, flag] : kFlags) {
      if (key == name && eq == std::string::npos) f.*flag = true;
    }
    const size_t at_sign = item.find('@');
    for (const auto& [name, number] : kNumbers) {
      if (key == name && at_sign == std::string::npos) f.*number = value;
    }
    if (key == "max_threads" && at_sign != std::string::npos) f.pipeline_max_threads[item.substr(at_sign + 1)] = value;
    if (key == "compile" && eq != std::string::npos) {
      f.compile_library = item.substr(eq + 1, at_sign == std::string::npos ? std::string::npos : at_sign - eq - 1);
      if (at_sign != std::string::npos) f.compile_function = item.substr(at_sign + 1);
    }
    at = end + 1;
  }
  return f;
}

struct Counters {
  std::atomic<uint64_t> bytes_copied{0}, wrapped{0}, command_buffers{0}, waits{0}, violations{0}, dispatches{0};
  std::mutex mutex;
  std::string first_violation, last_violation;
  std::string compiles;  // one "library instantiation count" line per compile (below)
};
Counters& Count() {
  static Counters* counters = new Counters;
  return *counters;
}

void Violation(const std::string& rule) {
  Counters& c = Count();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.violations.fetch_add(1) == 0) c.first_violation = rule;
    c.last_violation = rule;
  }
  std::fprintf(stderr, "metal model: Metal's rule broken: %s\n", rule.c_str());
}

// Memory the model allocates for a buffer: `length` bytes (NaN bytes: new
// buffers hold garbage) ending 0..15 bytes before a guard page of kGuardByte
// mapped PROT_NONE (the start stays 16-byte aligned, as a Metal buffer's);
// the bytes between are kGuardByte too. A dispatch that reads or writes the
// guard page faults; the model's SIGSEGV handler (OnFault) opens the page,
// notes it and lets the access go on, so the dispatch ends and the model
// reports it: a write changed guard bytes, else it was a read. On a Mac such
// an access reads another allocation's data, corrupts it, or faults.
constexpr uint8_t kGuardByte = 0xa5;

struct Memory {
  uint8_t* base = nullptr;
  size_t mapped = 0;
  uint8_t* data = nullptr;
  uint64_t length = 0;
  uint8_t* guard = nullptr;       // the guard page
  std::atomic<bool> touched{false};  // the guard page was accessed (it is open since)

  static size_t Page() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
  }
  explicit Memory(uint64_t bytes) : length(bytes) {
    const size_t page = Page(), body = (static_cast<size_t>(bytes) + 15) / 16 * 16;
    const size_t before = (body + page - 1) / page * page;
    mapped = before + page;
    void* at = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) {
      std::fprintf(stderr, "metal model: mmap of %zu bytes failed\n", mapped);
      std::abort();
    }
    base = static_cast<uint8_t*>(at);
    guard = base + before;
    data = guard - body;
    std::memset(data, 0xff, static_cast<size_t>(bytes));
    std::memset(data + bytes, kGuardByte, body - static_cast<size_t>(bytes) + page);
    mprotect(guard, page, PROT_NONE);
  }
  ~Memory() { munmap(base, mapped); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  // What a dispatch did past the end: "" (nothing), "wrote" or "read"; the
  // guard is closed again for the next.
  std::string PastTheEnd() {
    std::string what;
    for (uint8_t* at = data + length; at < guard && what.empty(); ++at) {
      if (*at != kGuardByte) what = "wrote";
    }
    for (size_t at = 0; touched.load() && at < Page() && what.empty(); ++at) {
      if (guard[at] != kGuardByte) what = "wrote";
    }
    if (what.empty() && touched.load()) what = "read";
    if (!what.empty()) {
      if (!touched.load()) mprotect(guard, Page(), PROT_READ | PROT_WRITE);
      std::memset(data + length, kGuardByte, static_cast<size_t>(guard - data - length) + Page());
      mprotect(guard, Page(), PROT_NONE);
      touched.store(false);
    }
    return what;
  }
};

// The guards of the dispatch this thread runs (OnFault reads them).
thread_local Memory* const* t_guards = nullptr;
thread_local int t_num_guards = 0;
struct sigaction g_previous_segv;

void OnFault(int signal, siginfo_t* info, void* context) {
  const uint8_t* at = static_cast<const uint8_t*>(info->si_addr);
  for (int i = 0; i < t_num_guards; ++i) {
    Memory* m = t_guards[i];
    if (m != nullptr && at >= m->guard && at < m->guard + Memory::Page()) {
      mprotect(m->guard, Memory::Page(), PROT_READ | PROT_WRITE);
      m->touched.store(true);
      return;  // the access runs again, on the open page
    }
  }
  // Not a guard: the fault is the process's, under the handler it had.
  (void)signal;
  (void)context;
  sigaction(SIGSEGV, &g_previous_segv, nullptr);
}

// Runs `run` with the guards of `memory` (kMaxBuffers entries, nullptr for none) watched.
template <typename Run>
void WithGuards(Memory* const* memory, const Run& run) {
  static const bool installed = [] {
    struct sigaction action = {};
    action.sa_sigaction = &OnFault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGSEGV, &action, &g_previous_segv) == 0;
  }();
  (void)installed;
  t_guards = memory;
  t_num_guards = exec::kMaxBuffers;
  run();
  t_num_guards = 0;
  t_guards = nullptr;
}

// The memory a buffer's GPU side reaches: owned (shared with every dispatch
// recorded on it, as a command buffer retains its buffers) or the caller's.
class ModelBuffer : public Buffer {
 public:
  ModelBuffer(uint64_t length, Storage storage, std::shared_ptr<Memory> owned, uint8_t* data)
      : length_(length), storage_(storage), owned_(std::move(owned)), data_(data) {}
  uint64_t Length() const override { return length_; }
  void* Contents() override { return storage_ == Storage::kShared ? data_ : nullptr; }
  uint8_t* gpu_data() const { return data_; }
  const std::shared_ptr<Memory>& owned() const { return owned_; }

 private:
  uint64_t length_;
  Storage storage_;
  std::shared_ptr<Memory> owned_;
  uint8_t* data_;
};

std::unique_ptr<Buffer> Owned(uint64_t length, Storage storage) {
  auto memory = std::make_shared<Memory>(length);
  uint8_t* data = memory->data;
  return std::unique_ptr<Buffer>(new ModelBuffer(length, storage, std::move(memory), data));
}

class ModelPipeline : public mo::mtl::Pipeline {
 public:
  explicit ModelPipeline(const exec::Entry* entry) : entry_(entry) {}
  uint64_t MaxTotalThreadsPerThreadgroup() const override {
    const Faults f = ReadFaults();
    const auto own = f.pipeline_max_threads.find(entry_->name);
    return own != f.pipeline_max_threads.end() ? own->second : f.max_threads;
  }
  uint64_t StaticThreadgroupMemoryLength() const override { return 0; }
  uint64_t ThreadExecutionWidth() const override { return ReadFaults().simd_width; }  // every Apple GPU's: 32
  const exec::Entry* entry() const { return entry_; }

 private:
  const exec::Entry* entry_;
};

// A bound argument: where it points and what keeps its memory alive.
struct Arg {
  exec::Bound bound;
  std::shared_ptr<Memory> keep;
  bool fresh = false;  // set since the last dispatch
};

struct Dispatch {
  const ModelPipeline* pipeline;
  Arg args[exec::kMaxBuffers];
  uint64_t groups, threads, threadgroup_bytes;
};

// The fault wrong_result: flips an exponent bit of the first 4-byte word of
// `now` that differs from `before` (a float far off, an integer far off).
void PerturbFirstWrite(const std::string& before, char* now) {
  for (size_t at = 0; at + 4 <= before.size(); at += 4) {
    if (std::memcmp(before.data() + at, now + at, 4) == 0) continue;
    uint32_t word;
    std::memcpy(&word, now + at, 4);
    word ^= 0x40000000u;
    std::memcpy(now + at, &word, 4);
    return;
  }
}

// A command buffer's state, shared by the handles given out for it (the
// stream hands out its current one more than once).
struct CommandState {
  std::vector<Dispatch> dispatches;
  CommandStatus status = CommandStatus::kNotEnqueued;
  CommandStatus final_status = CommandStatus::kNotEnqueued;
  std::string error;
  bool encoding = false;
  std::string broken;  // the first rule this buffer's encoding broke

  void Break(const std::string& rule) {
    Violation(rule);
    if (broken.empty()) broken = rule;
  }

  // The GPU's run, at commit: the dispatches in order.
  void Commit() {
    if (status != CommandStatus::kNotEnqueued) return Break("commit of a command buffer already committed");
    if (encoding) Break("commit with a compute encoder not ended (endEncoding)");
    Count().command_buffers.fetch_add(1);
    status = CommandStatus::kCommitted;
    final_status = CommandStatus::kCompleted;
    if (!broken.empty()) {
      final_status = CommandStatus::kError;
      error = "Metal's rule broken: " + broken;
      return;
    }
    if (ReadFaults().gpu_error) {
      final_status = CommandStatus::kError;
      error = "Internal Error (0000000e:Internal Error) (injected by the model)";
      return;
    }
    const bool wrong_result = ReadFaults().wrong_result;
    for (const Dispatch& d : dispatches) {
      exec::Bound args[exec::kMaxBuffers];
      for (int i = 0; i < exec::kMaxBuffers; ++i) {
        args[i] = d.args[i].bound;
        args[i].fresh = d.args[i].fresh;
      }
      const uint64_t seed = Count().dispatches.fetch_add(1);
      const bool perturb = wrong_result && &d == &dispatches.back();
      std::vector<std::string> before(perturb ? exec::kMaxBuffers : 0);
      for (size_t i = 0; i < before.size(); ++i) {
        if (args[i].data != nullptr && !args[i].bytes && d.args[i].keep != nullptr) {
          before[i].assign(static_cast<const char*>(args[i].data), static_cast<size_t>(args[i].length));
        }
      }
      Memory* guards[exec::kMaxBuffers] = {};
      for (int i = 0; i < exec::kMaxBuffers; ++i) guards[i] = d.args[i].keep.get();
      std::string failed;
      WithGuards(guards, [&] {
        failed = exec::Execute(*d.pipeline->entry(), args, d.groups, d.threads, d.threadgroup_bytes, seed);
      });
      for (int i = 0; i < exec::kMaxBuffers; ++i) {
        const std::string past = guards[i] == nullptr ? "" : guards[i]->PastTheEnd();
        if (!past.empty() && failed.empty()) failed = past + " past the end of buffer " + std::to_string(i);
      }
      for (size_t i = 0; i < before.size(); ++i) PerturbFirstWrite(before[i], static_cast<char*>(args[i].data));
      if (!failed.empty()) {
        Violation(std::string(d.pipeline->entry()->name) + ": " + failed);
        final_status = CommandStatus::kError;
        error = std::string(d.pipeline->entry()->name) + ": " + failed;
        return;
      }
    }
  }

  void Wait() {
    if (status == CommandStatus::kNotEnqueued) return Break("waitUntilCompleted on a command buffer never committed");
    Count().waits.fetch_add(1);
    status = final_status;
  }
};

class ModelEncoder : public mo::mtl::ComputeEncoder {
 public:
  explicit ModelEncoder(std::shared_ptr<CommandState> state) : state_(std::move(state)) { state_->encoding = true; }

  void SetPipeline(const mo::mtl::Pipeline& pipeline) override {
    if (Usable()) pipeline_ = static_cast<const ModelPipeline*>(&pipeline);
  }
  void SetBuffer(Buffer& buffer, uint64_t offset, uint32_t index) override {
    if (!Usable() || !Index(index)) return;
    auto& b = static_cast<ModelBuffer&>(buffer);
    if (offset % mo::mtl::kBufferOffsetAlignment != 0 || offset > b.Length()) {
      return state_->Break("setBuffer offset " + std::to_string(offset) + " in a buffer of " +
                           std::to_string(b.Length()) + " bytes (aligned to 16, inside the buffer)");
    }
    args_[index] = {{b.gpu_data() + offset, b.Length() - offset, false, true}, b.owned(), true};
  }
  void SetBytes(const void* data, uint64_t length, uint32_t index) override {
    if (!Usable() || !Index(index)) return;
    if (length == 0 || length >= mo::mtl::kMaxSetBytesLength) {
      return state_->Break("setBytes of " + std::to_string(length) + " bytes (smaller than 4 KiB)");
    }
    auto copy = std::make_shared<Memory>(length);
    std::memcpy(copy->data, data, static_cast<size_t>(length));
    args_[index] = {{copy->data, length, true, true}, copy, true};
  }
  void SetThreadgroupMemoryLength(uint64_t length, uint32_t index) override {
    if (!Usable()) return;
    if (index != 0 || length % mo::mtl::kThreadgroupMemoryGranule != 0 || length > kMaxThreadgroupMemory) {
      return state_->Break("setThreadgroupMemoryLength " + std::to_string(length) + " at " + std::to_string(index) +
                           " (a multiple of 16 within 32 KiB)");
    }
    threadgroup_bytes_ = length;
  }
  void DispatchThreadgroups(uint64_t groups, uint64_t threads) override {
    if (!Usable()) return;
    if (pipeline_ == nullptr) return state_->Break("dispatch without a pipeline");
    if (groups == 0 || threads == 0 || threads > pipeline_->MaxTotalThreadsPerThreadgroup()) {
      return state_->Break(std::string(pipeline_->entry()->name) + ": " + std::to_string(groups) + " threadgroups of " +
                           std::to_string(threads) + " threads (the pipeline runs at most " +
                           std::to_string(pipeline_->MaxTotalThreadsPerThreadgroup()) + ")");
    }
    Dispatch d;
    d.pipeline = pipeline_;
    for (int i = 0; i < exec::kMaxBuffers; ++i) d.args[i] = args_[i];
    d.groups = groups;
    d.threads = threads;
    d.threadgroup_bytes = threadgroup_bytes_;
    state_->dispatches.push_back(std::move(d));
    for (Arg& a : args_) a.fresh = false;
  }
  void EndEncoding() override {
    if (Usable()) ended_ = true;
    state_->encoding = false;
  }

 private:
  bool Usable() {
    if (ended_) state_->Break("encoding after endEncoding");
    if (state_->status != CommandStatus::kNotEnqueued) state_->Break("encoding on a committed command buffer");
    return !ended_;
  }
  bool Index(uint32_t index) {
    if (index < static_cast<uint32_t>(exec::kMaxBuffers)) return true;
    state_->Break("buffer index " + std::to_string(index) + " (at most 30)");
    return false;
  }

  std::shared_ptr<CommandState> state_;
  const ModelPipeline* pipeline_ = nullptr;
  Arg args_[exec::kMaxBuffers];
  uint64_t threadgroup_bytes_ = 0;
  bool ended_ = false;
};

class ModelCommandBuffer : public mo::mtl::CommandBuffer {
 public:
  explicit ModelCommandBuffer(std::shared_ptr<CommandState> state) : state_(std::move(state)) {}
  std::unique_ptr<mo::mtl::ComputeEncoder> NewComputeEncoder() override {
    if (ReadFaults().nil_encoder) return nullptr;
    if (state_->encoding) state_->Break("a second compute encoder while one is open");
    return std::unique_ptr<mo::mtl::ComputeEncoder>(new ModelEncoder(state_));
  }
  void Commit() override { state_->Commit(); }
  void WaitUntilCompleted() override { state_->Wait(); }
  CommandStatus Status() override { return state_->status; }
  std::string Error() override {
    if (state_->status != CommandStatus::kCompleted && state_->status != CommandStatus::kError) {
      state_->Break("a command buffer's error read before it completed");
    }
    return state_->status == CommandStatus::kError ? state_->error : "";
  }
  std::unique_ptr<mo::mtl::CommandBuffer> Root() override {
    return std::unique_ptr<mo::mtl::CommandBuffer>(new ModelCommandBuffer(state_));
  }

 private:
  std::shared_ptr<CommandState> state_;
};

std::unique_ptr<mo::mtl::CommandBuffer> NewCommandBufferHandle(std::shared_ptr<CommandState> state) {
  return std::unique_ptr<mo::mtl::CommandBuffer>(new ModelCommandBuffer(std::move(state)));
}

// tensorflow-metal's MPSCommandBuffer: its root command buffer carries the
// work; commitAndContinue (which MPSGraph calls) commits the root and
// continues on a new one. Apple's header: after it, the MPSCommandBuffer's
// own status and wait are not those of the work committed; ask the
// rootCommandBuffer. The model makes asking the MPSCommandBuffer itself
// after a commitAndContinue a violation.
struct MpsState {
  std::shared_ptr<CommandState> root = std::make_shared<CommandState>();
  bool continued = false;
  void CommitAndContinue() {
    root->Commit();
    root = std::make_shared<CommandState>();
    continued = true;
  }
};

class ModelMpsCommandBuffer : public mo::mtl::CommandBuffer {
 public:
  explicit ModelMpsCommandBuffer(std::shared_ptr<MpsState> state) : state_(std::move(state)) {}
  // The fault commit_and_continue: MPSGraph's commitAndContinue before each encoder.
  std::unique_ptr<mo::mtl::ComputeEncoder> NewComputeEncoder() override {
    if (ReadFaults().commit_and_continue) state_->CommitAndContinue();
    return ModelCommandBuffer(state_->root).NewComputeEncoder();
  }
  void Commit() override { Live("commit").Commit(); }
  void WaitUntilCompleted() override { Live("waitUntilCompleted").WaitUntilCompleted(); }
  CommandStatus Status() override { return Live("status").Status(); }
  std::string Error() override { return Live("error").Error(); }
  std::unique_ptr<mo::mtl::CommandBuffer> Root() override { return NewCommandBufferHandle(state_->root); }

 private:
  ModelCommandBuffer& Live(const char* what) {
    if (state_->continued) {
      Violation(std::string(what) + " of an MPSCommandBuffer after commitAndContinue (its rootCommandBuffer "
                "carries the work)");
    }
    live_.reset(new ModelCommandBuffer(state_->root));
    return *live_;
  }
  std::shared_ptr<MpsState> state_;
  std::unique_ptr<ModelCommandBuffer> live_;
};

class ModelQueue : public mo::mtl::CommandQueue {
 public:
  std::unique_ptr<mo::mtl::CommandBuffer> NewCommandBuffer() override {
    if (ReadFaults().nil_command_buffer) return nullptr;
    return NewCommandBufferHandle(std::make_shared<CommandState>());
  }
};

class ModelDevice : public mo::mtl::Device {
 public:
  mo::mtl::Limits GetLimits() override {
    const Faults f = ReadFaults();
    return {f.max_buffer, kMaxThreadgroupMemory, kPage, !f.no_apple7, !f.no_metal3};
  }
  std::unique_ptr<Buffer> NewBufferNoCopy(void* data, uint64_t length) override {
    const Faults f = ReadFaults();
    if (!Allowed(length) || f.no_copy || f.wrong_result || reinterpret_cast<uintptr_t>(data) % kPage != 0 ||
        length % kPage != 0) {
      return nullptr;
    }
    Count().wrapped.fetch_add(1);
    return std::unique_ptr<Buffer>(new ModelBuffer(length, Storage::kShared, nullptr, static_cast<uint8_t*>(data)));
  }
  std::unique_ptr<Buffer> NewBufferWithBytes(const void* data, uint64_t length) override {
    if (!Allowed(length)) return nullptr;
    std::unique_ptr<Buffer> buffer = Owned(length, Storage::kShared);
    std::memcpy(buffer->Contents(), data, static_cast<size_t>(length));
    Count().bytes_copied.fetch_add(length);
    return buffer;
  }
  std::unique_ptr<Buffer> NewBuffer(uint64_t length, Storage storage) override {
    if (storage == Storage::kPrivate && ReadFaults().nil_private) return nullptr;
    return Allowed(length) ? Owned(length, storage) : nullptr;
  }
  const mo::mtl::Pipeline* GetPipeline(const std::string& library, const std::string& function,
                                       std::string* error) override {
    const Faults f = ReadFaults();
    PipelineCache* cache = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::unique_ptr<PipelineCache>& entry =
          caches_[(f.compile ? "compile," : "") + f.compile_library + "@" + f.compile_function +
                  (f.no_metal3 ? ",no_metal3" : "")];
      if (entry == nullptr) entry.reset(new PipelineCache);
      cache = entry.get();
    }
    // newLibraryWithSource: the compile's text, recorded; its kernels run as the shim compiled them.
    auto compile = [&f](const mo::metal::CompileUnit& unit, std::string* e) -> std::shared_ptr<const Library> {
      const char* host_name = unit.instantiation == nullptr ? "-" : unit.instantiation->host_name;
      if (f.compile || (f.compile_library == unit.source.library &&
                        (f.compile_function.empty() || f.compile_function == host_name))) {
        *e = mo::metal::CompileFailure(unit) + " (injected by the model)";
        return nullptr;
      }
      size_t instantiations = 0;
      for (size_t at = unit.text.find("[[host_name("); at != std::string::npos;
           at = unit.text.find("[[host_name(", at + 1)) {
        ++instantiations;
      }
      {
        std::lock_guard<std::mutex> lock(Count().mutex);
        Count().compiles +=
            std::string(unit.source.library) + " " + host_name + " " + std::to_string(instantiations) + "\n";
      }
      return std::make_shared<const Library>(Library{unit.source.library, unit.text});
    };
    // newFunctionWithName (a function the compiled text defines: a host name
    // it instantiates, or a plain kernel) + newComputePipelineStateWithDescriptor.
    auto build = [](std::shared_ptr<const Library> lib, const std::string& name,
                    std::string* e) -> std::unique_ptr<mo::mtl::Pipeline> {
      const bool defined = lib->text.find("host_name(\"" + name + "\")") != std::string::npos ||
                           lib->text.find("void " + name + "(") != std::string::npos;
      const exec::Entry* entry = defined ? exec::Find(lib->name, name) : nullptr;
      if (entry == nullptr) *e = "Metal function '" + name + "' is not in the shaders of '" + lib->name + "'";
      return std::unique_ptr<mo::mtl::Pipeline>(entry == nullptr ? nullptr : new ModelPipeline(entry));
    };
    return cache->Get(library, function, mo::metal::MslVersionForDevice(!f.no_metal3), compile, build, error);
  }
  std::unique_ptr<mo::mtl::CommandQueue> NewCommandQueue() override {
    return std::unique_ptr<mo::mtl::CommandQueue>(new ModelQueue);
  }

 private:
  static bool Allowed(uint64_t length) {
    const Faults f = ReadFaults();
    return !f.nil_buffer && length > 0 && length <= f.max_buffer;
  }
  // A compiled library: its name and the text compiled.
  struct Library {
    const char* name;
    std::string text;
  };
  using PipelineCache = mo::metal::PipelineCache<std::shared_ptr<const Library>>;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<PipelineCache>> caches_;
};

// tensorflow-metal's MetalStream: one queue, a lazily made current command
// buffer, commits batched every MPS_MAX_COMMIT_COUNT-th call.
// Its queue is serial and not recursive, as a dispatch queue is: a
// dispatch_sync onto it from inside it is a violation (a deadlock on a Mac;
// the model reports it and does not run the body), and so is reading the
// current command buffer or committing outside it (a race with TensorFlow's
// own encoding there).
class ModelStream : public mo::mtl::Stream {
 public:
  void Sync(const std::function<void()>& body) override {
    if (InQueue()) {
      return Violation("dispatch_sync onto the stream's queue from inside it (a deadlock on a Mac)");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    inside_ = this;
    body();
    inside_ = nullptr;
  }
  std::unique_ptr<mo::mtl::CommandBuffer> CurrentCommandBuffer() override {
    if (!InQueue()) Violation("currentCommandBuffer read outside the stream's queue");
    if (current_ == nullptr) current_ = std::make_shared<MpsState>();
    return std::unique_ptr<mo::mtl::CommandBuffer>(new ModelMpsCommandBuffer(current_));
  }
  void Commit() override {
    if (!InQueue()) return Violation("the stream's commit called outside its queue");
    if (++commits_ % MaxCommit() != 0 || current_ == nullptr) return;
    current_->root->Commit();
    current_ = nullptr;
  }
  void CommitAndWait() override {
    if (!InQueue()) return Violation("the stream's commitAndWait called outside its queue");
    std::shared_ptr<MpsState> state = std::move(current_);
    if (state == nullptr) return;
    state->root->Commit();
    state->root->Wait();
  }

 private:
  static int MaxCommit() {
    static const int max_commit = [] {
      const char* env = std::getenv("MPS_MAX_COMMIT_COUNT");
      const int v = env == nullptr ? 0 : std::atoi(env);
      return v > 0 ? v : 2;
    }();
    return max_commit;
  }
  // Whether the calling thread is inside the queue (running a Sync body).
  bool InQueue() const { return inside_ == this; }
  static thread_local const ModelStream* inside_;  // the stream whose Sync body this thread runs
  std::mutex mutex_;  // the serial queue
  std::shared_ptr<MpsState> current_;
  int commits_ = 0;
};

thread_local const ModelStream* ModelStream::inside_ = nullptr;

void Upload(Buffer* buffer, const void* data, uint64_t bytes) {
  std::memcpy(static_cast<ModelBuffer*>(buffer)->gpu_data(), data, static_cast<size_t>(bytes));
}

void Download(Buffer* buffer, void* data, uint64_t bytes) {
  std::memcpy(data, static_cast<ModelBuffer*>(buffer)->gpu_data(), static_cast<size_t>(bytes));
}

void PoisonOutputs(const mo::metal_plan::Plan* plan, const mo::metal_plan::HostTensor* slots, int num_slots) {
  for (int s = 0; s < num_slots; ++s) {
    if (!plan->written[static_cast<size_t>(s)] || slots[s].bytes == 0) continue;
    const char* begin = static_cast<const char*>(slots[s].data);
    bool shared = false;
    for (int o = 0; o < num_slots && !shared; ++o) {
      const char* other = static_cast<const char*>(slots[o].data);
      shared = o != s && slots[o].bytes > 0 && other < begin + slots[s].bytes && begin < other + slots[o].bytes;
    }
    if (!shared) std::memset(slots[s].data, 0xff, static_cast<size_t>(slots[s].bytes));
  }
}

}  // namespace
}  // namespace model
}  // namespace msl_shim

namespace msl_shim {
namespace model {
namespace {
ModelDevice* Gpu() {
  static ModelDevice* gpu = new ModelDevice;
  return gpu;
}
// MTLCreateSystemDefaultDevice.
mo::mtl::Device* SystemDevice() { return ReadFaults().nil_device ? nullptr : Gpu(); }
}  // namespace
}  // namespace model
}  // namespace msl_shim

extern "C" const mo::metal_plan::ModelHooks* metal_ops_model_hooks() {
  using namespace msl_shim::model;  // NOLINT
  static ModelStream* queue = new ModelStream;
  static const mo::metal_plan::ModelHooks hooks = {mo::mtl::kApiVersion, Gpu(), queue, &Upload, &Download,
                                                   &PoisonOutputs, &SystemDevice};
  return &hooks;
}

// {bytes copied, buffers wrapped, command buffers, waits, violations, dispatches}.
extern "C" void metal_ops_model_counters(uint64_t out[6]) {
  msl_shim::model::Counters& c = msl_shim::model::Count();
  out[0] = c.bytes_copied.load();
  out[1] = c.wrapped.load();
  out[2] = c.command_buffers.load();
  out[3] = c.waits.load();
  out[4] = c.violations.load();
  out[5] = c.dispatches.load();
}

namespace msl_shim {
namespace model {
namespace {
// The counters' text `field` into `out` (NUL-terminated, truncated to `len`).
void CopyOut(std::string Counters::*field, char* out, size_t len) {
  Counters& c = Count();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (len == 0) return;
  std::strncpy(out, (c.*field).c_str(), len - 1);
  out[len - 1] = '\0';
}
}  // namespace
}  // namespace model
}  // namespace msl_shim

// The model's compiles in this process into `out`, in order: one "library
// instantiation count" line each: the instantiation compiled with the
// library's body ("-": the body alone) and how many instantiations
// (`[[host_name(`) the text compiled holds.
extern "C" void metal_ops_model_compiles(char* out, size_t len) {
  msl_shim::model::CopyOut(&msl_shim::model::Counters::compiles, out, len);
}

// The first violation's text into `out`.
extern "C" void metal_ops_model_first_violation(char* out, size_t len) {
  msl_shim::model::CopyOut(&msl_shim::model::Counters::first_violation, out, len);
}

// The model's rules fed a broken use each (tests/test_metal_model_rules.py):
// runs the use `what` against a fresh device, queue and stream of the model
// and returns the violations it counted, the last one's text into `out`.
// Each broken use has a correct twin ("ok_" prefix) that counts none.
extern "C" int metal_ops_model_misuse(const char* what, char* out, size_t len) {
  using namespace msl_shim::model;  // NOLINT
  using mo::mtl::Storage;
  const std::string use = what;
  Counters& c = Count();
  const uint64_t before = c.violations.load();
  ModelDevice gpu;
  ModelStream stream;
  std::unique_ptr<mo::mtl::CommandQueue> queue = gpu.NewCommandQueue();
  std::string error;
  const mo::mtl::Pipeline* pipeline = gpu.GetPipeline("trunc_exp", "trunc_exp_forward_float32", &error);
  // write_past_end: 1040 floats from x into a y of 1024; read_past_end: from an x of 1024 into y.
  std::unique_ptr<mo::mtl::Buffer> x = gpu.NewBuffer(use == "write_past_end" ? 4160 : 4096, Storage::kShared),
                                   y = gpu.NewBuffer(use == "read_past_end" ? 4160 : 4096, Storage::kShared);
  std::vector<uint8_t> params(use == "set_bytes_4096" ? 4096 : sizeof(int64_t), 0);  // TruncExpParams
  if (use == "write_past_end" || use == "read_past_end" || use == "ok_past_end") {  // num_elements
    const int64_t n = use == "ok_past_end" ? 1024 : 1040;
    std::memcpy(params.data(), &n, sizeof(n));
  }
  // One dispatch of trunc_exp's forward kernel on `cb`, broken as `use` says.
  auto encode = [&](mo::mtl::CommandBuffer& cb) {
    std::unique_ptr<mo::mtl::ComputeEncoder> encoder = cb.NewComputeEncoder();
    if (use != "dispatch_without_pipeline") encoder->SetPipeline(*pipeline);
    encoder->SetBuffer(*x, use == "offset_unaligned" ? 8 : 0, 0);
    encoder->SetBuffer(*y, use == "offset_outside" ? 8192 : 0, 1);
    if (use == "buffer_index_31") encoder->SetBuffer(*y, 0, 31);
    encoder->SetBytes(params.data(), params.size(), 2);
    if (use == "threadgroup_memory_unaligned") encoder->SetThreadgroupMemoryLength(24, 0);
    if (use == "threadgroup_memory_over") encoder->SetThreadgroupMemoryLength(32768 + 16, 0);
    if (use == "second_encoder") cb.NewComputeEncoder();
    encoder->DispatchThreadgroups(1, use == "threads_over_pipeline" ? 2048 : 64);
    if (use != "encoder_not_ended") encoder->EndEncoding();
    if (use == "encode_after_end") encoder->DispatchThreadgroups(1, 64);
  };
  if (pipeline == nullptr || x == nullptr || y == nullptr) {
    Violation("the misuse driver's setup failed: " + error);
  } else if (use == "nested_sync" || use == "ok_sync") {
    stream.Sync([&] {
      if (use == "nested_sync") stream.Sync([] {});
    });
  } else if (use == "commit_outside_queue" || use == "commit_and_wait_outside_queue" || use == "ok_commit") {
    stream.Sync([&] { encode(*stream.CurrentCommandBuffer()); });
    if (use == "ok_commit") {
      stream.Sync([&] { stream.CommitAndWait(); });
    } else if (use == "commit_and_wait_outside_queue") {
      stream.CommitAndWait();
    } else {
      stream.Commit();
    }
  } else if (use == "current_outside_queue") {
    stream.CurrentCommandBuffer();
  } else if (use == "mps_wait_after_continue" || use == "ok_mps_root") {
    auto mps = std::make_shared<MpsState>();
    ModelMpsCommandBuffer handle(mps);
    encode(handle);
    mps->CommitAndContinue();  // MPSGraph's
    std::unique_ptr<mo::mtl::CommandBuffer> root = handle.Root();
    root->Commit();
    if (use == "ok_mps_root") {
      root->WaitUntilCompleted();
    } else {
      handle.WaitUntilCompleted();
    }
  } else {
    std::unique_ptr<mo::mtl::CommandBuffer> cb = queue->NewCommandBuffer();
    if (use == "error_before_completion") {
      encode(*cb);
      cb->Commit();
      cb->Error();
      cb->WaitUntilCompleted();
    } else if (use == "wait_uncommitted") {
      encode(*cb);
      cb->WaitUntilCompleted();
    } else if (use == "commit_twice") {
      encode(*cb);
      cb->Commit();
      cb->Commit();
    } else if (use == "encode_after_commit") {
      encode(*cb);
      cb->Commit();
      cb->NewComputeEncoder()->SetPipeline(*pipeline);
      cb->WaitUntilCompleted();
    } else {
      encode(*cb);
      cb->Commit();
      cb->WaitUntilCompleted();
      cb->Error();
    }
  }
  const int violations = static_cast<int>(c.violations.load() - before);
  std::lock_guard<std::mutex> lock(c.mutex);
  if (len > 0) {
    std::strncpy(out, violations > 0 ? c.last_violation.c_str() : "", len - 1);
    out[len - 1] = '\0';
  }
  return violations;
}

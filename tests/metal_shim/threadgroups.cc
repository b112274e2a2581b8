// The MSL shim's threadgroups (tests/metal_shim/msl_shim.h: msl_shim::run_threadgroups,
// msl_shim::arrive): every thread of a threadgroup is a fiber with its own
// stack; a scheduler on the calling thread runs the runnable fibers one after
// another (in thread order, or reversed) until each waits at a barrier or a
// cooperative SIMD-group operation or has returned, then completes whatever
// cooperation every participant has reached, and repeats.
// A switch between fibers is msl_shim_switch_stacks below: the callee-saved registers
// pushed on one stack, popped from the other, and no system call (ucontext's
// swapcontext saves the signal mask at every switch, which would dominate the
// model's time). Built with AddressSanitizer (make asan-test), it
// tells ASan about every stack switch (the sanitizer's public fiber API), so
// instrumented code on a fiber's stack is checked like code on a thread's.
#if defined(__SANITIZE_ADDRESS__)
#define MSL_SHIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MSL_SHIM_ASAN 1
#endif
#endif
#if MSL_SHIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/metal_shim/msl_shim.h"

namespace msl_shim {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kSimdWidth = 32;

enum State { kRunnable, kWaiting, kDone };

struct Fiber {
  void* sp = nullptr;     // its stack pointer while switched out
  char* stack = nullptr;  // kStackBytes of the calling thread's StackPool
  State state = kRunnable;
  Arrival* arrival = nullptr;
};

struct Scheduler {
  void* main_sp = nullptr;
  // The calling thread's stack (ASan builds: the target of fiber -> scheduler switches).
  const void* main_stack = nullptr;
  size_t main_stack_bytes = 0;
  std::vector<Fiber> fibers;
  int current = -1;
  uint group = 0;
  ThreadFn fn = nullptr;
  void* arg = nullptr;
  std::vector<unsigned char> memory;
  std::string error;
};

thread_local Scheduler* g_scheduler = nullptr;
thread_local std::string g_error;

// The fibers' stacks, kept per calling thread from one dispatch to the next:
// fresh zero-filled stacks per dispatch (threads x 256 KiB of page faults and
// memset) would dominate the model's time, and a stack needs no initial
// contents. A dispatch takes the stacks [top, top + threads) and gives them
// back on return, so a nested run_threadgroups gets stacks of its own.
struct StackPool {
  std::vector<std::unique_ptr<char[]>> stacks;
  size_t top = 0;

  void Take(size_t count, std::vector<char*>* out) {
    while (stacks.size() < top + count) stacks.emplace_back(new char[kStackBytes]);
    out->clear();
    for (size_t i = 0; i < count; ++i) out->push_back(stacks[top + i].get());
    top += count;
  }
};
thread_local StackPool g_stacks;

// msl_shim_switch_stacks(from, to): saves the callee-saved registers (and on x86-64
// the SSE and x87 control words) on the current stack, stores the stack
// pointer in *from, loads `to` and returns into whatever saved its registers
// there: a msl_shim_switch_stacks of the other side, or a new fiber's FiberEntry. The
// frame is the one NewFiberStack lays out.
extern "C" void msl_shim_switch_stacks(void** from, void* to);

#define MSL_SHIM_STR2(x) #x
#define MSL_SHIM_STR(x) MSL_SHIM_STR2(x)
#define MSL_SHIM_SYMBOL MSL_SHIM_STR(__USER_LABEL_PREFIX__) "msl_shim_switch_stacks"
#if defined(__APPLE__)
#define MSL_SHIM_HIDDEN ".private_extern " MSL_SHIM_SYMBOL "\n"
#else
#define MSL_SHIM_HIDDEN ".hidden " MSL_SHIM_SYMBOL "\n"
#endif

#if defined(__x86_64__)
constexpr size_t kFrameBytes = 16 + 6 * 8;  // control words, then r15 r14 r13 r12 rbx rbp
asm(".text\n"
    ".globl " MSL_SHIM_SYMBOL "\n" MSL_SHIM_HIDDEN
    ".p2align 4\n" MSL_SHIM_SYMBOL ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $16, %rsp\n  stmxcsr 8(%rsp)\n  fnstcw (%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  fldcw (%rsp)\n  ldmxcsr 8(%rsp)\n  addq $16, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n");
#elif defined(__aarch64__)
constexpr size_t kFrameBytes = 160;  // x19-x28, x29 (frame), x30 (return address), d8-d15
asm(".text\n"
    ".globl " MSL_SHIM_SYMBOL "\n" MSL_SHIM_HIDDEN
    ".p2align 4\n" MSL_SHIM_SYMBOL ":\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n  ret\n");
#else
#error "tests/metal_shim/threadgroups.cc switches stacks on x86-64 and arm64 only"
#endif

void FiberEntry();

// The stack pointer of a fiber that has not run yet: a switch frame at
// the top of `stack` whose return address is FiberEntry, entered with the
// stack aligned as a call leaves it (16 bytes; on x86-64 after the return
// address). Its registers start as zeros, its control words as the caller's.
void* NewFiberStack(char* stack) {
#if MSL_SHIM_ASAN
  // A fiber that ended never returned from FiberEntry: its frames' redzones
  // are still poisoned in the stack's shadow.
  __asan_unpoison_memory_region(stack, kStackBytes);
#endif
  uintptr_t top = reinterpret_cast<uintptr_t>(stack + kStackBytes) & ~uintptr_t(15);
#if defined(__x86_64__)
  auto* frame = reinterpret_cast<uint64_t*>(top - kFrameBytes - 16);  // then the return address and a pad
  std::memset(frame, 0, kFrameBytes + 16);
  uint16_t x87;
  uint32_t sse;
  asm volatile("fnstcw %0\n stmxcsr %1" : "=m"(x87), "=m"(sse));
  std::memcpy(reinterpret_cast<char*>(frame), &x87, sizeof x87);
  std::memcpy(reinterpret_cast<char*>(frame) + 8, &sse, sizeof sse);
  frame[kFrameBytes / 8] = reinterpret_cast<uint64_t>(&FiberEntry);
#else
  auto* frame = reinterpret_cast<uint64_t*>(top - kFrameBytes);
  std::memset(frame, 0, kFrameBytes);
  frame[11] = reinterpret_cast<uint64_t>(&FiberEntry);  // x30
#endif
  return frame;
}

// msl_shim_switch_stacks from the current side to `to`, which runs on the stack
// [stack, stack + bytes); under ASan announced before and completed after
// (each side's fake stack, for use-after-return detection, kept in this frame
// while it is switched out).
void Switch(void** from, void* to, const void* stack, size_t bytes) {
#if MSL_SHIM_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, stack, bytes);
  msl_shim_switch_stacks(from, to);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  (void)stack;
  (void)bytes;
  msl_shim_switch_stacks(from, to);
#endif
}

// A fiber's first instructions: runs its thread and returns to the
// scheduler for good.
void FiberEntry() {
  Scheduler* s = g_scheduler;
#if MSL_SHIM_ASAN
  // A new fiber: no fake stack of its own yet; learn the scheduler's stack.
  __sanitizer_finish_switch_fiber(nullptr, &s->main_stack, &s->main_stack_bytes);
#endif
  const int index = s->current;
  s->fn(s->arg, s->group, uint(index));
  Fiber& f = s->fibers[index];
  f.state = kDone;
#if MSL_SHIM_ASAN
  // Leaving for good (nullptr: ASan may free this fiber's fake stack).
  __sanitizer_start_switch_fiber(nullptr, s->main_stack, s->main_stack_bytes);
#endif
  msl_shim_switch_stacks(&f.sp, s->main_sp);  // never resumed
  std::abort();
}

bool SameArguments(const Arrival* a, const Arrival* b) {
  return std::strcmp(a->what, b->what) == 0 && a->complete == b->complete && a->pointer == b->pointer &&
         a->values[0] == b->values[0] && a->values[1] == b->values[1] && a->values[2] == b->values[2] &&
         a->whole_threadgroup == b->whole_threadgroup;
}

std::string Where(uint group, int index) {
  return "threadgroup " + std::to_string(group) + ", thread " + std::to_string(index);
}

// Completes the cooperation of threads [first, first + count) if all have
// reached it. Returns 1 when completed, 0 when not every thread is there yet
// and -1 (s->error set) on a mismatch.
int TryComplete(Scheduler* s, int first, int count) {
  std::vector<Arrival*> lanes;
  for (int t = first; t < first + count; ++t) {
    const Fiber& f = s->fibers[t];
    if (f.state != kWaiting) return 0;
    lanes.push_back(f.arrival);
  }
  for (int i = 1; i < count; ++i) {
    if (!SameArguments(lanes[i], lanes[0])) {
      s->error = std::string("threads disagree: ") + Where(s->group, first) + " is at " + lanes[0]->what + ", " +
                 Where(s->group, first + i) + " at " + lanes[i]->what +
                 " (different operation or arguments: non-uniform control flow)";
      return -1;
    }
  }
  if (std::strstr(lanes[0]->what, "not modelled") != nullptr) {
    s->error = std::string(lanes[0]->what) + " at " + Where(s->group, first);
    return -1;
  }
  if (const char* failed = lanes[0]->complete(lanes.data(), count)) {
    s->error = std::string(failed) + " (" + Where(s->group, first) + ")";
    return -1;
  }
  for (int t = first; t < first + count; ++t) {
    s->fibers[t].state = kRunnable;
    s->fibers[t].arrival = nullptr;
  }
  return 1;
}

// After every fiber stopped: completes what can be completed; false (error
// set) when nothing can, yet threads wait.
bool Resolve(Scheduler* s) {
  const int threads = int(s->fibers.size());
  bool progressed = false;
  for (int first = 0; first < threads; first += kSimdWidth) {
    const Fiber& f = s->fibers[first];
    if (f.state == kWaiting && !f.arrival->whole_threadgroup) {
      const int done = TryComplete(s, first, kSimdWidth);
      if (done < 0) return false;
      progressed = progressed || done > 0;
    }
  }
  if (progressed) return true;
  const Fiber& f0 = s->fibers[0];
  if (f0.state == kWaiting && f0.arrival->whole_threadgroup) {
    const int done = TryComplete(s, 0, threads);
    if (done < 0) return false;
    if (done > 0) return true;
  }
  // Deadlock: say who waits where and who has returned.
  std::string state;
  for (int t = 0; t < threads; t += 1) {
    const Fiber& f = s->fibers[t];
    const std::string here = f.state == kDone ? "returned" : f.arrival->what;
    if (t == 0 || here != (s->fibers[t - 1].state == kDone ? "returned" : s->fibers[t - 1].arrival->what)) {
      state += " thread " + std::to_string(t) + "+: " + here + ";";
    }
  }
  s->error = "threads wait for others that never arrive (a barrier or SIMD-group operation in divergent control "
             "flow, or after some threads returned) in threadgroup " +
             std::to_string(s->group) + ":" + state;
  return false;
}

}  // namespace

void arrive(Arrival* arrival) {
  Scheduler* s = g_scheduler;
  if (s == nullptr || s->current < 0) {
    // Not inside run_threadgroups: there is no one to wait for.
    g_error = std::string(arrival->what) + " called outside msl_shim::run_threadgroups";
    std::fprintf(stderr, "msl_shim: %s\n", g_error.c_str());
    std::abort();
  }
  Fiber& f = s->fibers[s->current];
  f.state = kWaiting;
  f.arrival = arrival;
  Switch(&f.sp, s->main_sp, s->main_stack, s->main_stack_bytes);
}

void* threadgroup_memory() { return g_scheduler == nullptr ? nullptr : g_scheduler->memory.data(); }

const char* run_threadgroups(uint groups, uint threads, unsigned long threadgroup_bytes, bool reverse, ThreadFn fn,
                             void* arg) {
  g_error.clear();
  if (threads == 0 || threads % kSimdWidth != 0) {
    g_error = "threads per threadgroup must be a positive multiple of 32, got " + std::to_string(threads);
    return g_error.c_str();
  }
  Scheduler s;
  s.fn = fn;
  s.arg = arg;
  s.fibers.resize(threads);
  std::vector<char*> stacks;
  g_stacks.Take(threads, &stacks);
  for (uint t = 0; t < threads; ++t) s.fibers[t].stack = stacks[t];
  Scheduler* outer = g_scheduler;
  g_scheduler = &s;
  for (uint group = 0; group < groups && s.error.empty(); ++group) {
    s.group = group;
    s.memory.assign(threadgroup_bytes, 0xff);  // NaN in float and half
    for (uint t = 0; t < threads; ++t) {
      Fiber& f = s.fibers[t];
      f.sp = NewFiberStack(f.stack);
      f.state = kRunnable;
      f.arrival = nullptr;
    }
    // One SIMD-group at a time runs as far as it can (its own cooperations
    // complete at once) before the next starts: the most skewed schedule, so a
    // read of another SIMD-group's writes without a threadgroup barrier sees
    // stale (or NaN) data.
    const int simdgroups = int(threads) / kSimdWidth;
    for (;;) {
      for (int i = 0; i < simdgroups && s.error.empty(); ++i) {
        const int first = (reverse ? simdgroups - 1 - i : i) * kSimdWidth;
        for (;;) {
          for (int j = 0; j < kSimdWidth; ++j) {
            const int t = first + (reverse ? kSimdWidth - 1 - j : j);
            if (s.fibers[t].state != kRunnable) continue;
            s.current = t;
            Switch(&s.main_sp, s.fibers[t].sp, s.fibers[t].stack, kStackBytes);
            s.current = -1;
          }
          const Fiber& lead = s.fibers[first];
          if (lead.state != kWaiting || lead.arrival->whole_threadgroup) break;
          if (TryComplete(&s, first, kSimdWidth) <= 0) break;
        }
      }
      if (!s.error.empty()) break;
      bool all_done = true;
      for (const Fiber& f : s.fibers) all_done = all_done && f.state == kDone;
      if (all_done) break;
      if (!Resolve(&s)) break;
    }
  }
  g_scheduler = outer;
  g_stacks.top -= threads;
  if (!s.error.empty()) {
    g_error = s.error;
    return g_error.c_str();
  }
  return nullptr;
}

}  // namespace msl_shim

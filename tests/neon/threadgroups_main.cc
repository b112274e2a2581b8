// The MSL shim's fibers (tests/metal_shim/threadgroups.cc) built for one
// machine: its stack switch is assembly per architecture, so this runs the
// arm64 switch under qemu (or natively on an arm64 machine) and the x86-64 one
// here. Every check prints a line; the exit status is the number that failed.
// Driven by tests/test_neon_qemu.py.
//
// - Sums over threadgroup memory with barriers, in thread order and reversed,
//   each thread keeping integer and floating-point values live across every
//   barrier (the callee-saved registers the switch must carry).
// - simdgroup_multiply_accumulate through tests/metal_shim/simdgroup_matrix_shim.cc.
// - The shim's errors for kernels that break MSL's rules.
// - A nested run_threadgroups inside a fiber, on stacks of its own.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/metal_shim/msl_shim.h"

using namespace metal;

extern "C" {
const char* shim_simdgroup_error();
int shim_simdgroup_multiply(const void* a, const void* b, const float* c, float* d, int stride, int transpose_a,
                            int transpose_b, int half_operands);
int shim_simdgroup_broken(int which);
}

namespace {

constexpr int kRounds = 5;

int g_failed = 0;

void Check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok" : "FAILED", what);
  g_failed += ok ? 0 : 1;
}

double Value(uint group, uint t, int round) { return double(group * 1000 + t) * 0.5 + round; }

struct SumArgs {
  uint threads;
  std::vector<double>* out;  // [group * kRounds + round]: that round's sum
  std::vector<double>* mixed;  // [group * threads + t]: what each thread carried
};

void SumThread(void* arg, uint group, uint t) {
  const SumArgs& a = *static_cast<const SumArgs*>(arg);
  threadgroup double* tg = static_cast<double*>(msl_shim::threadgroup_memory());
  // Live across every barrier below: in callee-saved registers where the
  // compiler keeps them, on the fiber's stack otherwise.
  double carried = 1.0 + t;
  float scaled = 0.25f * float(t);
  long count = long(group) * 7 + t;
  for (int round = 0; round < kRounds; ++round) {
    tg[t] = Value(group, t, round);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint half = a.threads / 2; half > 0; half /= 2) {
      if (t < half) tg[t] += tg[t + half];
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const double sum = tg[0];
    if (t == 0) (*a.out)[group * kRounds + round] = sum;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // every thread has read tg[0] before the next round's writes
    carried = carried * 1.5 + sum * 1e-6;
    scaled = scaled * 0.5f + float(round);
    count += round;
  }
  (*a.mixed)[group * a.threads + t] = carried + double(scaled) + double(count);
}

double Carried(uint group, uint t, uint threads) {
  double carried = 1.0 + t;
  float scaled = 0.25f * float(t);
  long count = long(group) * 7 + t;
  for (int round = 0; round < kRounds; ++round) {
    double total = 0;
    for (uint i = 0; i < threads; ++i) total += Value(group, i, round);
    carried = carried * 1.5 + total * 1e-6;
    scaled = scaled * 0.5f + float(round);
    count += round;
  }
  return carried + double(scaled) + double(count);
}

void SumsWithBarriers(bool reverse) {
  const uint groups = 3, threads = 128;
  std::vector<double> out(groups * kRounds, -1), mixed(groups * threads, -1);
  SumArgs a = {threads, &out, &mixed};
  const char* failed = msl_shim::run_threadgroups(groups, threads, threads * sizeof(double), reverse, &SumThread, &a);
  if (failed) std::printf("  %s\n", failed);
  bool sums = failed == nullptr, carried = failed == nullptr;
  for (uint g = 0; g < groups; ++g) {
    for (int r = 0; r < kRounds; ++r) {
      double want = 0;
      for (uint t = 0; t < threads; ++t) want += Value(g, t, r);
      sums = sums && std::fabs(out[g * kRounds + r] - want) <= 1e-9 * std::fabs(want);
    }
    for (uint t = 0; t < threads; ++t) {
      const double want = Carried(g, t, threads);
      carried = carried && std::fabs(mixed[g * threads + t] - want) <= 1e-9 * std::fabs(want);
    }
  }
  Check(sums, reverse ? "threadgroup sums, threads reversed" : "threadgroup sums, threads in order");
  Check(carried, reverse ? "values carried across barriers, threads reversed"
                         : "values carried across barriers, threads in order");
}

void Multiply() {
  const int stride = 9;
  float a[8 * stride], b[8 * stride], c[8 * stride], d[8 * stride];
  for (int i = 0; i < 8 * stride; ++i) {
    a[i] = float((i * 7) % 11) - 5;
    b[i] = float((i * 5) % 13) - 6;
    c[i] = float(i % 3);
    d[i] = 99;
  }
  const bool ran = shim_simdgroup_multiply(a, b, c, d, stride, 1, 0, 0) == 0;
  if (!ran) std::printf("  %s\n", shim_simdgroup_error());
  bool same = ran;
  for (int r = 0; r < 8; ++r) {
    for (int col = 0; col < stride; ++col) {
      float want = 99;
      if (col < 8) {
        want = c[r * stride + col];
        for (int k = 0; k < 8; ++k) want += a[k * stride + r] * b[k * stride + col];  // a transposed
      }
      same = same && d[r * stride + col] == want;
    }
  }
  Check(same, "simdgroup_multiply_accumulate (a transposed)");
}

void Broken() {
  const char* messages[] = {"never arrive", "disagree", "read different values", "never arrive"};
  for (int which = 0; which < 4; ++which) {
    const bool refused = shim_simdgroup_broken(which) == -1 && std::strstr(shim_simdgroup_error(), messages[which]);
    char what[64];
    std::snprintf(what, sizeof what, "broken kernel %d refused (%s)", which, messages[which]);
    Check(refused, what);
  }
}

struct NestedArgs {
  std::vector<double>* inner_sums;
};

void InnerThread(void* arg, uint group, uint t) {
  SumThread(arg, group, t);
}

void OuterThread(void* arg, uint, uint t) {
  const NestedArgs& n = *static_cast<const NestedArgs*>(arg);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t != 0) return;
  std::vector<double> out(kRounds, -1), mixed(64, -1);
  SumArgs a = {64, &out, &mixed};
  if (msl_shim::run_threadgroups(1, 64, 64 * sizeof(double), false, &InnerThread, &a) == nullptr) {
    *n.inner_sums = mixed;
  }
}

void Nested() {
  std::vector<double> inner(64, -1);
  NestedArgs n = {&inner};
  const char* failed = msl_shim::run_threadgroups(1, 32, 64, false, &OuterThread, &n);
  bool same = failed == nullptr;
  for (uint t = 0; t < 64 && same; ++t) same = std::fabs(inner[t] - Carried(0, t, 64)) <= 1e-9 * Carried(0, t, 64);
  Check(same, "run_threadgroups nested in a fiber");
}

}  // namespace

int main() {
  SumsWithBarriers(false);
  SumsWithBarriers(true);
  Multiply();
  Broken();
  Nested();
  return g_failed;
}

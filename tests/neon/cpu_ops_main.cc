// A static executable around the TF-free bodies of the CPU kernels, for
// instruction sets this machine cannot load into Python:
// tests/test_neon_qemu.py cross-compiles it, with every op's driver
// (tests/neon/<op>_neon.cc, registered by name: tests/neon/cpu_ops.h), for
// aarch64 and runs it under qemu-aarch64. What differs on arm64: Eigen's NEON
// packets, the vectors of kernels/cpu/simd.h, code without the x86
// intrinsics, and every kernels/common formula compiled by an arm64
// compiler (each driver's file says which of these its op has).
//
//   cpu_ops_main OP REQUEST RESPONSE
//
// REQUEST: int64 count, that many int64 (the op's integer arguments); int64
// count, that many float64 (its real arguments); int64 count, then that many
// arrays, each int64 dtype (1: uint8, 4: float32, 8: float64), int64 length,
// the values.
// RESPONSE: 32 bytes, NUL-padded: the architecture and Eigen's SIMD
// instruction sets; then the outputs as arrays in the request's format.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Array;
using mo_neon::Request;

bool ReadRequest(std::FILE* f, Request* r) {
  int64_t count = 0;
  if (std::fread(&count, 8, 1, f) != 1 || count < 0) return false;
  r->ints.resize(count);
  if (std::fread(r->ints.data(), 8, count, f) != size_t(count)) return false;
  if (std::fread(&count, 8, 1, f) != 1 || count < 0) return false;
  r->reals.resize(count);
  if (std::fread(r->reals.data(), 8, count, f) != size_t(count)) return false;
  if (std::fread(&count, 8, 1, f) != 1 || count < 0) return false;
  r->arrays.resize(count);
  for (Array& a : r->arrays) {
    int64_t length = 0;
    if (std::fread(&a.dtype, 8, 1, f) != 1 || std::fread(&length, 8, 1, f) != 1) return false;
    if ((a.dtype != 1 && a.dtype != 4 && a.dtype != 8) || length < 0) return false;
    a.bytes.resize(size_t(length * a.dtype));
    if (std::fread(a.bytes.data(), 1, a.bytes.size(), f) != a.bytes.size()) return false;
  }
  return true;
}

std::string Isa() {
#if defined(__aarch64__)
  std::string arch = "aarch64";
#elif defined(__x86_64__)
  std::string arch = "x86_64";
#else
  std::string arch = "other";
#endif
  return arch + " " + Eigen::SimdInstructionSetsInUse();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s OP REQUEST RESPONSE\n", argv[0]);
    return 2;
  }
  const std::string op = argv[1];
  std::FILE* in = std::fopen(argv[2], "rb");
  if (in == nullptr) {
    std::perror(argv[2]);
    return 2;
  }
  mo_neon::Request q;
  const bool ok = ReadRequest(in, &q);
  std::fclose(in);
  if (!ok) {
    std::fprintf(stderr, "%s: malformed request\n", argv[2]);
    return 2;
  }
  mo_neon::Driver run = nullptr;
  for (const mo_neon::Registered& o : mo_neon::Drivers()) run = op == o.name ? o.run : run;
  if (run == nullptr) {
    std::fprintf(stderr, "unknown op %s (the ops:", op.c_str());
    for (const mo_neon::Registered& o : mo_neon::Drivers()) std::fprintf(stderr, " %s", o.name);
    std::fprintf(stderr, ")\n");
    return 2;
  }
  run(&q);
  std::FILE* out = std::fopen(argv[3], "wb");
  if (out == nullptr) {
    std::perror(argv[3]);
    return 2;
  }
  char isa[32] = {0};
  std::strncpy(isa, Isa().c_str(), sizeof(isa) - 1);
  bool written = std::fwrite(isa, 1, sizeof(isa), out) == sizeof(isa);
  const int64_t count = int64_t(q.outputs.size());
  written = written && std::fwrite(&count, 8, 1, out) == 1;
  for (const mo_neon::Array& a : q.outputs) {
    const int64_t head[2] = {a.dtype, a.size()};
    written = written && std::fwrite(head, 8, 2, out) == 2 &&
              std::fwrite(a.bytes.data(), 1, a.bytes.size(), out) == a.bytes.size();
  }
  return std::fclose(out) == 0 && written ? 0 : 1;
}

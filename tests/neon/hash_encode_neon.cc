// The driver of hash_encode in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is the scatter without the x86 FMA intrinsics.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define MO_CPU_BODIES  // hash_encode.h's CPU bodies
#include "kernels/hash_encode/hash_encode.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;
using mo_neon::Shards;

// ---- HashEncode (float): ints dims, features, num_levels, log2_hashmap_size,
// base_resolution, interpolation, out_of_range, shards; reals per_level_scale;
// arrays x [n, D], table [P, F], grad_encoded [n, L F], grad_grad_inputs
// [n, D]. Outputs encoded, grad_table, grad_inputs and the second-order pair
// (grad_table, grad_grad_encoded of MetalOpsHashEncodeGradGrad).
template <int D, int F>
void HashEncodeDF(Request* q) {
  const int L = int(q->Int(2));
  const Shards shards{int(q->Int(7))};
  const int64_t n = q->arrays.at(0).size() / D;
  mo::hash_grid::Params p;
  mo::hash_grid::make_params(D, n, L, int(q->Int(3)), mo::uint32(q->Int(4)), float(q->Real(0)), int(q->Int(5)),
                             int(q->Int(6)), &p);
  const mo::hash_encode_cpu::Grid grid = mo::hash_encode_cpu::MakeGrid(p);
  const int64_t P = p.level_offsets[L];
  const float* x = q->In<float>(0, n * D);
  const float* table = q->In<float>(1, P * F);
  const float* dy = q->In<float>(2, n * L * F);
  const float* gg = q->In<float>(3, n * D);
  float* encoded = q->Out<float>(n * L * F);
  float* grad_table = q->Out<float>(P * F);
  float* grad_x = q->Out<float>(n * D);
  float* grad_table2 = q->Out<float>(P * F);
  float* grad_dy = q->Out<float>(n * L * F);
  shards(n, [&](int64_t b, int64_t e) {
    mo::hash_encode_cpu::GatherRange<D, F, float, false>(x, nullptr, table, encoded, b, e, grid);
  });
  const int groups = L < shards.shards ? L : shards.shards;
  for (int group = groups - 1; group >= 0; --group) {
    mo::hash_encode_cpu::ScatterGroup<D, F, float, false>(group, groups, x, nullptr, dy, grad_table, n, grid);
    mo::hash_encode_cpu::ScatterGroup<D, F, float, true>(group, groups, x, gg, dy, grad_table2, n, grid);
  }
  shards(n, [&](int64_t b, int64_t e) {
    mo::hash_encode_cpu::InputGradRange<D, F, float>(x, table, dy, grad_x, b, e, grid);
  });
  shards(n, [&](int64_t b, int64_t e) {
    mo::hash_encode_cpu::GatherRange<D, F, float, true>(x, gg, table, grad_dy, b, e, grid);
  });
}

void HashEncode(Request* q) {
  const int64_t dims = q->Int(0), features = q->Int(1);
  // Every dimension and every feature count once (the CPU kernel instantiates all pairs).
  if (dims == 3 && features == 2) return HashEncodeDF<3, 2>(q);
  if (dims == 2 && features == 4) return HashEncodeDF<2, 4>(q);
  if (dims == 4 && features == 1) return HashEncodeDF<4, 1>(q);
  if (dims == 1 && features == 8) return HashEncodeDF<1, 8>(q);
  std::fprintf(stderr, "hash_encode: dims %lld with features %lld is not built in\n", (long long)dims,
               (long long)features);
  std::exit(2);
}

MO_NEON_OP("hash_encode", &HashEncode);

}  // namespace

// A static executable around the TF-free bodies of the CPU kernels, for
// instruction sets this machine cannot load into Python:
// tests/test_neon_qemu.py cross-compiles it for aarch64 and runs it under
// qemu-aarch64. What differs on arm64: Eigen's NEON packets (VolumeRender's
// phase B, RobustLoss's log / exp), TruncExp's vectors (kernels/cpu/simd.h),
// HashEncode's scatter without the x86 FMA intrinsics, and every
// kernels/common formula compiled by an arm64 compiler
// (SHEncode, DistortionLoss, PackedVolumeRender, RayMarch: the loops of their
// CPU kernels around those formulas are a few lines, repeated below).
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

#include "kernels/distortion_loss/distortion_loss.h"
#include "kernels/packed_volume_render/packed_volume_render.h"
#include "kernels/ray_march/ray_march.h"
#include "kernels/sh_encode/sh_encode.h"
#include "kernels/hash_encode/hash_encode_cpu.h"
#include "kernels/robust_loss/robust_loss_cpu.h"
#define MO_CPU_BODIES  // trunc_exp.h's CPU bodies
#include "kernels/trunc_exp/trunc_exp.h"
#include "kernels/volume_render/volume_render_cpu.h"
#include "kernels/ray_march/ray_march_spec.h"

namespace {

struct Array {
  int64_t dtype = 4;
  std::vector<unsigned char> bytes;
  int64_t size() const { return int64_t(bytes.size()) / dtype; }
  template <typename T>
  T* data() {
    if (int64_t(sizeof(T)) != dtype) {
      std::fprintf(stderr, "array of dtype %lld read as a %zu-byte type\n", (long long)dtype, sizeof(T));
      std::exit(2);
    }
    return reinterpret_cast<T*>(bytes.data());
  }
};

template <typename T>
Array Zeros(int64_t n) {
  Array a;
  a.dtype = sizeof(T);
  a.bytes.assign(size_t(n) * sizeof(T), 0);
  return a;
}

struct Request {
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::vector<Array> arrays;
  std::vector<Array> outputs;

  int64_t Int(size_t i) const { return Need(i, ints.size(), "integer") ? ints[i] : 0; }
  double Real(size_t i) const { return Need(i, reals.size(), "real") ? reals[i] : 0; }
  template <typename T>
  T* In(size_t i, int64_t want) {
    Need(i, arrays.size(), "array");
    if (arrays[i].size() != want) {
      std::fprintf(stderr, "array %zu has %lld values, expected %lld\n", i, (long long)arrays[i].size(),
                   (long long)want);
      std::exit(2);
    }
    return arrays[i].data<T>();
  }
  template <typename T>
  T* Out(int64_t n) {
    outputs.push_back(Zeros<T>(n));
    return outputs.back().data<T>();
  }
  static bool Need(size_t i, size_t have, const char* what) {
    if (i < have) return true;
    std::fprintf(stderr, "request has %zu %s arguments, needs more than %zu\n", have, what, i);
    std::exit(2);
  }
};

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

// Runs fn(begin, end) on `shards` contiguous pieces of [0, units), last piece
// first (a schedule unlike one piece per thread, same partition rules).
struct Shards {
  int shards;
  template <typename Fn>
  void operator()(int64_t units, int64_t /*cycles_per_unit*/, const Fn& fn) const {
    for (int s = shards - 1; s >= 0; --s) fn(units * s / shards, units * (s + 1) / shards);
  }
  template <typename Fn>
  void operator()(int64_t units, const Fn& fn) const {
    (*this)(units, 0, fn);
  }
};

// ---- VolumeRender: ints R, S, background_per_ray, with_weights, shards; reals
// early_termination; arrays sigma, rgb, t, background, then the cotangents of
// rgb, depth, opacity, weights. Outputs rgb, depth, opacity, weights,
// grad_sigma, grad_rgb (samples), grad_background (per ray).
template <typename T>
void VolumeRender(Request* q) {
  using namespace mo::volume_render_cpu;  // NOLINT
  const int64_t R = q->Int(0), S = q->Int(1);
  const bool bg_per_ray = q->Int(2) != 0, with_weights = q->Int(3) != 0;
  const Shards shards{int(q->Int(4))};
  const double early_termination = q->Real(0);
  const T* sigma = q->In<T>(0, R * S);
  const T* rgb = q->In<T>(1, R * S * 3);
  const T* t = q->In<T>(2, R * (S + 1));
  const T* bg = q->In<T>(3, bg_per_ray ? R * 3 : 3);
  const T* g_rgb = q->In<T>(4, R * 3);
  const T* g_depth = q->In<T>(5, R);
  const T* g_opacity = q->In<T>(6, R);
  const T* g_weights = q->In<T>(7, R * S);
  T* out_rgb = q->Out<T>(R * 3);
  T* depth = q->Out<T>(R);
  T* opacity = q->Out<T>(R);
  T* weights = q->Out<T>(R * S);
  T* grad_sigma = q->Out<T>(R * S);
  T* grad_rgb = q->Out<T>(R * S * 3);
  T* grad_bg = q->Out<T>(R * 3);
  const mo::VolumeRenderForwardArgs<T> forward = {
      {R, S, bg_per_ray, float(early_termination), sigma, rgb, bg}, {t}, {out_rgb, depth, opacity, weights}};
  const mo::VolumeRenderBackwardArgs<T> backward = {
      {R, S, bg_per_ray, float(early_termination), sigma, rgb, bg},
      {t},
      {out_rgb, depth, opacity, with_weights ? weights : nullptr, g_rgb, g_depth, g_opacity,
       with_weights ? g_weights : nullptr, grad_sigma, grad_rgb, grad_bg}};
  shards(R, [&](int64_t begin, int64_t end) {
    RayScratch<T> scratch(S);
    for (int64_t r = begin; r < end; ++r) {
      if (!AllValid(sigma + r * S, t + r * (S + 1), S)) {
        std::fprintf(stderr, "ray %lld is invalid\n", (long long)r);
        std::exit(3);
      }
      ForwardRay(&scratch, forward, r);
    }
  });
  shards(R, [&](int64_t begin, int64_t end) {
    RayScratch<T> scratch(S);
    for (int64_t r = begin; r < end; ++r) BackwardRay(&scratch, backward, r);
  });
}

// ---- PackedVolumeRender (float): ints R, N, background_per_ray, with_weights;
// reals early_termination; arrays sigma, rgb, t_starts, t_ends, offsets,
// counts (as float32), background, then the cotangents. Outputs as VolumeRender.
void PackedVolumeRender(Request* q) {
  const int64_t R = q->Int(0), N = q->Int(1);
  const bool bg_per_ray = q->Int(2) != 0, with_weights = q->Int(3) != 0;
  const float early_termination = float(q->Real(0));
  const float* sigma = q->In<float>(0, N);
  const float* rgb = q->In<float>(1, N * 3);
  const float* t0 = q->In<float>(2, N);
  const float* t1 = q->In<float>(3, N);
  std::vector<mo::int32> offsets(R), counts(R);
  for (int64_t r = 0; r < R; ++r) {
    offsets[r] = mo::int32(q->In<float>(4, R)[r]);
    counts[r] = mo::int32(q->In<float>(5, R)[r]);
  }
  const float* bg = q->In<float>(6, bg_per_ray ? R * 3 : 3);
  const float* g_rgb = q->In<float>(7, R * 3);
  const float* g_depth = q->In<float>(8, R);
  const float* g_opacity = q->In<float>(9, R);
  const float* g_weights = q->In<float>(10, N);
  float* out_rgb = q->Out<float>(R * 3);
  float* depth = q->Out<float>(R);
  float* opacity = q->Out<float>(R);
  float* weights = q->Out<float>(N);
  float* grad_sigma = q->Out<float>(N);
  float* grad_rgb = q->Out<float>(N * 3);
  float* grad_bg = q->Out<float>(R * 3);
  const mo::PackedVolumeRenderForwardArgs<float> forward = {
      {R, N, bg_per_ray, early_termination, sigma, rgb, bg},
      {t0, t1, offsets.data(), counts.data()},
      {out_rgb, depth, opacity, weights}};
  const mo::PackedVolumeRenderBackwardArgs<float> backward = {
      {R, N, bg_per_ray, early_termination, sigma, rgb, bg},
      {t0, t1, offsets.data(), counts.data()},
      {out_rgb, depth, opacity, weights, g_rgb, g_depth, g_opacity, with_weights ? g_weights : nullptr, grad_sigma,
       grad_rgb, grad_bg}};
  for (int64_t r = 0; r < R; ++r) {
    const mo::VrCheck check = mo::pvr_forward_ray<float, mo::VrFloatMath>(forward, r);
    const mo::int32 code = mo::pvr_backward_ray<float, mo::VrFloatMath>(backward, r);
    if (check.code != mo::kVrOk || code != mo::kVrOk) {
      std::fprintf(stderr, "ray %lld is invalid\n", (long long)r);
      std::exit(3);
    }
  }
}

// ---- RobustLoss (float): ints n, channels, shards; arrays x, grad, alpha,
// scale (channels each). Outputs rho, grad * drho/dx, and per channel the sums
// of grad * drho/dalpha and grad * drho/dscale (float64).
void RobustLoss(Request* q) {
  const int64_t n = q->Int(0), channels = q->Int(1);
  const Shards shards{int(q->Int(2))};
  const float* x = q->In<float>(0, n);
  const float* g = q->In<float>(1, n);
  const float* alpha = q->In<float>(2, channels);
  const float* scale = q->In<float>(3, channels);
  std::vector<mo::RobustLossCoeffs> coeffs(channels);
  for (int64_t c = 0; c < channels; ++c) coeffs[c] = mo::robust_loss_coeffs(alpha[c], scale[c]);
  float* y = q->Out<float>(n);
  float* dx = q->Out<float>(n);
  double* sum_a = q->Out<double>(channels);
  double* sum_c = q->Out<double>(channels);
  mo::robust_loss_cpu::Forward(coeffs, x, y, n, shards);
  mo::robust_loss_cpu::Backward(coeffs, g, x, dx, n, sum_a, sum_c, shards);
}

// ---- TruncExp (float): ints n, shards; arrays x, dy. Outputs y, dx.
void TruncExp(Request* q) {
  const int64_t n = q->Int(0);
  const Shards shards{int(q->Int(1))};
  const float* x = q->In<float>(0, n);
  const float* dy = q->In<float>(1, n);
  float* y = q->Out<float>(n);
  float* dx = q->Out<float>(n);
  shards(n, [&](int64_t begin, int64_t end) {
    mo::trunc_exp_cpu::Forward(x, y, begin, end);
    mo::trunc_exp_cpu::Backward(dy, x, dx, begin, end);
  });
}

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

// ---- SHEncode (float): ints n, degree; arrays dirs [n, 3], grad [n, degree^2].
// Outputs values, grad_dirs.
void SHEncode(Request* q) {
  const int64_t n = q->Int(0);
  const int degree = int(q->Int(1)), k = degree * degree;
  const float* dirs = q->In<float>(0, n * 3);
  const float* grad = q->In<float>(1, n * k);
  float* values = q->Out<float>(n * k);
  float* grad_dirs = q->Out<float>(n * 3);
  for (int64_t i = 0; i < n; ++i) {
    mo::sh_encode_values(dirs[3 * i], dirs[3 * i + 1], dirs[3 * i + 2], degree, values + i * k, 1);
    mo::sh_encode_grad(dirs[3 * i], dirs[3 * i + 1], dirs[3 * i + 2], degree, grad + i * k, 1, grad_dirs + 3 * i,
                       grad_dirs + 3 * i + 1, grad_dirs + 3 * i + 2);
  }
}

// ---- DistortionLoss (float): ints R, S; arrays w [R, S], t [R, S + 1], grad
// [R]. Outputs loss, grad_w, grad_t.
void DistortionLoss(Request* q) {
  const int64_t R = q->Int(0), S = q->Int(1);
  const float* w = q->In<float>(0, R * S);
  const float* t = q->In<float>(1, R * (S + 1));
  const float* g = q->In<float>(2, R);
  float* loss = q->Out<float>(R);
  float* grad_w = q->Out<float>(R * S);
  float* grad_t = q->Out<float>(R * (S + 1));
  for (int64_t r = 0; r < R; ++r) {
    loss[r] = mo::distortion_loss_ray(w + r * S, t + r * (S + 1), S);
    mo::distortion_loss_grad_ray(g[r], w + r * S, t + r * (S + 1), S, grad_w + r * S, grad_t + r * (S + 1));
  }
}

// ---- RayMarch: ints R, grid_resolution, cascades, max_samples, jitter, seed;
// reals aabb (6), step_size, cone_angle, max_step_size; arrays origins [R, 3],
// directions [R, 3], near [R], far [R] (float32), occupancy [C, G^3 / 8]
// (uint8). Outputs t_starts, t_ends, ray_indices, offsets, counts (the
// integers as float64), as the CPU kernel's count and fill passes make them.
void RayMarch(Request* q) {
  const int64_t R = q->Int(0);
  mo::ray_march::Attrs attrs;
  for (int i = 0; i < 6; ++i) attrs.aabb.push_back(float(q->Real(i)));
  attrs.grid_resolution = int(q->Int(1));
  attrs.step_size = float(q->Real(6));
  attrs.cone_angle = float(q->Real(7));
  attrs.max_step_size = float(q->Real(8));
  attrs.max_samples = int(q->Int(3));
  attrs.jitter = q->Int(4) != 0;
  const mo::RayMarchParams p = mo::ray_march::MakeParams(attrs, R, q->Int(2));
  const mo::RayMarchInputs in = {q->In<float>(0, R * 3), q->In<float>(1, R * 3), q->In<float>(2, R),
                                  q->In<float>(3, R),
                                  q->In<unsigned char>(4, int64_t(p.cascades) * p.bytes_per_cascade),
                                  mo::uint32(q->Int(5))};
  std::vector<mo::int32> counts(R), offsets(R);
  int64_t total = 0;
  for (int64_t r = 0; r < R; ++r) {
    counts[r] = mo::rm_march_ray(in, mo::int32(r), p, 0, mo::RayMarchSamples{nullptr, nullptr, nullptr});
    offsets[r] = mo::int32(total);
    total += counts[r];
  }
  float* t_starts = q->Out<float>(total);
  float* t_ends = q->Out<float>(total);
  std::vector<mo::int32> indices(total);
  const mo::RayMarchSamples samples = {t_starts, t_ends, indices.data()};
  for (int64_t r = 0; r < R; ++r) mo::rm_march_ray(in, mo::int32(r), p, offsets[r], samples);
  for (const std::vector<mo::int32>* v : {&indices, &offsets, &counts}) {
    double* out = q->Out<double>(int64_t(v->size()));
    for (size_t i = 0; i < v->size(); ++i) out[i] = (*v)[i];
  }
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

struct Op {
  const char* name;
  void (*run)(Request*);
};
const Op kOps[] = {{"volume_render", &VolumeRender<float>},    {"volume_render_f64", &VolumeRender<double>},
                   {"packed_volume_render", &PackedVolumeRender}, {"robust_loss", &RobustLoss},
                   {"hash_encode", &HashEncode},                {"sh_encode", &SHEncode},
                   {"distortion_loss", &DistortionLoss},        {"ray_march", &RayMarch},
                   {"trunc_exp", &TruncExp}};

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
  Request q;
  const bool ok = ReadRequest(in, &q);
  std::fclose(in);
  if (!ok) {
    std::fprintf(stderr, "%s: malformed request\n", argv[2]);
    return 2;
  }
  void (*run)(Request*) = nullptr;
  for (const Op& o : kOps) run = op == o.name ? o.run : run;
  if (run == nullptr) {
    std::fprintf(stderr, "unknown op %s\n", op.c_str());
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
  for (const Array& a : q.outputs) {
    const int64_t head[2] = {a.dtype, a.size()};
    written = written && std::fwrite(head, 8, 2, out) == 2 &&
              std::fwrite(a.bytes.data(), 1, a.bytes.size(), out) == a.bytes.size();
  }
  return std::fclose(out) == 0 && written ? 0 : 1;
}

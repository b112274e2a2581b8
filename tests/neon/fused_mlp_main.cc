// A static executable around tests/fused_mlp_isa/fused_mlp_isa.cc (the
// TF-free FusedMLP core, kernels/fused_mlp/fused_mlp.h's CPU bodies), for instruction sets
// this machine cannot load into Python: tests/test_neon_qemu.py cross-compiles
// it for aarch64 (the NEON path of kernels/cpu/simd.h) and runs it under
// qemu-aarch64.
//
//   fused_mlp_main REQUEST RESPONSE
//
// REQUEST: 9 int64 (n, in, width, hidden_layers, out, act, out_act, threads,
// 0), float32 alpha, then float32 x [n, in], the kernels and biases of every
// layer, dy [n, out]. RESPONSE: the instruction set (16 bytes, NUL-padded),
// then float32 y [n, out], dx [n, in], every dkernel, every dbias.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

extern "C" const char* fused_mlp_isa();
extern "C" void fused_mlp_isa_run(int64_t n, int in, int width, int hidden_layers, int out, int act, int out_act,
                                  float alpha, int threads, const float* x, const float* const* kernels,
                                  const float* const* biases, float* y, float* hidden, const float* dy, float* dx,
                                  float* const* dkernels, float* const* dbiases);

namespace {

bool ReadFloats(std::FILE* f, std::vector<float>* v, size_t count) {
  v->resize(count);
  return std::fread(v->data(), sizeof(float), count, f) == count;
}

bool WriteFloats(std::FILE* f, const std::vector<float>& v) {
  return std::fwrite(v.data(), sizeof(float), v.size(), f) == v.size();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s REQUEST RESPONSE\n", argv[0]);
    return 2;
  }
  std::FILE* in = std::fopen(argv[1], "rb");
  if (in == nullptr) {
    std::perror(argv[1]);
    return 2;
  }
  int64_t h[9];
  float alpha = 0;
  if (std::fread(h, sizeof(int64_t), 9, in) != 9 || std::fread(&alpha, sizeof(float), 1, in) != 1) {
    std::fprintf(stderr, "%s: short header\n", argv[1]);
    return 2;
  }
  const int64_t n = h[0];
  const int in_dim = static_cast<int>(h[1]), width = static_cast<int>(h[2]), hidden = static_cast<int>(h[3]);
  const int out_dim = static_cast<int>(h[4]), act = static_cast<int>(h[5]), out_act = static_cast<int>(h[6]);
  const int threads = static_cast<int>(h[7]);
  std::vector<int> dims = {in_dim};
  for (int l = 0; l < hidden; ++l) dims.push_back(width);
  dims.push_back(out_dim);
  const int layers = hidden + 1;
  std::vector<float> x, dy;
  std::vector<std::vector<float>> k(layers), b(layers), dk(layers), db(layers);
  bool ok = ReadFloats(in, &x, n * in_dim);
  for (int l = 0; l < layers && ok; ++l) ok = ReadFloats(in, &k[l], size_t(dims[l]) * dims[l + 1]);
  for (int l = 0; l < layers && ok; ++l) ok = ReadFloats(in, &b[l], dims[l + 1]);
  ok = ok && ReadFloats(in, &dy, n * out_dim);
  std::fclose(in);
  if (!ok) {
    std::fprintf(stderr, "%s: short request\n", argv[1]);
    return 2;
  }
  std::vector<const float*> kp(layers), bp(layers);
  std::vector<float*> dkp(layers), dbp(layers);
  for (int l = 0; l < layers; ++l) {
    kp[l] = k[l].data();
    bp[l] = b[l].data();
    dk[l].assign(k[l].size(), 0.0f);
    db[l].assign(b[l].size(), 0.0f);
    dkp[l] = dk[l].data();
    dbp[l] = db[l].data();
  }
  std::vector<float> y(n * out_dim), scratch(size_t(hidden) * n * width + 1), dx(n * in_dim);
  fused_mlp_isa_run(n, in_dim, width, hidden, out_dim, act, out_act, alpha, threads, x.data(), kp.data(), bp.data(),
                    y.data(), scratch.data(), dy.data(), dx.data(), dkp.data(), dbp.data());
  std::FILE* out = std::fopen(argv[2], "wb");
  if (out == nullptr) {
    std::perror(argv[2]);
    return 2;
  }
  char isa[16] = {0};
  std::strncpy(isa, fused_mlp_isa(), sizeof(isa) - 1);
  ok = std::fwrite(isa, 1, sizeof(isa), out) == sizeof(isa) && WriteFloats(out, y) && WriteFloats(out, dx);
  for (int l = 0; l < layers && ok; ++l) ok = WriteFloats(out, dk[l]);
  for (int l = 0; l < layers && ok; ++l) ok = WriteFloats(out, db[l]);
  return std::fclose(out) == 0 && ok ? 0 : 1;
}

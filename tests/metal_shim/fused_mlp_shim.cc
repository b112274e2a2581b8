// Runs the FusedMLP Metal shaders on the CPU (tests/metal_shim/msl_shim.h), in
// the order kernels/fused_mlp/fused_mlp_metal.cc encodes them, with the geometry
// it computes (kernels/fused_mlp/fused_mlp.h): the pack dispatches, the
// forward or backward over its threadgroups (cooperating fibers: barriers and
// simdgroup_matrix operations wait for their threads), the reductions.
// Driven by tests/test_fused_mlp_metal_shim.py through ctypes.
#include <algorithm>
#include <string>
#include <vector>

#include "tests/metal_shim/msl_shim.h"
#include "fused_mlp.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

std::string g_error;

template <typename Kernel, typename... Args>
void RunGrid(Kernel shader, uint grid, Args... args) {
  for (uint gid = 0; gid < grid; ++gid) shader(args..., gid, grid);
}

uint GridFor(int64_t work) { return work <= 0 ? 1u : uint(std::min<int64_t>(work, 1 << 16)); }

msl_shim::Kernel kKernels[] = {
#include "fused_mlp.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

// The entry points fused_mlp_metal.cc asks for, by name: fused_mlp_<kind>_w<W>_<dtype>
// and fused_mlp_<pack|reduce>_<dtype>; nullptr when not instantiated.
template <typename T>
struct Kernels {
  static const char* dtype() { return sizeof(T) == 2 ? "float16" : "float32"; }
  template <typename Fn>
  static Fn find(const std::string& name) {
    return msl_shim::find_kernel<Fn>(kKernels, name);
  }
  typedef decltype(&fused_mlp_forward<16, T>) Forward;
  typedef decltype(&fused_mlp_backward<16, T>) Backward;
  static Forward forward(int w) {
    return find<Forward>("fused_mlp_forward_w" + std::to_string(w) + "_" + dtype());
  }
  static Backward backward(int w) {
    return find<Backward>("fused_mlp_backward_w" + std::to_string(w) + "_" + dtype());
  }
  static decltype(&fused_mlp_pack<T>) pack() {
    return find<decltype(&fused_mlp_pack<T>)>(std::string("fused_mlp_pack_") + dtype());
  }
  static decltype(&fused_mlp_reduce<T>) reduce() {
    return find<decltype(&fused_mlp_reduce<T>)>(std::string("fused_mlp_reduce_") + dtype());
  }
};

struct Net {
  int64_t n;
  int in_dim, width, hidden_layers, out_dim, act, out_act;
  float alpha;
};

bool Params(const Net& net, int elem_bytes, bool backward, mo::FusedMlpParams* p) {
  if (!mo::fused_mlp_params(net.n, net.in_dim, net.width, net.out_dim, net.hidden_layers, net.act, net.out_act,
                            net.alpha, elem_bytes, backward, p)) {
    g_error = "no threadgroup geometry fits";
    return false;
  }
  return true;
}

// The .mm's pack dispatches: every kernel (and with `biases`, every bias) into its padded block.
template <typename T>
void Pack(const mo::FusedMlpParams& p, const void* const* kernels, const void* const* biases, std::vector<T>* w,
          std::vector<T>* b) {
  w->assign(mo::fused_mlp_weights_total(p.in_pad, p.width, p.out_pad, p.hidden_layers), T(7.0f));
  if (biases != nullptr) b->assign(mo::fused_mlp_biases_total(p.width, p.out_pad, p.hidden_layers), T(7.0f));
  for (int l = 0; l <= p.hidden_layers; ++l) {
    const mo::FusedMlpPackParams q = mo::fused_mlp_pack_params(p, l, false);
    RunGrid(Kernels<T>::pack(), GridFor(int64_t(q.rows_pad) * q.cols_pad), static_cast<const T*>(kernels[l]),
            w->data(), q);
    if (biases != nullptr) {
      const mo::FusedMlpPackParams qb = mo::fused_mlp_pack_params(p, l, true);
      RunGrid(Kernels<T>::pack(), GridFor(qb.cols_pad), static_cast<const T*>(biases[l]), b->data(), qb);
    }
  }
}

template <typename T>
struct ForwardCall {
  typename Kernels<T>::Forward shader;
  const T *x, *w, *b;
  T *y, *hidden;
  mo::FusedMlpParams p;
  uint groups;
  static void Thread(void* arg, uint group, uint t) {
    const ForwardCall* c = static_cast<const ForwardCall*>(arg);
    c->shader(c->x, c->w, c->b, c->y, c->hidden, c->p, static_cast<float*>(msl_shim::threadgroup_memory()), group,
              c->groups, t, t / 32, t % 32);
  }
};

template <typename T>
struct BackwardCall {
  typename Kernels<T>::Backward shader;
  const T *dy, *x, *y, *hidden, *w;
  float* partials;
  T* dx;
  mo::FusedMlpParams p;
  static void Thread(void* arg, uint group, uint t) {
    const BackwardCall* c = static_cast<const BackwardCall*>(arg);
    c->shader(c->dy, c->x, c->y, c->hidden, c->w, c->partials, c->dx, c->p,
              static_cast<float*>(msl_shim::threadgroup_memory()), group, t, t / 32, t % 32);
  }
};

template <typename T>
int Forward(const Net& net, const void* x, const void* const* kernels, const void* const* biases, void* y,
            void* hidden, uint max_groups, bool reverse) {
  mo::FusedMlpParams p;
  if (!Params(net, sizeof(T), false, &p)) return -1;
  if (net.n == 0) return 0;
  std::vector<T> w, b;
  Pack<T>(p, kernels, biases, &w, &b);
  ForwardCall<T> call = {Kernels<T>::forward(net.width), static_cast<const T*>(x), w.data(), b.data(),
                         static_cast<T*>(y), static_cast<T*>(hidden), p, 0};
  call.groups = uint(std::min<int64_t>(p.num_tiles, max_groups));
  if (const char* failed = msl_shim::run_threadgroups(call.groups, uint(p.simdgroups) * 32, p.tg_bytes, reverse,
                                                      &ForwardCall<T>::Thread, &call)) {
    g_error = failed;
    return -1;
  }
  return 0;
}

template <typename T>
int Backward(const Net& net, const void* dy, const void* x, const void* const* kernels, const void* y,
             const void* hidden, void* dx, void* const* grad_kernels, void* const* grad_biases, bool reverse) {
  mo::FusedMlpParams p;
  if (!Params(net, sizeof(T), true, &p)) return -1;
  std::vector<T> w, unused;
  Pack<T>(p, kernels, nullptr, &w, &unused);
  std::vector<float> partials(size_t(p.partitions) * size_t(p.params_pad), 0.0f);  // the .mm's blit fill
  if (net.n > 0) {
    BackwardCall<T> call = {Kernels<T>::backward(net.width), static_cast<const T*>(dy), static_cast<const T*>(x),
                            static_cast<const T*>(y), static_cast<const T*>(hidden), w.data(), partials.data(),
                            static_cast<T*>(dx), p};
    if (const char* failed = msl_shim::run_threadgroups(uint(p.partitions), uint(p.simdgroups) * 32, p.tg_bytes,
                                                        reverse, &BackwardCall<T>::Thread, &call)) {
      g_error = failed;
      return -1;
    }
  }
  for (int l = 0; l <= p.hidden_layers; ++l) {
    const mo::FusedMlpReduceParams q = mo::fused_mlp_reduce_params(p, l);
    RunGrid(Kernels<T>::reduce(), GridFor(int64_t(q.rows) * q.cols + q.cols), static_cast<const float*>(partials.data()),
            static_cast<T*>(grad_kernels[l]), static_cast<T*>(grad_biases[l]), q);
  }
  return 0;
}

bool WidthOk(int w) { return w == 16 || w == 32 || w == 64 || w == 128; }

template <typename T>
bool FindAll() {
  bool all = Kernels<T>::pack() && Kernels<T>::reduce();
  for (int w = 16; w <= 128; w *= 2) all = Kernels<T>::forward(w) && Kernels<T>::backward(w) && all;
  return all;
}

// out: simdgroups, rows, chunk, threadgroup bytes, partitions of the geometry p;
// -1 where fused_mlp_params found none (ok false).
int GeometryOf(bool ok, const mo::FusedMlpParams& p, int32_t* out) {
  if (!ok) return -1;
  out[0] = p.simdgroups;
  out[1] = p.rows;
  out[2] = p.chunk;
  out[3] = p.tg_bytes;
  out[4] = p.partitions;
  return 0;
}

}  // namespace

extern "C" {

const char* shim_fused_mlp_error() { return g_error.c_str(); }

// The geometry the .mm would use for pipelines of at most max_threads threads
// per threadgroup: simdgroups, rows, chunk, threadgroup bytes, partitions.
int shim_fused_mlp_geometry_max_threads(int64_t n, int in_dim, int width, int hidden_layers, int out_dim,
                                        int elem_bytes, int backward, int64_t max_threads, int32_t* out) {
  mo::FusedMlpParams p;
  return GeometryOf(mo::fused_mlp_params(n, in_dim, width, out_dim, hidden_layers, 0, 0, 0.0f, elem_bytes,
                                         backward != 0, &p, max_threads),
                    p, out);
}

// The geometry the .mm would use: simdgroups, rows, chunk, threadgroup bytes, partitions.
int shim_fused_mlp_geometry(int64_t n, int in_dim, int width, int hidden_layers, int out_dim, int elem_bytes,
                            int backward, int32_t* out) {
  mo::FusedMlpParams p;
  return GeometryOf(
      mo::fused_mlp_params(n, in_dim, width, out_dim, hidden_layers, 0, 0, 0.0f, elem_bytes, backward != 0, &p), p,
      out);
}

// dtype 0 = float32, 1 = float16. kernels / biases: hidden_layers + 1 pointers.
// max_groups caps the threadgroups of the forward (its tile loop then runs
// several tiles per threadgroup). Returns 0, or -1 (shim_fused_mlp_error()).
int shim_fused_mlp_forward(int dtype, const void* x, const void* const* kernels, const void* const* biases, void* y,
                           void* hidden, int64_t n, int in_dim, int width, int hidden_layers, int out_dim, int act,
                           int out_act, float alpha, uint max_groups, int reverse) {
  g_error.clear();
  if (!(dtype == 0 ? FindAll<float>() : FindAll<half>())) {
    g_error = "an entry point fused_mlp_metal.cc asks for is not instantiated";
    return -1;
  }
  if (!WidthOk(width) || max_groups == 0) {
    g_error = "bad width or max_groups";
    return -1;
  }
  const Net net = {n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha};
  return dtype == 0 ? Forward<float>(net, x, kernels, biases, y, hidden, max_groups, reverse != 0)
                    : Forward<half>(net, x, kernels, biases, y, hidden, max_groups, reverse != 0);
}

int shim_fused_mlp_backward(int dtype, const void* dy, const void* x, const void* const* kernels, const void* y,
                            const void* hidden, void* dx, void* const* grad_kernels, void* const* grad_biases,
                            int64_t n, int in_dim, int width, int hidden_layers, int out_dim, int act, int out_act,
                            float alpha, int reverse) {
  g_error.clear();
  if (!(dtype == 0 ? FindAll<float>() : FindAll<half>())) {
    g_error = "an entry point fused_mlp_metal.cc asks for is not instantiated";
    return -1;
  }
  if (!WidthOk(width)) {
    g_error = "bad width";
    return -1;
  }
  const Net net = {n, in_dim, width, hidden_layers, out_dim, act, out_act, alpha};
  return dtype == 0 ? Backward<float>(net, dy, x, kernels, y, hidden, dx, grad_kernels, grad_biases, reverse != 0)
                    : Backward<half>(net, dy, x, kernels, y, hidden, dx, grad_kernels, grad_biases, reverse != 0);
}

// Finds every entry point fused_mlp_metal.cc can ask for (W 16..128, both
// dtypes): -1 when one is missing, else the number of the shader's
// instantiations none of those names reached.
int shim_fused_mlp_find_every_kernel() {
  if (!FindAll<float>() || !FindAll<half>()) return -1;
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"

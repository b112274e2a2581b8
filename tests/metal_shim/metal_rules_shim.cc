// The Metal glue's decisions (kernels/metal/metal_rules.h, kernels/metal_plan/dispatch_rules.h, mpsgraph_rules.h)
// for tests/test_metal_glue.py.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/metal/metal_rules.h"
#include "kernels/fused_conv2d/fused_conv2d.h"

namespace {

void CopyOut(const std::string& m, char* out, int size) {
  std::strncpy(out, m.c_str(), static_cast<size_t>(size) - 1);
  out[size - 1] = '\0';
}

// The pieces of `text` separated by ';'.
std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> pieces;
  std::string rest = text;
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    pieces.push_back(rest.substr(0, end));
    rest = end == std::string::npos ? std::string() : rest.substr(end + 1);
  }
  return pieces;
}

std::string Join(const std::vector<std::string>& pieces) {
  std::string text;
  for (const std::string& p : pieces) text += p + "/";
  return text;
}

// mpsgraph_rules.h's graph formulas on floats (the Metal kernel builds them
// from MPSGraph operations). Predicates are 1 or 0.
struct FloatOps {
  using Value = float;
  float Constant(float v) { return v; }
  float Add(float a, float b) { return a + b; }
  float Sub(float a, float b) { return a - b; }
  float Mul(float a, float b) { return a * b; }
  float Abs(float a) { return std::fabs(a); }
  float Exp(float a) { return std::exp(a); }
  float Greater(float a, float b) { return a > b ? 1.0f : 0.0f; }
  float LessEqual(float a, float b) { return a <= b ? 1.0f : 0.0f; }
  float Select(float p, float a, float b) { return p != 0.0f ? a : b; }
};

struct Entry {
  int value = 0;
};
using Cache = mo::metal::LruCache<Entry>;

}  // namespace

extern "C" {

// CommitUntilSubmitted against a stream like tensorflow-metal's: `commit`
// commits the current command buffer on every `every`-th call, counting from
// `counted` calls already made (0 < every; every <= 0: never). Returns whether
// the work was submitted; *calls: the commit calls made.
int shim_commit_until_submitted(int every, int counted, int* calls) {
  int count = counted;
  bool committed = false;
  *calls = 0;
  const bool ok = mo::metal::CommitUntilSubmitted(
      [&] {
        ++*calls;
        if (every > 0 && ++count % every == 0) committed = true;
      },
      [&] { return committed; });
  return ok ? 1 : 0;
}

int shim_tensor_has_metal_buffer(int64_t num_elements) {
  return mo::metal::TensorHasMetalBuffer(num_elements) ? 1 : 0;
}

// TensorBufferError into `out`.
void shim_tensor_buffer_error(int is_buffer, uint64_t length, uint64_t bytes, char* out, int size) {
  CopyOut(mo::metal::TensorBufferError(is_buffer != 0, length, bytes), out, size);
}

// The MSL version a device offers (metal3: it reports MTLGPUFamilyMetal3), as major * 100 + minor.
int shim_msl_version_for_device(int metal3) {
  const mo::metal::MslVersion v = mo::metal::MslVersionForDevice(metal3 != 0);
  return v.major * 100 + v.minor;
}

int shim_msl_at_least(int have_major, int have_minor, int need_major, int need_minor) {
  return mo::metal::MslAtLeast({have_major, have_minor}, {need_major, need_minor}) ? 1 : 0;
}

uint64_t shim_mtl_language_version_value(int major, int minor) {
  return mo::metal::MtlLanguageVersionValue({major, minor});
}

uint64_t shim_threadgroup_count(uint64_t num_threads, uint64_t width) {
  return mo::metal::ThreadgroupCount(num_threads, width);
}

// GpuRegistrationRefusal of the kernels registered from `file` on a GPU
// (metal3, apple7: its answers to supportsFamily:) against `num` libraries
// (their names, expanded sources and language versions), with METAL_OPS_TF_METAL_OFF
// at `turned_off` (nullptr: unset), into `out` ("" when they register).
void shim_gpu_registration_refusal(const char* file, int metal3, int apple7, const char* turned_off, int num,
                                   const char** names, const char** sources, const int* majors, const int* minors,
                                   char* out, int size) {
  std::vector<mo::metal::EmbeddedMetalSource> table;
  for (int i = 0; i < num; ++i) table.push_back({names[i], sources[i], majors[i], minors[i]});
  const mo::metal::GpuFeatures gpu = {mo::metal::MslVersionForDevice(metal3 != 0), apple7 != 0};
  CopyOut(mo::metal::GpuRegistrationRefusal(file, gpu, turned_off, table.data(), table.size()), out, size);
}

// StreamRefusalMessage into `out`.
void shim_stream_refusal_message(const char* op, const char* library, const char* reason, char* out, int size) {
  CopyOut(mo::metal::StreamRefusalMessage(op, library, reason), out, size);
}

// LeftToCpuMessage of the (op, why) pairs in `pairs` ("op|why;..."), into `out`.
void shim_left_to_cpu_message(const char* pairs, char* out, int size) {
  std::vector<std::pair<std::string, std::string>> left;
  for (const std::string& pair : Split(pairs)) {
    left.push_back({pair.substr(0, pair.find('|')), pair.substr(pair.find('|') + 1)});
  }
  CopyOut(mo::metal::LeftToCpuMessage(left), out, size);
}

// Writes the too-old message into `out` (NUL-terminated, truncated to `size`).
void shim_msl_too_old_message(const char* library, int need_major, int need_minor, char* out, int size) {
  CopyOut(mo::metal::MslTooOldMessage(library, {need_major, need_minor}), out, size);
}

// ThreadgroupFitError into `out` (empty when the dispatch fits).
void shim_threadgroup_fit_error(uint64_t max_threads, uint64_t threads, uint64_t static_bytes, uint64_t bytes,
                                uint64_t device_bytes, char* out, int size) {
  CopyOut(mo::metal::ThreadgroupFitError(max_threads, threads, static_bytes, bytes, device_bytes), out, size);
}

uint64_t shim_fill_length(uint64_t bytes, uint64_t buffer_length) { return mo::metal::FillLength(bytes, buffer_length); }

int shim_gpu_sync_requested(const char* value) { return mo::metal::GpuSyncRequested(value) ? 1 : 0; }

// What the glue decides for the op it encodes now (the process environment).
int shim_gpu_sync_on() { return mo::metal::GpuSyncOn() ? 1 : 0; }

// GpuErrorMessage for kernels given as one string separated by ';'.
void shim_gpu_error_message(const char* op, const char* kernels, const char* status, const char* error, char* out,
                            int size) {
  CopyOut(mo::metal::GpuErrorMessage(op, Split(kernels), status, error), out, size);
}

// ---- the MPSGraph kernels (mpsgraph_rules.h) ----

void shim_float_key(float value, char* out, int size) { CopyOut(mo::metal::FloatKey(value), out, size); }

// GraphKey of `num_shapes` shapes given as their ranks and their dimensions
// one after another; `attrs` separated by ';'.
void shim_graph_key(const char* op, uint64_t device, const char* attrs, const int* ranks, const int64_t* dims,
                    int num_shapes, const int64_t* out_dims, int out_rank, char* out, int size) {
  const std::vector<int64_t> output(out_dims, out_dims + out_rank);
  std::vector<std::vector<int64_t>> shapes;
  for (int i = 0; i < num_shapes; ++i) {
    shapes.emplace_back(dims, dims + ranks[i]);
    dims += ranks[i];
  }
  CopyOut(mo::metal::GraphKey(op, device, Split(attrs), shapes, output), out, size);
}

// ConvGraphAttrs joined by '/': fields are padding (0 SAME, 1 VALID, 2
// EXPLICIT), stride_rows, stride_cols, dilation_rows, dilation_cols, pad_top,
// pad_bottom, pad_left, pad_right, act, num_bias, num_residual.
void shim_conv_graph_attrs(const int64_t* f, float alpha, char* out, int size) {
  mo::fused_conv2d::Attrs a;
  a.padding = static_cast<int>(f[0]);
  a.strides = {1, f[1], f[2], 1};
  a.dilations = {1, f[3], f[4], 1};
  a.explicit_paddings = {0, 0, f[5], f[6], f[7], f[8], 0, 0};
  a.activation = static_cast<int>(f[9]);
  a.num_bias = f[10];
  a.num_residual = f[11];
  a.leaky_relu_alpha = alpha;
  CopyOut(Join(mo::metal::ConvGraphAttrs(a)), out, size);
}

void shim_activation_grad_graph_attrs(int act, float alpha, int64_t num_features, char* out, int size) {
  mo::fused_activation_grad::Attrs a;
  a.activation = act;
  a.leaky_relu_alpha = alpha;
  a.num_features = num_features;
  CopyOut(Join(mo::metal::ActivationGradGraphAttrs(a)), out, size);
}

uint64_t shim_graph_cache_capacity() { return mo::metal::kGraphCacheCapacity; }

void* shim_lru_new(uint64_t capacity) { return new Cache(capacity); }
void shim_lru_delete(void* cache) { delete static_cast<Cache*>(cache); }
uint64_t shim_lru_size(void* cache) { return static_cast<Cache*>(cache)->size(); }
int shim_lru_contains(void* cache, const char* key) { return static_cast<Cache*>(cache)->Contains(key) ? 1 : 0; }

// Looks `key` up, making it when absent: 1 when it was made, 0 when found.
int shim_lru_get(void* cache, const char* key) {
  bool made = false;
  static_cast<Cache*>(cache)->GetOrMake(key, [] { return std::make_shared<Entry>(); }, &made);
  return made ? 1 : 0;
}

// A value dropped while a caller holds it stays valid for that caller (the
// Metal kernel encodes a graph the cache has just dropped): 1 when it does.
int shim_lru_dropped_value_stays_valid() {
  Cache cache(1);
  std::shared_ptr<Entry> held = cache.GetOrMake("a", [] { return std::make_shared<Entry>(); });
  held->value = 42;
  std::weak_ptr<Entry> watch = held;
  cache.GetOrMake("b", [] { return std::make_shared<Entry>(); });
  const bool dropped = !cache.Contains("a");
  const bool alive = held.use_count() == 1 && held->value == 42;
  held.reset();
  return dropped && alive && watch.expired() ? 1 : 0;
}

void shim_mpsgraph_expm1(const float* z, float* out, int64_t n) {
  FloatOps ops;
  for (int64_t i = 0; i < n; ++i) out[i] = mo::metal::Expm1(ops, z[i]);
}

void shim_mpsgraph_elu(const float* z, float* out, int64_t n) {
  FloatOps ops;
  for (int64_t i = 0; i < n; ++i) out[i] = mo::metal::Elu(ops, z[i]);
}

}  // extern "C"

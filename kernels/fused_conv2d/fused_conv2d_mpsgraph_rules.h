// The MPSGraph kernels' decisions (kernels/fused_conv2d/fused_conv2d_metal.cc), as
// plain C++ so they are unit-tested on machines without Metal
// (tests/metal_shim/metal_rules_shim.cc): the key of a compiled graph, the
// bounded cache of compiled graphs, and ELU's expm1 written with the
// operations MPSGraph has.
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_MPSGRAPH_RULES_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_MPSGRAPH_RULES_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/fused_conv2d/fused_conv2d_spec.h"

namespace mo {
namespace metal {

// ---- graph keys -------------------------------------------------------------------------

// A float attribute as a key piece: its bit pattern, so values that differ in
// any bit name different graphs (std::to_string's six decimals print 0.1f and
// its neighbours alike).
inline std::string FloatKey(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", static_cast<unsigned>(bits));
  return text;
}

// The key of one compiled graph: the graph's kind (`op`), the GPU (its
// registryID), the attribute pieces it is built from, every input's shape and
// the output's (a graph may bake the output shape into a constant, as the
// convolution with no taps does: its inputs alone do not fix it). Pieces are
// separated so that no two different inputs give one key: '|' between parts,
// '/' after each attribute piece, ',' after each dimension, '>' before the output.
inline std::string GraphKey(const std::string& op, uint64_t device, const std::vector<std::string>& attrs,
                            const std::vector<std::vector<int64_t>>& shapes, const std::vector<int64_t>& output) {
  std::string key = op + "|" + std::to_string(device) + "|";
  for (const std::string& a : attrs) key += a + "/";
  for (const std::vector<int64_t>& shape : shapes) {
    key += "|";
    for (int64_t d : shape) key += std::to_string(d) + ",";
  }
  key += "|>";
  for (int64_t d : output) key += std::to_string(d) + ",";
  return key;
}

// The attribute pieces of MetalOpsFusedConv2D's graphs: every attribute the
// graph is built from.
inline std::vector<std::string> ConvGraphAttrs(const fused_conv2d::ConvAttrs& a) {
  std::vector<std::string> pieces;
  for (int64_t v : {static_cast<int64_t>(a.padding), a.stride_rows, a.stride_cols, a.dilation_rows, a.dilation_cols,
                    a.pad_top, a.pad_bottom, a.pad_left, a.pad_right, static_cast<int64_t>(a.act), a.num_bias,
                    a.num_residual}) {
    pieces.push_back(std::to_string(v));
  }
  pieces.push_back(FloatKey(a.alpha));
  return pieces;
}

// The attribute pieces of MetalOpsFusedActivationGrad's graphs.
inline std::vector<std::string> ActivationGradGraphAttrs(const fused_conv2d::ActivationGradAttrs& a) {
  return {std::to_string(a.act), FloatKey(a.alpha), std::to_string(a.num_features)};
}

// ---- the cache --------------------------------------------------------------------------

// Compiled graphs the process keeps: each distinct key (one per input shape)
// is a compiled MPSGraphExecutable, so a model whose shapes keep changing
// would otherwise grow the cache without end. The bound is far above the
// graphs one training step of a convolutional network uses (one per fused
// layer and shape, forward and activation gradient), so a step that repeats
// keeps every graph it needs.
constexpr size_t kGraphCacheCapacity = 256;

// A map from key to shared value that keeps at most `capacity` entries,
// dropping the least recently used. A dropped value lives on while anyone
// holds it (shared_ptr), so a caller that got it before the drop can finish
// with it. Not thread-safe: the caller locks.
template <typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {}

  // The value of `key`, made by `make()` when absent (`*made` says which); the
  // key becomes the most recently used.
  template <typename Make>
  std::shared_ptr<Value> GetOrMake(const std::string& key, Make make, bool* made = nullptr) {
    auto found = index_.find(key);
    if (found != index_.end()) {
      order_.splice(order_.begin(), order_, found->second);
      if (made != nullptr) *made = false;
      return found->second->second;
    }
    order_.emplace_front(key, make());
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    if (made != nullptr) *made = true;
    return order_.front().second;
  }

  bool Contains(const std::string& key) const { return index_.count(key) != 0; }
  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<Value>>;
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, typename std::list<Entry>::iterator> index_;
};

// ---- expm1 from graph operations --------------------------------------------------------

// ln(2) / 2, below which (in magnitude) expm1 is its Taylor polynomial.
constexpr float kExpm1TaylorBound = 0.34657359f;

// expm1(z) from the operations of `ops` (MPSGraph has no expm1, and
// exp(z) - 1 loses every digit for small |z|): for |z| <= ln(2)/2 the Taylor
// polynomial to z^8 of kernels/common/platform.h's expm1_f (its unreduced
// case: the first term left out is below 1e-9 relative), elsewhere
// exp(z) - 1, whose subtraction then loses at most a factor 2.5 of exp's own
// error (|exp(z) - 1| >= 1 - sqrt(1/2) against exp(z) <= sqrt(1/2) below,
// and likewise above). `Ops` supplies Value, Constant(float), Add, Sub, Mul,
// Abs, Exp, Greater, LessEqual, Select(predicate, if_true, if_false): graph
// tensors in the Metal kernel, floats in the unit test.
template <typename Ops>
typename Ops::Value Expm1(Ops& ops, typename Ops::Value z) {
  using Value = typename Ops::Value;
  float factorial = 40320.0f;  // 8!
  Value q = ops.Constant(1.0f / factorial);
  for (int n = 7; n >= 2; --n) {
    factorial /= static_cast<float>(n + 1);
    q = ops.Add(ops.Mul(q, z), ops.Constant(1.0f / factorial));
  }
  const Value taylor = ops.Add(ops.Mul(ops.Mul(z, z), q), z);
  const Value from_exp = ops.Sub(ops.Exp(z), ops.Constant(1.0f));
  return ops.Select(ops.LessEqual(ops.Abs(z), ops.Constant(kExpm1TaylorBound)), taylor, from_exp);
}

// ELU (kernels/common/activations.h's activation_forward): z > 0 ? z : expm1(z).
template <typename Ops>
typename Ops::Value Elu(Ops& ops, typename Ops::Value z) {
  return ops.Select(ops.Greater(z, ops.Constant(0.0f)), z, Expm1(ops, z));
}

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_MPSGRAPH_RULES_H_

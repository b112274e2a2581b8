// tf-metal-ops Grappler plugin: fuses Conv2D -> bias -> residual add ->
// activation into one MetalOpsFusedConv2D node.
//
// Built as its own shared library (python/metal_ops/_metal_ops_grappler.so) that
// exports TF_InitGraph and is loaded by metal_ops.fusion.enable() through
// TensorFlow's pluggable-device loader, AFTER the op library (so the op is
// registered and tf.load_op_library still produces wrappers).
//
// Patterns (all NHWC, float32, one device, on "CPU"):
//   Conv2D -> [BiasAdd(b) | Add/AddV2 with a [C] operand] -> [Add/AddV2/AddN(2)
//   with a same-shape operand, either order] -> [Relu|Relu6|Elu|LeakyRelu|Sigmoid|Tanh]
// (bias and residual stages in either order),
// with at least one of the three optional stages, and
//   _FusedConv2D(fused_ops=[BiasAdd]) -> residual add and/or activation
// (what TensorFlow's remapper leaves when oneDNN is off).
//
// Safety rules (each one blocks a fusion, the graph is then left as it is):
//  * never touch a _FusedConv2D whose fused_ops is anything but [BiasAdd]: a
//    fusion TF already made (oneDNN's [BiasAdd, Add, Relu]) is kept;
//  * with oneDNN on (OneDnnOptsOn: TF_ENABLE_ONEDNN_OPTS, else TensorFlow's
//    documented default for the CPU) TF's oneDNN convolutions fuse the
//    residual add and activation themselves: no rewrite at all unless
//    METAL_OPS_FUSION_WITH_ONEDNN=1;
//  * no node of the pattern may be in TF_GetNodesToPreserveList or be a fetch;
//  * every intermediate has exactly one consumer (data or control), and that is
//    the next node of the pattern; no node of the pattern has control inputs;
//  * same device on every node, CPU (or unplaced);
//  * dtype float; residual shape equal to the output's (known, or the same
//    symbolic dimension), never a broadcast; bias of shape [C];
//  * only filter sizes our kernel runs faster than TF (FusionProfitable), unless
//    METAL_OPS_FUSION_ALL_CONVS=1;
//  * the last node's name goes on the fused node, so consumers stay wired;
//  * a second pass finds nothing new (the fused op is never a pattern head).
// METAL_OPS_FUSION=0 disables every rewrite; METAL_OPS_FUSION_LOG=1 prints one
// line per rewrite (pattern and node names) to stderr. The fused node records
// what it replaced in its own attributes (_metal_ops_fused_pattern,
// _metal_ops_fused_nodes), which metal_ops.fusion.report() reads back from the
// optimized graph.
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/experimental/grappler/grappler.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tensorflow/core/grappler/costs/op_performance_data.pb.h"
#include "Eigen/Core"
#include "kernels/fused_conv2d/fused_conv2d.h"

namespace mo {
namespace fusion {
namespace {

std::atomic<int> g_init_calls{0};

std::atomic<long> g_rewrites{0};
std::atomic<long> g_passes{0};

bool EnvIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

bool FusionDisabled() { return EnvIs("METAL_OPS_FUSION", "0"); }
bool LogRewrites() { return EnvIs("METAL_OPS_FUSION_LOG", "1"); }

// Whether TensorFlow runs its oneDNN CPU kernels and fusions in this process,
// decided as TensorFlow documents it (the TF 2.9 release notes and the start-up
// log line "oneDNN custom operations are on ... set the environment variable
// TF_ENABLE_ONEDNN_OPTS=0"): TF_ENABLE_ONEDNN_OPTS when set (read like TF reads
// boolean variables: 0/1, false/true), otherwise on for the x86-64 Linux builds
// on CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX, off everywhere else
// (macOS, Windows, other CPUs). tests/test_fused_conv2d_fusion.py checks that
// this agrees with TensorFlow's own answer in each setting.
bool OneDnnOptsDefault() {
#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avx512bf16") ||
         __builtin_cpu_supports("avxvnni") || __builtin_cpu_supports("amx-tile") ||
         __builtin_cpu_supports("amx-int8") || __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

bool OneDnnOptsOn() {
  static const bool on = [] {
    const char* v = std::getenv("TF_ENABLE_ONEDNN_OPTS");
    if (v == nullptr) return OneDnnOptsDefault();
    std::string s(v);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "1" || s == "true") return true;
    if (s == "0" || s == "false") return false;
    return OneDnnOptsDefault();  // TF rejects other values and keeps its default
  }();
  return on;
}

bool OneDnnBlocks() { return OneDnnOptsOn() && !EnvIs("METAL_OPS_FUSION_WITH_ONEDNN", "1"); }

// Profitability (oneDNN off; measured against TF's convolution + its separate
// residual-add / activation passes): mo::fused_conv_profitable
// (kernels/fused_conv2d/fused_conv2d.h): a GEMM tile that fits in L2 and a filter
// matrix no taller than wide, e.g. 1x1 64 -> 256. Unknown sizes: no rewrite.
// METAL_OPS_FUSION_ALL_CONVS=1 fuses every size.
bool FusionProfitable(int64_t kh, int64_t kw, int64_t cin, int64_t cout, int64_t pixels) {
  if (EnvIs("METAL_OPS_FUSION_ALL_CONVS", "1")) return true;
  if (kh < 0 || kw < 0 || cin < 0 || cout < 0) return false;
  static const int64_t l2_bytes = Eigen::internal::CacheSizes().m_l2;
  return mo::fused_conv_profitable(kh * kw * cin, cout, pixels, l2_bytes);
}

// "name", "name:1", "^name" -> (name, port, is_control)
struct TensorRef {
  std::string node;
  int port = 0;
  bool control = false;
};

TensorRef ParseInput(const std::string& s) {
  TensorRef r;
  size_t start = 0;
  if (!s.empty() && s[0] == '^') {
    r.control = true;
    start = 1;
  }
  const size_t colon = s.rfind(':');
  if (colon != std::string::npos && colon > start) {
    r.node = s.substr(start, colon - start);
    r.port = std::atoi(s.c_str() + colon + 1);
  } else {
    r.node = s.substr(start);
  }
  return r;
}

struct Consumer {
  int node;
  int input_index;
  bool control;
};

// Shapes and dtypes from Grappler's static shape inference (symbolic: unknown
// dimensions that are provably equal share the same negative id < -1).
class Shapes {
 public:
  explicit Shapes(const TF_GrapplerItem* item) {
    props_ = TF_NewGraphProperties(item);
    TF_Status* s = TF_NewStatus();
    TF_InferStatically(props_, /*assume_valid_feeds=*/1, /*aggressive=*/0, 0, 0, s);
    ok_ = TF_GetCode(s) == TF_OK;
    TF_DeleteStatus(s);
  }
  ~Shapes() { TF_DeleteGraphProperties(props_); }
  bool ok() const { return ok_; }

  // Output `port` of `node`; false when unknown.
  bool Get(const std::string& node, int port, tensorflow::OpInfo::TensorProperties* out) {
    auto it = cache_.find(node);
    if (it == cache_.end()) {
      std::vector<tensorflow::OpInfo::TensorProperties> list;
      TF_Status* s = TF_NewStatus();
      int n = 0;
      TF_GetOutputPropertiesListSize(props_, node.c_str(), &n, s);
      if (TF_GetCode(s) == TF_OK && n > 0) {
        std::vector<TF_Buffer*> bufs(n);
        for (auto& b : bufs) b = TF_NewBuffer();
        TF_GetOutputPropertiesList(props_, node.c_str(), bufs.data(), n, s);
        if (TF_GetCode(s) == TF_OK) {
          for (auto* b : bufs) {
            tensorflow::OpInfo::TensorProperties p;
            p.ParseFromArray(b->data, static_cast<int>(b->length));
            list.push_back(p);
          }
        }
        for (auto* b : bufs) TF_DeleteBuffer(b);
      }
      TF_DeleteStatus(s);
      it = cache_.emplace(node, std::move(list)).first;
    }
    if (port < 0 || port >= static_cast<int>(it->second.size())) return false;
    *out = it->second[port];
    return true;
  }

 private:
  TF_GraphProperties* props_ = nullptr;
  bool ok_ = false;
  std::unordered_map<std::string, std::vector<tensorflow::OpInfo::TensorProperties>> cache_;
};

bool IsFloat(const tensorflow::NodeDef& n, const char* attr = "T") {
  auto it = n.attr().find(attr);
  return it != n.attr().end() && it->second.type() == tensorflow::DT_FLOAT;
}

std::string StrAttr(const tensorflow::NodeDef& n, const char* name, const char* dflt = "") {
  auto it = n.attr().find(name);
  return it == n.attr().end() ? dflt : it->second.s();
}

bool IsCpuDevice(const std::string& device) {
  if (device.empty()) return true;
  std::string d = device;
  for (auto& c : d) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return d.find("CPU") != std::string::npos && d.find("GPU") == std::string::npos;
}

// Equal rank-4 shapes whose every dimension is known or the same symbolic id.
bool SameShape(const tensorflow::TensorShapeProto& a, const tensorflow::TensorShapeProto& b) {
  if (a.unknown_rank() || b.unknown_rank() || a.dim_size() != 4 || b.dim_size() != 4) return false;
  for (int i = 0; i < 4; ++i) {
    const int64_t x = a.dim(i).size(), y = b.dim(i).size();
    if (x == -1 || y == -1 || x != y) return false;
  }
  return true;
}

struct Match {
  int head = -1;          // Conv2D or _FusedConv2D
  int bias_node = -1;     // BiasAdd / Add node (Conv2D head only)
  std::string bias;       // bias tensor name (input)
  int residual_node = -1;
  std::string residual;   // residual tensor name (input)
  int act_node = -1;
  std::string activation = "none";
  float alpha = 0.2f;
  std::vector<int> nodes; // in pattern order; back() is the last node
  std::string pattern;    // "Conv2D+BiasAdd+AddV2+Relu"
};

class Fuser {
 public:
  Fuser(tensorflow::GraphDef* graph, const TF_GrapplerItem* item) : g_(graph), item_(item) {}

  int Run() {
    const int n = g_->node_size();
    bool any_head = false;
    for (int i = 0; i < n; ++i) {
      index_[g_->node(i).name()] = i;
      const std::string& op = g_->node(i).op();
      if (op == "Conv2D" || op == "_FusedConv2D") any_head = true;
    }
    if (!any_head) return 0;
    consumers_.assign(n, {});
    for (int i = 0; i < n; ++i) {
      const auto& node = g_->node(i);
      for (int k = 0; k < node.input_size(); ++k) {
        TensorRef r = ParseInput(node.input(k));
        auto it = index_.find(r.node);
        if (it != index_.end()) consumers_[it->second].push_back({i, k, r.control});
      }
    }
    LoadPreserved();
    shapes_.reset(new Shapes(item_));
    if (!shapes_->ok()) return 0;

    std::vector<bool> used(n, false), removed(n, false);
    int rewrites = 0;
    for (int i = 0; i < n; ++i) {
      if (used[i]) continue;
      Match m;
      if (!MatchAt(i, &m)) continue;
      bool clash = false;
      for (int k : m.nodes) clash |= used[k];
      if (clash) continue;
      for (int k : m.nodes) used[k] = true;
      Rewrite(m);
      for (size_t k = 0; k + 1 < m.nodes.size(); ++k) removed[m.nodes[k]] = true;
      ++rewrites;
    }
    if (rewrites > 0) {
      tensorflow::GraphDef out;
      *out.mutable_versions() = g_->versions();
      *out.mutable_library() = g_->library();
      for (int i = 0; i < n; ++i)
        if (!removed[i]) *out.add_node() = g_->node(i);
      g_->Swap(&out);
    }
    return rewrites;
  }

 private:
  void LoadPreserved() {
    TF_Status* s = TF_NewStatus();
    for (int which = 0; which < 2; ++which) {
      int num = 0;
      size_t storage = 0;
      if (which == 0)
        TF_GetNodesToPreserveListSize(item_, &num, &storage, s);
      else
        TF_GetFetchNodesListSize(item_, &num, &storage, s);
      if (TF_GetCode(s) != TF_OK || num == 0) continue;
      std::vector<char*> values(num);
      std::vector<size_t> lengths(num);
      std::vector<char> buf(storage + 1);
      if (which == 0)
        TF_GetNodesToPreserveList(item_, values.data(), lengths.data(), num, buf.data(), storage,
                                  s);
      else
        TF_GetFetchNodesList(item_, values.data(), lengths.data(), num, buf.data(), storage, s);
      if (TF_GetCode(s) != TF_OK) continue;
      for (int k = 0; k < num; ++k) {
        // Fetches may be tensor names ("node:0"): keep the node part.
        preserved_.insert(ParseInput(std::string(values[k], lengths[k])).node);
      }
    }
    TF_DeleteStatus(s);
  }

  const tensorflow::NodeDef& N(int i) const { return g_->node(i); }

  bool HasControlInputs(int i) const {
    for (const auto& in : N(i).input())
      if (!in.empty() && in[0] == '^') return true;
    return false;
  }

  // The only consumer of node i (its output 0, used once, no control edges
  // out), or -1.
  int SoleConsumer(int i) const {
    const auto& cs = consumers_[i];
    if (cs.size() != 1 || cs[0].control) return -1;
    if (ParseInput(N(cs[0].node).input(cs[0].input_index)).port != 0) return -1;
    return cs[0].node;
  }

  bool Eligible(int i, const std::string& device) const {
    const auto& node = N(i);
    return preserved_.count(node.name()) == 0 && !HasControlInputs(i) &&
           node.device() == device && IsFloat(node);
  }

  bool OutShape(int i, tensorflow::TensorShapeProto* shape) {
    tensorflow::OpInfo::TensorProperties p;
    if (!shapes_->Get(N(i).name(), 0, &p) || p.dtype() != tensorflow::DT_FLOAT) return false;
    *shape = p.shape();
    return true;
  }

  bool TensorShape(const std::string& tensor, tensorflow::TensorShapeProto* shape) {
    TensorRef r = ParseInput(tensor);
    if (r.control) return false;
    tensorflow::OpInfo::TensorProperties p;
    if (!shapes_->Get(r.node, r.port, &p) || p.dtype() != tensorflow::DT_FLOAT) return false;
    *shape = p.shape();
    return true;
  }

  // For an Add/AddV2 consuming `cur` as one operand: the other operand's input
  // index, or -1 (also when both operands are `cur`).
  int OtherOperand(int add, int cur) const {
    const auto& node = N(add);
    if (node.input_size() != 2) return -1;
    const bool a = ParseInput(node.input(0)).node == N(cur).name();
    const bool b = ParseInput(node.input(1)).node == N(cur).name();
    if (a == b) return -1;
    return a ? 1 : 0;
  }

  bool MatchAt(int head, Match* m) {
    const auto& h = N(head);
    const bool fused = h.op() == "_FusedConv2D";
    if (h.op() != "Conv2D" && !fused) return false;
    if (OneDnnBlocks()) return false;
    const std::string& device = h.device();
    if (!IsCpuDevice(device) || !Eligible(head, device)) return false;
    if (StrAttr(h, "data_format", "NHWC") != "NHWC") return false;
    const std::string padding = StrAttr(h, "padding");
    if (padding != "SAME" && padding != "VALID" && padding != "EXPLICIT") return false;
    if (h.input_size() < 2) return false;
    tensorflow::TensorShapeProto out_shape, in_shape, filter_shape;
    if (!OutShape(head, &out_shape) || !TensorShape(h.input(0), &in_shape) ||
        !TensorShape(h.input(1), &filter_shape))
      return false;
    if (out_shape.unknown_rank() || out_shape.dim_size() != 4) return false;
    // Grouped convolutions (filter in_channels != input channels) stay as they are.
    if (in_shape.unknown_rank() || filter_shape.unknown_rank() || in_shape.dim_size() != 4 ||
        filter_shape.dim_size() != 4 || in_shape.dim(3).size() < 0 ||
        in_shape.dim(3).size() != filter_shape.dim(2).size())
      return false;
    const int64_t channels = out_shape.dim(3).size();
    if (channels < 0) return false;
    int64_t pixels = 1;
    for (int d = 0; d < 3; ++d) {
      const int64_t size = out_shape.dim(d).size();
      pixels = size < 0 || pixels < 0 ? -1 : pixels * size;
    }
    if (!FusionProfitable(filter_shape.dim(0).size(), filter_shape.dim(1).size(),
                          filter_shape.dim(2).size(), filter_shape.dim(3).size(), pixels))
      return false;

    m->head = head;
    m->nodes.push_back(head);
    m->pattern = h.op();
    if (fused) {
      auto it = h.attr().find("fused_ops");
      if (it == h.attr().end() || it->second.list().s_size() != 1 ||
          it->second.list().s(0) != "BiasAdd")
        return false;
      auto na = h.attr().find("num_args");
      if (na == h.attr().end() || na->second.i() != 1 || h.input_size() != 3) return false;
      m->bias = h.input(2);
      m->pattern += "[BiasAdd]";
    }
    int cur = head;
    // Stages 1 and 2, in either order (TF's arithmetic optimizer may regroup
    // (conv + b) + r as (conv + r) + b): a bias (Conv2D heads only) and a
    // residual add with a same-shape tensor (either operand order).
    for (int stage = 0; stage < 2; ++stage) {
      const int next = SoleConsumer(cur);
      if (next < 0 || !Eligible(next, device)) break;
      const auto& b = N(next);
      // AddN of two tensors: what TF's arithmetic optimizer makes of a chain of
      // same-shape adds (AddN never broadcasts, so it can only be the residual).
      const bool is_addn = b.op() == "AddN" && b.input_size() == 2;
      const bool is_add = b.op() == "Add" || b.op() == "AddV2" || is_addn;
      tensorflow::TensorShapeProto addout;
      if (!fused && m->bias.empty() && b.op() == "BiasAdd" &&
          StrAttr(b, "data_format", "NHWC") == "NHWC" && b.input_size() == 2 &&
          ParseInput(b.input(0)).node == N(cur).name()) {
        tensorflow::TensorShapeProto bs;
        if (!TensorShape(b.input(1), &bs) || bs.unknown_rank() || bs.dim_size() != 1 ||
            bs.dim(0).size() != channels)
          break;
        m->bias = b.input(1);
        m->bias_node = next;
        m->pattern += "+BiasAdd";
      } else if (is_add && OutShape(next, &addout) && SameShape(addout, out_shape)) {
        const int other = OtherOperand(next, cur);
        if (other < 0) break;
        tensorflow::TensorShapeProto os;
        if (!TensorShape(b.input(other), &os) || os.unknown_rank()) break;
        if (!fused && m->bias.empty() && !is_addn && os.dim_size() == 1 &&
            os.dim(0).size() == channels) {
          m->bias = b.input(other);
          m->bias_node = next;
          m->pattern += "+" + b.op();
        } else if (m->residual.empty() && SameShape(os, out_shape)) {
          m->residual = b.input(other);
          m->residual_node = next;
          m->pattern += "+" + b.op() + "(residual)";
        } else {
          break;
        }
      } else {
        break;
      }
      m->nodes.push_back(next);
      cur = next;
    }
    // Stage 3: activation.
    {
      int next = SoleConsumer(cur);
      if (next >= 0 && Eligible(next, device)) {
        const std::string& op = N(next).op();
        std::string act;
        if (op == "Relu") act = "relu";
        else if (op == "Relu6") act = "relu6";
        else if (op == "Elu") act = "elu";
        else if (op == "Sigmoid") act = "sigmoid";
        else if (op == "Tanh") act = "tanh";
        else if (op == "LeakyRelu") {
          auto it = N(next).attr().find("alpha");
          const float alpha = it == N(next).attr().end() ? 0.2f : it->second.f();
          // Our gradient reads the derivative from the output: alpha >= 0 only.
          if (alpha >= 0.0f) {
            act = "leaky_relu";
            m->alpha = alpha;
          }
        }
        if (!act.empty()) {
          m->activation = act;
          m->act_node = next;
          m->nodes.push_back(next);
          m->pattern += "+" + op;
          cur = next;
        }
      }
    }
    // Something must be absorbed; a _FusedConv2D[BiasAdd] needs a residual or an
    // activation TF did not fuse.
    if (m->nodes.size() < 2) return false;
    return true;
  }

  void Rewrite(const Match& m) {
    const tensorflow::NodeDef head = N(m.head);
    tensorflow::NodeDef* last = g_->mutable_node(m.nodes.back());
    std::vector<std::string> names;
    for (int k : m.nodes) names.push_back(N(k).name());
    tensorflow::NodeDef fused;
    fused.set_name(last->name());
    fused.set_op("MetalOpsFusedConv2D");
    fused.set_device(last->device());
    fused.add_input(head.input(0));
    fused.add_input(head.input(1));
    if (!m.bias.empty()) fused.add_input(m.bias);
    if (!m.residual.empty()) fused.add_input(m.residual);
    auto& attr = *fused.mutable_attr();
    attr["T"].set_type(tensorflow::DT_FLOAT);
    attr["num_bias"].set_i(m.bias.empty() ? 0 : 1);
    attr["num_residual"].set_i(m.residual.empty() ? 0 : 1);
    for (const char* a : {"strides", "padding", "dilations", "explicit_paddings"}) {
      auto it = head.attr().find(a);
      if (it != head.attr().end()) attr[a] = it->second;
    }
    if (attr.find("dilations") == attr.end()) {
      auto* l = attr["dilations"].mutable_list();
      for (int k = 0; k < 4; ++k) l->add_i(1);
    }
    if (attr.find("explicit_paddings") == attr.end()) attr["explicit_paddings"].mutable_list();
    attr["data_format"].set_s("NHWC");
    attr["activation"].set_s(m.activation);
    attr["leaky_relu_alpha"].set_f(m.alpha);
    // What this node replaced, for metal_ops.fusion.report(), which reads it
    // from the optimized graph: underscore attrs are allowed on any node and
    // ignored by the kernel.
    attr["_metal_ops_fused_pattern"].set_s(m.pattern);
    auto* l = attr["_metal_ops_fused_nodes"].mutable_list();
    for (const auto& s : names) l->add_s(s);
    if (LogRewrites()) {
      std::string joined;
      for (size_t k = 0; k < names.size(); ++k) joined += (k ? ", " : "") + names[k];
      std::fprintf(stderr, "metal_ops fusion: %s -> MetalOpsFusedConv2D '%s' (activation %s; nodes: %s)\n",
                   m.pattern.c_str(), fused.name().c_str(), m.activation.c_str(), joined.c_str());
    }
    last->Swap(&fused);
  }

  tensorflow::GraphDef* g_;
  const TF_GrapplerItem* item_;
  std::unordered_map<std::string, int> index_;
  std::vector<std::vector<Consumer>> consumers_;
  std::set<std::string> preserved_;
  std::unique_ptr<Shapes> shapes_;
};

void CopyToBuffer(const std::string& s, TF_Buffer* out) {
  void* data = std::malloc(s.size() ? s.size() : 1);
  std::memcpy(data, s.data(), s.size());
  out->data = data;
  out->length = s.size();
  out->data_deallocator = [](void* d, size_t) { std::free(d); };
}

void Optimize(void* /*optimizer*/, const TF_Buffer* graph_buf, const TF_GrapplerItem* item,
              TF_Buffer* optimized_graph_buf, TF_Status* status) {
  g_passes.fetch_add(1);
  TF_SetStatus(status, TF_OK, "");
  tensorflow::GraphDef graph;
  // Any problem: hand the graph back unchanged (never fail the meta-optimizer).
  if (FusionDisabled() || !graph.ParseFromArray(graph_buf->data, static_cast<int>(graph_buf->length))) {
    CopyToBuffer(std::string(static_cast<const char*>(graph_buf->data), graph_buf->length),
                 optimized_graph_buf);
    return;
  }
  if (const char* dump = std::getenv("METAL_OPS_FUSION_DUMP")) {
    // Debugging aid: append every graph the pass receives (text proto).
    if (FILE* f = std::fopen(dump, "a")) {
      const std::string text = graph.DebugString();
      std::fprintf(f, "# ---- pass %ld\n%s\n", g_passes.load(), text.c_str());
      std::fclose(f);
    }
  }
  Fuser fuser(&graph, item);
  const int rewrites = fuser.Run();
  if (rewrites == 0) {
    CopyToBuffer(std::string(static_cast<const char*>(graph_buf->data), graph_buf->length),
                 optimized_graph_buf);
    return;
  }
  g_rewrites.fetch_add(rewrites);
  std::string out;
  graph.SerializeToString(&out);
  CopyToBuffer(out, optimized_graph_buf);
}

}  // namespace
}  // namespace fusion
}  // namespace mo

extern "C" {

// Called by TensorFlow's pluggable-device loader. Must not fail (TF aborts on
// an error status), so it only fills in the structs.
__attribute__((visibility("default"))) void TF_InitGraph(TP_OptimizerRegistrationParams* params,
                                                         TF_Status* status) {
  mo::fusion::g_init_calls.fetch_add(1);
  params->struct_size = TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->major_version = 0;
  params->minor_version = 1;
  params->patch_version = 0;
  params->device_type = "CPU";
  params->optimizer_configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
  params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
  params->optimizer->create_func = nullptr;
  params->optimizer->optimize_func = mo::fusion::Optimize;
  params->optimizer->destroy_func = nullptr;
  TF_SetStatus(status, TF_OK, "");
}

// Introspection for metal_ops.fusion (through ctypes, RTLD_NOLOAD).
__attribute__((visibility("default"))) int MetalOpsFusionInitCalls() {
  return mo::fusion::g_init_calls.load();
}
__attribute__((visibility("default"))) long MetalOpsFusionRewriteCount() {
  return mo::fusion::g_rewrites.load();
}
// Whether the pass treats oneDNN as on in this process (OneDnnOptsOn; tests).
__attribute__((visibility("default"))) int MetalOpsFusionOneDnnOn() {
  return mo::fusion::OneDnnOptsOn() ? 1 : 0;
}
__attribute__((visibility("default"))) long MetalOpsFusionPassCount() {
  return mo::fusion::g_passes.load();
}

}  // extern "C"

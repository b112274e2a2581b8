// MetalOpsFusedConv2D and MetalOpsFusedActivationGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), shader-free, through the shared glue
// (metal_kernel.h): each distinct (shapes, attrs, device) is ONE MPSGraph
// (built and encoded in fused_conv2d_metal.mm), compiled once, outside the
// stream's queue, into an executable kept in a bounded cache (least recently
// used dropped: fused_conv2d.h's MPSGraph rules), then encoded on the
// TF_MetalStream's command buffer inside its queue (KernelCall::EncodeOnStream).
// No Metal plans (the CPU kernels compute on the CPU): macOS builds only.
//
// What has run where: docs/METAL_COMPAT.md and docs/FUSED_CONV2D.md.
#if defined(__APPLE__)
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/fused_conv2d/fused_conv2d.h"
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;
using mo::metal::GraphRequest;

// A graph of the cache: compiled once (under `once`), or why it could not be.
struct CachedGraph {
  std::once_flag once;
  std::shared_ptr<mo::metal::CompiledGraph> graph;
  std::string error;
};

// Process-wide cache of compiled graphs, at most kGraphCacheCapacity, the
// least recently used dropped (never destroyed itself: kernels may run during
// exit). The mutex guards the cache only: each graph compiles once under its
// own once_flag, so a compile blocks only callers of that same graph; a
// failure stays cached with its reason. A dropped graph lives on while a call
// holds it and until the command buffers it was encoded on complete
// (EncodeGraph).
std::mutex g_cache_mutex;
auto* g_cache = new mo::metal::LruCache<CachedGraph>(mo::metal::kGraphCacheCapacity);

// Compiles (or finds) the graph of `request`, outside the stream's queue,
// then encodes it on the stream's command buffer with the tensors' buffers.
// `inputs` and `output` are all non-empty.
void RunGraph(mo::metal::KernelCall& call, const std::string& op, const std::vector<std::string>& attrs,
              GraphRequest request, const std::vector<TF_Tensor*>& inputs, TF_Tensor* output) {
  mo::mtl::Device* device = call.Device();
  if (device == nullptr) return;
  std::vector<mo::mtl::Buffer*> buffers;
  for (TF_Tensor* t : inputs) {
    request.input_shapes.push_back(DimsOf(t));
    buffers.push_back(call.BufferOf(t));
  }
  request.output_shape = DimsOf(output);
  mo::mtl::Buffer* out = call.BufferOf(output);
  const std::string key = mo::metal::GraphKey(op, reinterpret_cast<uintptr_t>(device), attrs, request.input_shapes,
                                              request.output_shape);
  std::shared_ptr<CachedGraph> cached;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    cached = g_cache->GetOrMake(key, [] { return std::make_shared<CachedGraph>(); });
  }
  std::call_once(cached->once, [&] { cached->graph = mo::metal::CompileGraph(request, *device, &cached->error); });
  if (cached->graph == nullptr) {
    call.Refuse("fused_conv2d", "MPSGraph could not compile the graph " + key + ": " + cached->error);
    return;
  }
  call.EncodeOnStream("MPSGraph " + op, [&](mo::mtl::CommandBuffer& command_buffer) {
    return mo::metal::EncodeGraph(cached->graph, command_buffer, buffers, *out);
  });
}

// ---- MetalOpsFusedConv2D ----------------------------------------------------------------
struct FusedConvKernel {
  mo::fused_conv2d::Attrs attrs;
  std::vector<std::string> attr_key;  // the graph key's attribute pieces
};

void* FusedConvCreate(TF_OpKernelConstruction* ctx) {
  auto* k = new FusedConvKernel;
  mo::metal::AttrReader reader(ctx);
  if (reader.Check(mo::fused_conv2d::ReadAttrs(reader.Getter(), &k->attrs))) {
    k->attr_key = mo::metal::ConvGraphAttrs(k->attrs);
  }
  return k;
}

void FusedConvDelete(void* k) { delete static_cast<FusedConvKernel*>(k); }

void FusedConv(void* kernel_ptr, mo::metal::KernelCall& call) {
  const FusedConvKernel& k = *static_cast<const FusedConvKernel*>(kernel_ptr);
  const mo::fused_conv2d::Attrs& a = k.attrs;
  const std::vector<TF_Tensor*> inputs = call.Inputs(2 + static_cast<int>(a.num_bias + a.num_residual));
  if (!call.ok()) return;
  mo::fused_conv2d::ConvGeometry geo;
  if (!call.Check(mo::fused_conv2d::Geometry(a, DimsOf(inputs[0]), DimsOf(inputs[1]), &geo))) return;
  const std::vector<int64_t> out_dims = geo.output_dims();
  if (a.num_bias == 1 && !call.Check(mo::fused_conv2d::Bias(DimsOf(inputs[2]), geo.out_depth))) return;
  if (a.num_residual == 1 && !call.Check(mo::fused_conv2d::Residual(DimsOf(inputs[2 + a.num_bias]), out_dims))) return;
  TF_Tensor* output = call.Output(0, TF_FLOAT, out_dims);
  if (!call.ok() || TF_TensorElementCount(output) == 0) return;
  GraphRequest request;
  request.conv = a;
  if (TF_TensorElementCount(inputs[0]) == 0 || TF_TensorElementCount(inputs[1]) == 0) {
    // No taps (zero input channels, or an empty input under explicit padding)
    // sum nothing: the output is act(0 + bias + residual). The empty input and
    // filter are not buffers, so the graph takes only the bias and residual.
    request.kind = GraphRequest::kNoTaps;
    RunGraph(call, "conv_no_taps", k.attr_key, request, {inputs.begin() + 2, inputs.end()}, output);
    return;
  }
  RunGraph(call, "conv", k.attr_key, request, inputs, output);
}

// ---- MetalOpsFusedActivationGrad: backprops = gradients * f'(z), f' from y (or z) -------
using ActGradKernel = mo::fused_activation_grad::Attrs;

void ActGrad(void* kernel_ptr, mo::metal::KernelCall& call) {
  const ActGradKernel& k = *static_cast<const ActGradKernel*>(kernel_ptr);
  const std::vector<TF_Tensor*> inputs = call.Inputs(2 + static_cast<int>(k.num_features));
  if (!call.ok()) return;
  const auto dims = DimsOf(inputs[0]);
  const std::vector<int64_t> feature_dims = k.num_features == 1 ? DimsOf(inputs[2]) : std::vector<int64_t>();
  if (!call.Check(mo::fused_activation_grad::ActivationGradShapes(dims, DimsOf(inputs[1]),
                                                                  k.num_features == 1 ? &feature_dims : nullptr))) {
    return;
  }
  TF_Tensor* output = call.Output(0, TF_FLOAT, dims);
  if (!call.ok() || TF_TensorElementCount(output) == 0) return;
  GraphRequest request;
  request.kind = GraphRequest::kActGrad;
  request.grad = k;
  RunGraph(call, "actgrad", mo::metal::ActivationGradGraphAttrs(k), request, inputs, output);
}

const bool registered_conv = mo::metal::RegisterKernel("MetalOpsFusedConv2D", TF_FLOAT, &FusedConvCreate,
                                                       &mo::metal::Compute<FusedConv>, &FusedConvDelete);
const bool registered_grad = mo::metal::RegisterWithAttrs<ActGradKernel>("MetalOpsFusedActivationGrad", {TF_FLOAT},
                                                                         &mo::metal::Compute<ActGrad>);

}  // namespace
#endif  // __APPLE__

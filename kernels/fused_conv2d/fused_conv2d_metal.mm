// MetalOpsFusedConv2D and MetalOpsFusedActivationGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), shader-free: each distinct (shapes, attrs,
// device) builds ONE MPSGraph -- convolution2D + addition(s) + activation -- that
// is compiled once into an MPSGraphExecutable, kept in a bounded cache
// (least recently used dropped), and encoded on the TF_MetalStream's command
// buffer inside dispatch_sync on its queue.
//
// The activation formulas are those of kernels/common/activations.h, expressed
// with MPSGraph primitives (there is no shader to #include it into); the
// numbering (mo::Activation) is shared. The graph key, the cache and ELU's
// expm1 are plain C++ in mpsgraph_rules.h, unit-tested without a Mac.
//
// What has run where: docs/METAL_COMPAT.md and docs/FUSED_CONV2D.md.
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#import "kernels/metal/metal_kernel.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/common/activations.h"
#include "kernels/fused_conv2d/fused_conv2d_mpsgraph_rules.h"
#include "kernels/fused_conv2d/fused_conv2d_spec.h"

namespace {

NSArray<NSNumber*>* ShapeOf(const std::vector<int64_t>& dims) {
  NSMutableArray<NSNumber*>* shape = [NSMutableArray arrayWithCapacity:dims.size()];
  for (int64_t d : dims) [shape addObject:@(d)];
  return shape;
}

using mo::metal::DimsOf;

// mpsgraph_rules.h's formulas (Expm1, Elu) built from graph operations.
struct GraphOps {
  using Value = MPSGraphTensor*;
  MPSGraph* g;
  Value Constant(float v) { return [g constantWithScalar:v dataType:MPSDataTypeFloat32]; }
  Value Add(Value a, Value b) { return [g additionWithPrimaryTensor:a secondaryTensor:b name:nil]; }
  Value Sub(Value a, Value b) { return [g subtractionWithPrimaryTensor:a secondaryTensor:b name:nil]; }
  Value Mul(Value a, Value b) { return [g multiplicationWithPrimaryTensor:a secondaryTensor:b name:nil]; }
  Value Abs(Value a) { return [g absoluteWithTensor:a name:nil]; }
  Value Exp(Value a) { return [g exponentWithTensor:a name:nil]; }
  Value Greater(Value a, Value b) { return [g greaterThanWithPrimaryTensor:a secondaryTensor:b name:nil]; }
  Value LessEqual(Value a, Value b) { return [g lessThanOrEqualToWithPrimaryTensor:a secondaryTensor:b name:nil]; }
  Value Select(Value p, Value a, Value b) {
    return [g selectWithPredicateTensor:p truePredicateTensor:a falsePredicateTensor:b name:nil];
  }
};

// y = f(z) with MPSGraph primitives (formulas: kernels/common/activations.h).
MPSGraphTensor* Activate(MPSGraph* g, MPSGraphTensor* z, int act, float alpha) {
  switch (act) {
    case mo::kActRelu:
      return [g reLUWithTensor:z name:nil];
    case mo::kActRelu6:
      return [g clampWithTensor:z
                 minValueTensor:[g constantWithScalar:0.0 dataType:MPSDataTypeFloat32]
                 maxValueTensor:[g constantWithScalar:6.0 dataType:MPSDataTypeFloat32]
                           name:nil];
    case mo::kActElu: {
      GraphOps ops{g};
      return mo::metal::Elu(ops, z);  // expm1 to a few ulp: exp(z) - 1 loses every digit for small |z|
    }
    case mo::kActLeakyRelu:
      return [g leakyReLUWithTensor:z alpha:alpha name:nil];
    case mo::kActSigmoid:
      return [g sigmoidWithTensor:z name:nil];
    case mo::kActTanh:
      return [g tanhWithTensor:z name:nil];
    case mo::kActSwish:
      return [g multiplicationWithPrimaryTensor:z
                                secondaryTensor:[g sigmoidWithTensor:z name:nil]
                                           name:nil];
    default:
      return z;
  }
}

// A compiled graph and the order of its inputs, or why it could not be built.
struct CachedGraph {
  std::once_flag once;
  MPSGraphExecutable* executable = nil;
  std::string error;  // set when executable is nil
  std::vector<std::vector<int64_t>> input_shapes;
  // feed_order[k]: which of our inputs is the executable's k-th feed tensor
  // (an executable's feedTensors order is its own, not the placeholders').
  std::vector<size_t> feed_order;
};

// Process-wide cache of compiled graphs, at most kGraphCacheCapacity, the
// least recently used dropped (never destroyed itself: kernels may run during
// exit). The mutex guards the cache only: each graph compiles once under its
// own once_flag, outside the stream's queue, so a compile blocks only callers
// of that same graph; a failure stays cached with its reason. A dropped graph
// lives on while a call holds it and until the command buffers it was encoded
// on complete (RunGraph).
std::mutex g_cache_mutex;
mo::metal::LruCache<CachedGraph>* g_cache = new mo::metal::LruCache<CachedGraph>(mo::metal::kGraphCacheCapacity);

// Compiles `build` over float32 placeholders of `input_shapes` into `cached`.
void Compile(const std::string& key, id<MTLDevice> device, const std::vector<std::vector<int64_t>>& input_shapes,
             MPSGraphTensor* (^build)(MPSGraph*, NSArray<MPSGraphTensor*>*), CachedGraph* cached) {
  NSString* reason = nil;
  @try {
    MPSGraph* graph = [[MPSGraph alloc] init];
    NSMutableArray<MPSGraphTensor*>* placeholders = [NSMutableArray array];
    NSMutableDictionary<MPSGraphTensor*, MPSGraphShapedType*>* feeds = [NSMutableDictionary dictionary];
    for (const auto& shape : input_shapes) {
      MPSGraphTensor* p = [graph placeholderWithShape:ShapeOf(shape) dataType:MPSDataTypeFloat32 name:nil];
      [placeholders addObject:p];
      feeds[p] = [[MPSGraphShapedType alloc] initWithShape:ShapeOf(shape) dataType:MPSDataTypeFloat32];
    }
    MPSGraphTensor* result = build(graph, placeholders);
    MPSGraphCompilationDescriptor* desc = [[MPSGraphCompilationDescriptor alloc] init];
    cached->executable = [graph compileWithDevice:[MPSGraphDevice deviceWithMTLDevice:device]
                                            feeds:feeds
                                    targetTensors:@[ result ]
                                 targetOperations:nil
                            compilationDescriptor:desc];
    if (cached->executable != nil) {
      NSArray<MPSGraphTensor*>* feed_tensors = cached->executable.feedTensors;
      if (feed_tensors == nil) feed_tensors = placeholders;
      for (MPSGraphTensor* t in feed_tensors) {
        const NSUInteger index = [placeholders indexOfObject:t];
        if (index == NSNotFound) {
          reason = @"the executable has a feed that is not one of the placeholders";
          break;
        }
        cached->feed_order.push_back(index);
      }
    } else {
      reason = @"compileWithDevice returned nil";
    }
  } @catch (NSException* exception) {
    reason = [NSString stringWithFormat:@"%@: %@", exception.name, exception.reason];
  }
  if (cached->executable == nil || reason != nil) {
    cached->executable = nil;
    cached->error = "metal_ops: MPSGraph could not compile the graph " + key + ": " +
                    (reason != nil ? std::string(reason.UTF8String) : std::string("unknown reason"));
    return;
  }
  cached->input_shapes = input_shapes;
}

// The executable for `key` on `device`, compiled on first use; nullptr with
// the call failed (the same message every time) when MPSGraph cannot build it.
std::shared_ptr<CachedGraph> GetOrBuild(mo::metal::KernelCall& call, const std::string& key, id<MTLDevice> device,
                                        const std::vector<std::vector<int64_t>>& input_shapes,
                                        MPSGraphTensor* (^build)(MPSGraph*, NSArray<MPSGraphTensor*>*)) {
  std::shared_ptr<CachedGraph> cached;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    cached = g_cache->GetOrMake(key, [] { return std::make_shared<CachedGraph>(); });
  }
  std::call_once(cached->once, [&] { Compile(key, device, input_shapes, build, cached.get()); });
  if (cached->executable == nil) {
    call.Fail(TF_INTERNAL, cached->error);
    return nullptr;
  }
  return cached;
}

// Compiles (or finds) the graph, outside the stream's queue, then encodes it
// on the stream's command buffer with the tensors' MTLBuffers. `inputs` and
// `output` are all non-empty.
void RunGraph(mo::metal::KernelCall& call, const std::string& op, const std::vector<std::string>& attrs,
              const std::vector<TF_Tensor*>& inputs, TF_Tensor* output,
              MPSGraphTensor* (^build)(MPSGraph*, NSArray<MPSGraphTensor*>*)) {
  std::vector<std::vector<int64_t>> shapes;
  for (TF_Tensor* t : inputs) shapes.push_back(DimsOf(t));
  const std::vector<int64_t> out_dims = DimsOf(output);
  id<MTLDevice> device = call.Device();
  if (device == nil) return;
  const std::string key = mo::metal::GraphKey(op, device.registryID, attrs, shapes, out_dims);
  std::shared_ptr<CachedGraph> cached = GetOrBuild(call, key, device, shapes, build);
  if (cached == nullptr) return;
  call.Encode([&](mo::metal::Encoder& e) {
    NSMutableArray<MPSGraphTensorData*>* in_data = [NSMutableArray array];
    for (size_t i : cached->feed_order) {
      [in_data addObject:[[MPSGraphTensorData alloc] initWithMTLBuffer:mo::metal::Encoder::BufferOf(inputs[i])
                                                                 shape:ShapeOf(cached->input_shapes[i])
                                                              dataType:MPSDataTypeFloat32]];
    }
    MPSGraphTensorData* out_data =
        [[MPSGraphTensorData alloc] initWithMTLBuffer:mo::metal::Encoder::BufferOf(output)
                                                shape:ShapeOf(out_dims)
                                             dataType:MPSDataTypeFloat32];
    // tensorflow-metal 1.2.0's command buffers are MPSCommandBuffers, which
    // MPSGraph encodes into (and may commit and replace). Any other stream is
    // not one this code was written for: fail before encoding anything.
    if (![e.command_buffer() isKindOfClass:[MPSCommandBuffer class]]) {
      const std::string message = std::string("metal_ops: ") + op +
                                  " needs the stream's command buffer to be an MPSCommandBuffer (as tensorflow-metal "
                                  "1.2.0's are); this stream gave a " +
                                  NSStringFromClass([e.command_buffer() class]).UTF8String;
      TF_SetStatus(e.status(), TF_UNIMPLEMENTED, message.c_str());
      return;
    }
    MPSCommandBuffer* mps_cb = (MPSCommandBuffer*)e.ExternalEncoding("MPSGraph " + op);
    [cached->executable encodeToCommandBuffer:mps_cb
                                  inputsArray:in_data
                                 resultsArray:@[ out_data ]
                          executionDescriptor:nil];
    // The cache may drop this graph before the GPU has run it: the command
    // buffer holds it until then (MPSGraph may have committed earlier ones and
    // continued on a new one; this is the last, completing after them).
    std::shared_ptr<CachedGraph> in_flight = cached;
    [mps_cb addCompletedHandler:^(id<MTLCommandBuffer>) {
      (void)in_flight;
    }];
  });
}

// ---------------------------------------------------------------------------
// MetalOpsFusedConv2D
// ---------------------------------------------------------------------------
struct FusedConvKernel {
  mo::fused_conv2d::ConvAttrs attrs;
  std::vector<std::string> attr_key;  // the graph key's attribute pieces
};

void* FusedConvCreate(TF_OpKernelConstruction* ctx) {
  auto* k = new FusedConvKernel;
  mo::metal::AttrReader reader(ctx);
  if (!reader.Check(mo::fused_conv2d::ReadAttrs(reader.Getter(), &k->attrs))) return k;
  k->attr_key = mo::metal::ConvGraphAttrs(k->attrs);
  return k;
}

void FusedConvDelete(void* k) { delete static_cast<FusedConvKernel*>(k); }

void FusedConv(void* kernel_ptr, mo::metal::KernelCall& call) {
  const FusedConvKernel& k = *static_cast<const FusedConvKernel*>(kernel_ptr);
  const mo::fused_conv2d::ConvAttrs& a = k.attrs;
  std::vector<TF_Tensor*> inputs;
  const int num_inputs = 2 + static_cast<int>(a.num_bias + a.num_residual);
  for (int i = 0; i < num_inputs; ++i) inputs.push_back(call.Input(i));
  if (!call.ok()) return;
  mo::fused_conv2d::ConvGeometry geo;
  if (!call.Check(mo::fused_conv2d::Geometry(a, DimsOf(inputs[0]), DimsOf(inputs[1]), &geo))) return;
  const std::vector<int64_t> out_dims = geo.output_dims();
  if (a.num_bias == 1 && !call.Check(mo::fused_conv2d::Bias(DimsOf(inputs[2]), geo.out_depth))) return;
  if (a.num_residual == 1 && !call.Check(mo::fused_conv2d::Residual(DimsOf(inputs[2 + a.num_bias]), out_dims))) return;
  TF_Tensor* output = call.Output(0, TF_FLOAT, out_dims);
  if (!call.ok() || TF_TensorElementCount(output) == 0) return;
  const mo::fused_conv2d::ConvAttrs kc = a;
  const std::vector<std::string>& attrs = k.attr_key;
  if (TF_TensorElementCount(inputs[0]) == 0 || TF_TensorElementCount(inputs[1]) == 0) {
    // No taps (zero input channels, or an empty input under explicit padding)
    // sum nothing: the output is
    // act(0 + bias + residual). The empty input and filter are not buffers, so
    // the graph takes only the bias and residual.
    std::vector<TF_Tensor*> terms(inputs.begin() + 2, inputs.end());
    const std::vector<int64_t> shape = out_dims;
    RunGraph(call, "conv_no_taps", attrs, terms, output,
             ^MPSGraphTensor*(MPSGraph* g, NSArray<MPSGraphTensor*>* in) {
               MPSGraphTensor* z = [g constantWithScalar:0.0 shape:ShapeOf(shape) dataType:MPSDataTypeFloat32];
               for (MPSGraphTensor* term in in) z = [g additionWithPrimaryTensor:z secondaryTensor:term name:nil];
               return Activate(g, z, kc.act, kc.alpha);
             });
    return;
  }
  RunGraph(call, "conv", attrs, inputs, output, ^MPSGraphTensor*(MPSGraph* g, NSArray<MPSGraphTensor*>* in) {
    const bool pad = kc.padding == mo::fused_conv2d::Padding::kExplicit;
    MPSGraphConvolution2DOpDescriptor* d = [MPSGraphConvolution2DOpDescriptor
        descriptorWithStrideInX:kc.stride_cols
                      strideInY:kc.stride_rows
                dilationRateInX:kc.dilation_cols
                dilationRateInY:kc.dilation_rows
                         groups:1
                    paddingLeft:pad ? kc.pad_left : 0
                   paddingRight:pad ? kc.pad_right : 0
                     paddingTop:pad ? kc.pad_top : 0
                  paddingBottom:pad ? kc.pad_bottom : 0
                   paddingStyle:kc.padding == mo::fused_conv2d::Padding::kSame    ? MPSGraphPaddingStyleTF_SAME
                                : kc.padding == mo::fused_conv2d::Padding::kValid ? MPSGraphPaddingStyleTF_VALID
                                                                                  : MPSGraphPaddingStyleExplicit
                     dataLayout:MPSGraphTensorNamedDataLayoutNHWC
                  weightsLayout:MPSGraphTensorNamedDataLayoutHWIO];
    MPSGraphTensor* z = [g convolution2DWithSourceTensor:in[0] weightsTensor:in[1] descriptor:d name:nil];
    NSUInteger next = 2;
    if (kc.num_bias == 1) z = [g additionWithPrimaryTensor:z secondaryTensor:in[next++] name:nil];  // broadcasts [C]
    if (kc.num_residual == 1) z = [g additionWithPrimaryTensor:z secondaryTensor:in[next++] name:nil];
    return Activate(g, z, kc.act, kc.alpha);
  });
}

// ---------------------------------------------------------------------------
// MetalOpsFusedActivationGrad: backprops = gradients * f'(z), f' from y (or z).
// ---------------------------------------------------------------------------
using ActGradKernel = mo::fused_conv2d::ActivationGradAttrs;

// f'(.) with MPSGraph primitives, mirroring activation_derivative_from_output /
// activation_derivative_from_input of kernels/common/activations.h.
MPSGraphTensor* Derivative(MPSGraph* g, MPSGraphTensor* y, MPSGraphTensor* z, int act, float alpha) {
  MPSGraphTensor* zero = [g constantWithScalar:0.0 dataType:MPSDataTypeFloat32];
  MPSGraphTensor* one = [g constantWithScalar:1.0 dataType:MPSDataTypeFloat32];
  MPSGraphTensor* six = [g constantWithScalar:6.0 dataType:MPSDataTypeFloat32];
  auto select = ^MPSGraphTensor*(MPSGraphTensor* pred, MPSGraphTensor* a, MPSGraphTensor* b) {
    return [g selectWithPredicateTensor:pred truePredicateTensor:a falsePredicateTensor:b name:nil];
  };
  auto gt = ^MPSGraphTensor*(MPSGraphTensor* a, MPSGraphTensor* b) {
    return [g greaterThanWithPrimaryTensor:a secondaryTensor:b name:nil];
  };
  switch (act) {
    case mo::kActRelu: return select(gt(y, zero), one, zero);
    case mo::kActRelu6:
      return select([g logicalANDWithPrimaryTensor:gt(y, zero)
                                   secondaryTensor:[g lessThanWithPrimaryTensor:y secondaryTensor:six name:nil]
                                              name:nil],
                    one, zero);
    case mo::kActElu: return select(gt(y, zero), one, [g additionWithPrimaryTensor:y secondaryTensor:one name:nil]);
    case mo::kActLeakyRelu: {
      MPSGraphTensor* a = [g constantWithScalar:alpha dataType:MPSDataTypeFloat32];
      return select(gt(z != nil ? z : y, zero), one, a);
    }
    case mo::kActSigmoid:
      return [g multiplicationWithPrimaryTensor:y
                                secondaryTensor:[g subtractionWithPrimaryTensor:one secondaryTensor:y name:nil]
                                           name:nil];
    case mo::kActTanh:
      return [g subtractionWithPrimaryTensor:one
                             secondaryTensor:[g multiplicationWithPrimaryTensor:y secondaryTensor:y name:nil]
                                        name:nil];
    case mo::kActSwish: {  // s * (1 + z * (1 - s))
      MPSGraphTensor* s = [g sigmoidWithTensor:z name:nil];
      MPSGraphTensor* t = [g multiplicationWithPrimaryTensor:z
                                             secondaryTensor:[g subtractionWithPrimaryTensor:one secondaryTensor:s name:nil]
                                                        name:nil];
      return [g multiplicationWithPrimaryTensor:s secondaryTensor:[g additionWithPrimaryTensor:one secondaryTensor:t name:nil] name:nil];
    }
    default: return one;
  }
}

void ActGrad(void* kernel_ptr, mo::metal::KernelCall& call) {
  const ActGradKernel& k = *static_cast<const ActGradKernel*>(kernel_ptr);
  std::vector<TF_Tensor*> inputs;
  for (int i = 0; i < 2 + k.num_features; ++i) inputs.push_back(call.Input(i));
  if (!call.ok()) return;
  const auto dims = DimsOf(inputs[0]);
  const std::vector<int64_t> feature_dims = k.num_features == 1 ? DimsOf(inputs[2]) : std::vector<int64_t>();
  if (!call.Check(mo::fused_conv2d::ActivationGradShapes(dims, DimsOf(inputs[1]),
                                                         k.num_features == 1 ? &feature_dims : nullptr))) {
    return;
  }
  TF_Tensor* output = call.Output(0, TF_FLOAT, dims);
  if (!call.ok() || TF_TensorElementCount(output) == 0) return;
  const int act = k.act;
  const float alpha = k.alpha;
  RunGraph(call, "actgrad", mo::metal::ActivationGradGraphAttrs(k), inputs, output,
           ^MPSGraphTensor*(MPSGraph* g, NSArray<MPSGraphTensor*>* in) {
             MPSGraphTensor* z = in.count > 2 ? in[2] : nil;
             return [g multiplicationWithPrimaryTensor:in[0] secondaryTensor:Derivative(g, in[1], z, act, alpha)
                                                  name:nil];
           });
}

bool Register() {
  mo::metal::RegisterKernel("MetalOpsFusedConv2D", TF_FLOAT, &FusedConvCreate, &mo::metal::Compute<FusedConv>,
                            &FusedConvDelete);
  mo::metal::RegisterWithAttrs<ActGradKernel>("MetalOpsFusedActivationGrad", {TF_FLOAT}, &mo::metal::Compute<ActGrad>);
  return true;
}

const bool registered = Register();

}  // namespace

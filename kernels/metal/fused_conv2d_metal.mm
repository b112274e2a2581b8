// MetalOpsFusedConv2D and MetalOpsFusedActivationGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), shader-free: each distinct (shapes, attrs,
// device) builds ONE MPSGraph -- convolution2D + addition(s) + activation -- that
// is compiled once into an MPSGraphExecutable, cached, and encoded on the
// TF_MetalStream's command buffer inside dispatch_sync on its queue.
//
// The activation formulas are those of kernels/common/activations.h, expressed
// with MPSGraph primitives (there is no shader to #include it into); the
// numbering (mo::Activation) is shared.
//
// NOT compiled or run on Linux (no Mac in this environment): verified by review
// and by the macOS workflow (.github/workflows/macos.yml). See docs/FUSION.md.
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#import "kernels/metal/metal_context.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/common/activations.h"

namespace {

constexpr const char* kActivationNames[] = {"none",       "relu",    "relu6", "elu",
                                            "leaky_relu", "sigmoid", "tanh",  "swish"};

int ActivationFromName(const std::string& s) {
  for (int i = 0; i < 8; ++i)
    if (s == kActivationNames[i]) return i;
  return -1;
}

std::string GetStringAttr(TF_OpKernelConstruction* ctx, const char* name, TF_Status* status) {
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total_size, status);
  if (TF_GetCode(status) != TF_OK) return "";
  std::string value(static_cast<size_t>(total_size), '\0');
  TF_OpKernelConstruction_GetAttrString(ctx, name, value.data(), total_size, status);
  return value;
}

std::vector<int64_t> GetIntListAttr(TF_OpKernelConstruction* ctx, const char* name,
                                    TF_Status* status) {
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total_size, status);
  if (TF_GetCode(status) != TF_OK || list_size <= 0) return {};
  std::vector<int64_t> values(static_cast<size_t>(list_size));
  TF_OpKernelConstruction_GetAttrInt64List(ctx, name, values.data(), list_size, status);
  return values;
}

NSArray<NSNumber*>* ShapeOf(const std::vector<int64_t>& dims) {
  NSMutableArray<NSNumber*>* shape = [NSMutableArray arrayWithCapacity:dims.size()];
  for (int64_t d : dims) [shape addObject:@(d)];
  return shape;
}

std::vector<int64_t> DimsOf(TF_Tensor* t) {
  std::vector<int64_t> dims(TF_NumDims(t));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = TF_Dim(t, static_cast<int>(d));
  return dims;
}

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
      MPSGraphTensor* zero = [g constantWithScalar:0.0 dataType:MPSDataTypeFloat32];
      MPSGraphTensor* one = [g constantWithScalar:1.0 dataType:MPSDataTypeFloat32];
      MPSGraphTensor* em1 = [g subtractionWithPrimaryTensor:[g exponentWithTensor:z name:nil]
                                            secondaryTensor:one
                                                       name:nil];
      return [g selectWithPredicateTensor:[g greaterThanWithPrimaryTensor:z secondaryTensor:zero name:nil]
                      truePredicateTensor:z
                     falsePredicateTensor:em1
                                     name:nil];
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

// A compiled graph and the order of its inputs.
struct CachedGraph {
  MPSGraphExecutable* executable = nil;
  std::vector<std::vector<int64_t>> input_shapes;
  // feed_order[k]: which of our inputs is the executable's k-th feed tensor
  // (an executable's feedTensors order is its own, not the placeholders').
  std::vector<size_t> feed_order;
};

// Process-wide cache: one executable per key, built under the mutex on first use.
std::mutex g_cache_mutex;
std::unordered_map<std::string, std::shared_ptr<CachedGraph>>* g_cache =
    new std::unordered_map<std::string, std::shared_ptr<CachedGraph>>();

std::string KeyOf(id<MTLDevice> device, const std::string& op, const std::vector<std::vector<int64_t>>& shapes,
                  const std::string& attrs) {
  std::string key = op + "|" + std::to_string(reinterpret_cast<uintptr_t>((__bridge void*)device)) + "|" + attrs;
  for (const auto& s : shapes) {
    key += "|";
    for (int64_t d : s) key += std::to_string(d) + ",";
  }
  return key;
}

std::shared_ptr<CachedGraph> GetOrBuild(const std::string& key, id<MTLDevice> device,
                                        const std::vector<std::vector<int64_t>>& input_shapes,
                                        MPSGraphTensor* (^build)(MPSGraph*, NSArray<MPSGraphTensor*>*)) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  auto it = g_cache->find(key);
  if (it != g_cache->end()) return it->second;
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
  auto cached = std::make_shared<CachedGraph>();
  cached->executable = [graph compileWithDevice:[MPSGraphDevice deviceWithMTLDevice:device]
                                          feeds:feeds
                                  targetTensors:@[ result ]
                               targetOperations:nil
                          compilationDescriptor:desc];
  cached->input_shapes = input_shapes;
  NSArray<MPSGraphTensor*>* feed_tensors = cached->executable.feedTensors;
  if (feed_tensors == nil) feed_tensors = placeholders;
  for (MPSGraphTensor* t in feed_tensors) cached->feed_order.push_back([placeholders indexOfObject:t]);
  (*g_cache)[key] = cached;
  return cached;
}

// Encodes `cached` on the stream: inputs/outputs are the tensors' MTLBuffers.
void Encode(id<TF_MetalStream> stream, const CachedGraph& cached, const std::vector<TF_Tensor*>& inputs,
            TF_Tensor* output, const std::vector<int64_t>& out_dims) {
  NSMutableArray<MPSGraphTensorData*>* in_data = [NSMutableArray array];
  for (size_t i : cached.feed_order) {
    [in_data addObject:[[MPSGraphTensorData alloc] initWithMTLBuffer:mo::metal::BufferOf(inputs[i])
                                                               shape:ShapeOf(cached.input_shapes[i])
                                                            dataType:MPSDataTypeFloat32]];
  }
  MPSGraphTensorData* out_data = [[MPSGraphTensorData alloc] initWithMTLBuffer:mo::metal::BufferOf(output)
                                                                         shape:ShapeOf(out_dims)
                                                                      dataType:MPSDataTypeFloat32];
  MPSGraphExecutable* exe = cached.executable;
  dispatch_sync(stream.queue, ^() {
    id<MTLCommandBuffer> cb = stream.currentCommandBuffer;
    // tensorflow-metal's command buffer is an MPSCommandBuffer; wrap otherwise.
    MPSCommandBuffer* mps_cb = [cb isKindOfClass:[MPSCommandBuffer class]]
                                   ? (MPSCommandBuffer*)cb
                                   : [MPSCommandBuffer commandBufferWithCommandBuffer:cb];
    [exe encodeToCommandBuffer:mps_cb
                   inputsArray:in_data
                  resultsArray:@[ out_data ]
           executionDescriptor:nil];
    [stream commit];
  });
}

// ---------------------------------------------------------------------------
// MetalOpsFusedConv2D
// ---------------------------------------------------------------------------
struct FusedConvKernel {
  int64_t num_bias = 0, num_residual = 0;
  std::vector<int64_t> strides, dilations, explicit_paddings;
  std::string padding;
  int act = 0;
  float alpha = 0.2f;
  std::string attr_key;
};

void* FusedConvCreate(TF_OpKernelConstruction* ctx) {
  auto* k = new FusedConvKernel;
  TF_Status* status = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrInt64(ctx, "num_bias", &k->num_bias, status);
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrInt64(ctx, "num_residual", &k->num_residual, status);
  if (TF_GetCode(status) == TF_OK) k->strides = GetIntListAttr(ctx, "strides", status);
  if (TF_GetCode(status) == TF_OK) k->dilations = GetIntListAttr(ctx, "dilations", status);
  if (TF_GetCode(status) == TF_OK) k->padding = GetStringAttr(ctx, "padding", status);
  if (TF_GetCode(status) == TF_OK && k->padding == "EXPLICIT")
    k->explicit_paddings = GetIntListAttr(ctx, "explicit_paddings", status);
  std::string act;
  if (TF_GetCode(status) == TF_OK) act = GetStringAttr(ctx, "activation", status);
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrFloat(ctx, "leaky_relu_alpha", &k->alpha, status);
  if (TF_GetCode(status) == TF_OK) {
    k->act = ActivationFromName(act);
    if (k->strides.size() != 4 || k->dilations.size() != 4 || k->act < 0 ||
        (k->padding == "EXPLICIT" && k->explicit_paddings.size() != 8)) {
      TF_SetStatus(status, TF_INVALID_ARGUMENT,
                   "MetalOpsFusedConv2D: strides and dilations need 4 entries, explicit_paddings 8 "
                   "when padding is EXPLICIT, and activation must be known");
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  k->attr_key = k->padding + "/" + act + "/" + std::to_string(k->alpha);
  for (int64_t v : k->strides) k->attr_key += "s" + std::to_string(v);
  for (int64_t v : k->dilations) k->attr_key += "d" + std::to_string(v);
  for (int64_t v : k->explicit_paddings) k->attr_key += "p" + std::to_string(v);
  TF_DeleteStatus(status);
  return k;
}

void FusedConvDelete(void* k) { delete static_cast<FusedConvKernel*>(k); }

int64_t OutSize(int64_t in, int64_t k, int64_t stride, int64_t dil, const std::string& padding,
                int64_t pad_before, int64_t pad_after) {
  const int64_t keff = (k - 1) * dil + 1;
  if (padding == "SAME") return (in + stride - 1) / stride;
  if (padding == "VALID") return in >= keff ? (in - keff) / stride + 1 : -1;
  const int64_t padded = in + pad_before + pad_after;
  return padded >= keff ? (padded - keff) / stride + 1 : -1;
}

void FusedConvCompute(void* kernel_ptr, TF_OpKernelContext* ctx) {
  const auto* k = static_cast<const FusedConvKernel*>(kernel_ptr);
  TF_Status* status = TF_NewStatus();
  std::vector<TF_Tensor*> inputs;
  const int num_inputs = 2 + static_cast<int>(k->num_bias + k->num_residual);
  for (int i = 0; i < num_inputs && TF_GetCode(status) == TF_OK; ++i) {
    TF_Tensor* t = nullptr;
    TF_GetInput(ctx, i, &t, status);
    inputs.push_back(t);
  }
  TF_Tensor* output = nullptr;
  std::vector<int64_t> out_dims;
  if (TF_GetCode(status) == TF_OK) {
    const auto x = DimsOf(inputs[0]), w = DimsOf(inputs[1]);
    if (x.size() != 4) {
      TF_SetStatus(status, TF_INVALID_ARGUMENT, "input must be 4-dimensional [batch, height, width, channels]");
    } else if (w.size() != 4) {
      TF_SetStatus(status, TF_INVALID_ARGUMENT, "filter must be 4-dimensional [height, width, in_channels, out_channels]");
    } else if (w[2] != x[3]) {
      const std::string msg = "filter in_channels (" + std::to_string(w[2]) +
                              ") must equal the input's channels (" + std::to_string(x[3]) + ")";
      TF_SetStatus(status, TF_INVALID_ARGUMENT, msg.c_str());
    } else {
      const int64_t pt = k->padding == "EXPLICIT" ? k->explicit_paddings[2] : 0;
      const int64_t pb = k->padding == "EXPLICIT" ? k->explicit_paddings[3] : 0;
      const int64_t pl = k->padding == "EXPLICIT" ? k->explicit_paddings[4] : 0;
      const int64_t pr = k->padding == "EXPLICIT" ? k->explicit_paddings[5] : 0;
      const int64_t oh = OutSize(x[1], w[0], k->strides[1], k->dilations[1], k->padding, pt, pb);
      const int64_t ow = OutSize(x[2], w[1], k->strides[2], k->dilations[2], k->padding, pl, pr);
      if (oh < 0 || ow < 0) {
        TF_SetStatus(status, TF_INVALID_ARGUMENT, "input height/width is too small for the filter");
      } else {
        out_dims = {x[0], oh, ow, w[3]};
      }
      if (TF_GetCode(status) == TF_OK && k->num_bias == 1) {
        const auto b = DimsOf(inputs[2]);
        if (b.size() != 1 || b[0] != w[3])
          TF_SetStatus(status, TF_INVALID_ARGUMENT, "bias must have shape [out_channels]");
      }
      if (TF_GetCode(status) == TF_OK && k->num_residual == 1 &&
          DimsOf(inputs[2 + k->num_bias]) != out_dims) {
        TF_SetStatus(status, TF_INVALID_ARGUMENT, "residual must have the output's shape (no broadcasting)");
      }
    }
  }
  if (TF_GetCode(status) == TF_OK) {
    int64_t bytes = sizeof(float);
    for (int64_t d : out_dims) bytes *= d;
    output = TF_AllocateOutput(ctx, 0, TF_FLOAT, out_dims.data(), 4, bytes, status);
    if (TF_GetCode(status) == TF_OK && bytes > 0 && TF_TensorElementCount(inputs[0]) > 0 &&
        TF_TensorElementCount(inputs[1]) > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      if (TF_GetCode(status) == TF_OK) {
        std::vector<std::vector<int64_t>> shapes;
        for (auto* t : inputs) shapes.push_back(DimsOf(t));
        id<MTLDevice> device = stream.currentCommandBuffer.device;
        const std::string key = KeyOf(device, "conv", shapes, k->attr_key + "/" +
                                      std::to_string(k->num_bias) + std::to_string(k->num_residual));
        const FusedConvKernel kc = *k;
        auto cached = GetOrBuild(key, device, shapes, ^MPSGraphTensor*(MPSGraph* g, NSArray<MPSGraphTensor*>* in) {
          const bool explicit_pad = kc.padding == "EXPLICIT";
          MPSGraphConvolution2DOpDescriptor* d = [MPSGraphConvolution2DOpDescriptor
              descriptorWithStrideInX:kc.strides[2]
                            strideInY:kc.strides[1]
                      dilationRateInX:kc.dilations[2]
                      dilationRateInY:kc.dilations[1]
                               groups:1
                          paddingLeft:explicit_pad ? kc.explicit_paddings[4] : 0
                         paddingRight:explicit_pad ? kc.explicit_paddings[5] : 0
                           paddingTop:explicit_pad ? kc.explicit_paddings[2] : 0
                        paddingBottom:explicit_pad ? kc.explicit_paddings[3] : 0
                         paddingStyle:kc.padding == "SAME"    ? MPSGraphPaddingStyleTF_SAME
                                      : kc.padding == "VALID" ? MPSGraphPaddingStyleTF_VALID
                                                              : MPSGraphPaddingStyleExplicit
                           dataLayout:MPSGraphTensorNamedDataLayoutNHWC
                        weightsLayout:MPSGraphTensorNamedDataLayoutHWIO];
          MPSGraphTensor* z = [g convolution2DWithSourceTensor:in[0] weightsTensor:in[1] descriptor:d name:nil];
          NSUInteger next = 2;
          if (kc.num_bias == 1) z = [g additionWithPrimaryTensor:z secondaryTensor:in[next++] name:nil];  // broadcasts [C]
          if (kc.num_residual == 1) z = [g additionWithPrimaryTensor:z secondaryTensor:in[next++] name:nil];
          return Activate(g, z, kc.act, kc.alpha);
        });
        Encode(stream, *cached, inputs, output, out_dims);
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  for (auto* t : inputs) TF_DeleteTensor(t);
  TF_DeleteTensor(output);
  TF_DeleteStatus(status);
}

// ---------------------------------------------------------------------------
// MetalOpsFusedActivationGrad: backprops = gradients * f'(z), f' from y (or z).
// ---------------------------------------------------------------------------
struct ActGradKernel {
  int act = 0;
  float alpha = 0.2f;
  int64_t num_features = 0;
};

void* ActGradCreate(TF_OpKernelConstruction* ctx) {
  auto* k = new ActGradKernel;
  TF_Status* status = TF_NewStatus();
  const std::string act = GetStringAttr(ctx, "activation", status);
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrFloat(ctx, "leaky_relu_alpha", &k->alpha, status);
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrInt64(ctx, "num_features", &k->num_features, status);
  k->act = ActivationFromName(act);
  if (TF_GetCode(status) == TF_OK && (k->act < 0 || (k->num_features == 0 && !mo::activation_grad_uses_output(k->act, k->alpha))))
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "features (the pre-activation) are required for this activation");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return k;
}

void ActGradDelete(void* k) { delete static_cast<ActGradKernel*>(k); }

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

void ActGradCompute(void* kernel_ptr, TF_OpKernelContext* ctx) {
  const auto* k = static_cast<const ActGradKernel*>(kernel_ptr);
  TF_Status* status = TF_NewStatus();
  std::vector<TF_Tensor*> inputs;
  for (int i = 0; i < 2 + k->num_features && TF_GetCode(status) == TF_OK; ++i) {
    TF_Tensor* t = nullptr;
    TF_GetInput(ctx, i, &t, status);
    inputs.push_back(t);
  }
  TF_Tensor* output = nullptr;
  if (TF_GetCode(status) == TF_OK) {
    const auto dims = DimsOf(inputs[0]);
    for (auto* t : inputs)
      if (DimsOf(t) != dims) TF_SetStatus(status, TF_INVALID_ARGUMENT, "gradients, outputs and features must have one shape");
    if (TF_GetCode(status) == TF_OK)
      output = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims.data(), static_cast<int>(dims.size()),
                                 TF_TensorByteSize(inputs[0]), status);
    if (TF_GetCode(status) == TF_OK && TF_TensorElementCount(inputs[0]) > 0) {
      id<TF_MetalStream> stream = mo::metal::StreamOf(ctx, status);
      if (TF_GetCode(status) == TF_OK) {
        std::vector<std::vector<int64_t>> shapes;
        for (auto* t : inputs) shapes.push_back(DimsOf(t));
        id<MTLDevice> device = stream.currentCommandBuffer.device;
        const int act = k->act;
        const float alpha = k->alpha;
        const std::string key = KeyOf(device, "actgrad", shapes, std::to_string(act) + "/" + std::to_string(alpha));
        auto cached = GetOrBuild(key, device, shapes, ^MPSGraphTensor*(MPSGraph* g, NSArray<MPSGraphTensor*>* in) {
          MPSGraphTensor* z = in.count > 2 ? in[2] : nil;
          return [g multiplicationWithPrimaryTensor:in[0] secondaryTensor:Derivative(g, in[1], z, act, alpha) name:nil];
        });
        Encode(stream, *cached, inputs, output, dims);
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  for (auto* t : inputs) TF_DeleteTensor(t);
  TF_DeleteTensor(output);
  TF_DeleteStatus(status);
}

bool RegisterFusedConvMetalKernels() {
  struct Spec {
    const char* op;
    void* (*create)(TF_OpKernelConstruction*);
    void (*compute)(void*, TF_OpKernelContext*);
    void (*destroy)(void*);
  } specs[] = {{"MetalOpsFusedConv2D", &FusedConvCreate, &FusedConvCompute, &FusedConvDelete},
               {"MetalOpsFusedActivationGrad", &ActGradCreate, &ActGradCompute, &ActGradDelete}};
  for (const auto& s : specs) {
    TF_Status* status = TF_NewStatus();
    TF_KernelBuilder* builder = TF_NewKernelBuilder(s.op, "GPU", s.create, s.compute, s.destroy);
    TF_KernelBuilder_TypeConstraint(builder, "T", TF_FLOAT, status);
    if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder((std::string(s.op) + "Metal").c_str(), builder, status);
    TF_DeleteStatus(status);
  }
  return true;
}

const bool fused_conv_metal_kernels_registered = RegisterFusedConvMetalKernels();

}  // namespace

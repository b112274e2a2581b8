// FusedConv2D's and FusedActivationGrad's MPSGraph graphs, the Objective-C++
// behind fused_conv2d.h's CompileGraph and EncodeGraph (the C++ glue:
// fused_conv2d_metal.cc): each distinct request (kind, attributes, shapes,
// device) builds ONE MPSGraph -- convolution2D + addition(s) + activation, or
// the activation gradient -- compiled into an MPSGraphExecutable, then encoded
// on tensorflow-metal's command buffer. MPSGraph's graph building: the one
// part of the Metal glue that stays Objective-C++ beyond single Metal calls;
// the cache, the key and every check are C++ (fused_conv2d_metal.cc,
// fused_conv2d.h).
//
// The activation formulas are those of kernels/common/activations.h, expressed
// with MPSGraph primitives (there is no shader to #include it into); the
// numbering (mo::Activation) is shared. ELU's expm1 is plain C++ in
// fused_conv2d.h, unit-tested without a Mac.
//
// What has run where: docs/METAL_COMPAT.md and docs/FUSED_CONV2D.md.
#include "kernels/fused_conv2d/fused_conv2d.h"

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include "kernels/common/activations.h"
#import "kernels/metal/metal_device.h"

struct mo::metal::CompiledGraph {
  MPSGraphExecutable* executable = nil;
  // feed_order[k]: which input is the executable's k-th feed tensor (an
  // executable's feedTensors order is its own, not the placeholders').
  std::vector<size_t> feed_order;
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<int64_t> output_shape;
};

namespace mo {
namespace metal {

NSArray<NSNumber*>* ShapeOf(const std::vector<int64_t>& dims) {
  NSMutableArray<NSNumber*>* shape = [NSMutableArray arrayWithCapacity:dims.size()];
  for (int64_t d : dims) [shape addObject:@(d)];
  return shape;
}

namespace {

// fused_conv2d.h's MPSGraph formulas (Expm1, Elu) built from graph operations.
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
    case kActRelu:
      return [g reLUWithTensor:z name:nil];
    case kActRelu6:
      return [g clampWithTensor:z
                 minValueTensor:[g constantWithScalar:0.0 dataType:MPSDataTypeFloat32]
                 maxValueTensor:[g constantWithScalar:6.0 dataType:MPSDataTypeFloat32]
                           name:nil];
    case kActElu: {
      GraphOps ops{g};
      return Elu(ops, z);  // expm1 to a few ulp: exp(z) - 1 loses every digit for small |z|
    }
    case kActLeakyRelu:
      return [g leakyReLUWithTensor:z alpha:alpha name:nil];
    case kActSigmoid:
      return [g sigmoidWithTensor:z name:nil];
    case kActTanh:
      return [g tanhWithTensor:z name:nil];
    case kActSwish:
      return [g multiplicationWithPrimaryTensor:z
                                secondaryTensor:[g sigmoidWithTensor:z name:nil]
                                           name:nil];
    default:
      return z;
  }
}

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
    case kActRelu: return select(gt(y, zero), one, zero);
    case kActRelu6:
      return select([g logicalANDWithPrimaryTensor:gt(y, zero)
                                   secondaryTensor:[g lessThanWithPrimaryTensor:y secondaryTensor:six name:nil]
                                              name:nil],
                    one, zero);
    case kActElu: return select(gt(y, zero), one, [g additionWithPrimaryTensor:y secondaryTensor:one name:nil]);
    case kActLeakyRelu: {
      MPSGraphTensor* a = [g constantWithScalar:alpha dataType:MPSDataTypeFloat32];
      return select(gt(z != nil ? z : y, zero), one, a);
    }
    case kActSigmoid:
      return [g multiplicationWithPrimaryTensor:y
                                secondaryTensor:[g subtractionWithPrimaryTensor:one secondaryTensor:y name:nil]
                                           name:nil];
    case kActTanh:
      return [g subtractionWithPrimaryTensor:one
                             secondaryTensor:[g multiplicationWithPrimaryTensor:y secondaryTensor:y name:nil]
                                        name:nil];
    case kActSwish: {  // s * (1 + z * (1 - s))
      MPSGraphTensor* s = [g sigmoidWithTensor:z name:nil];
      MPSGraphTensor* t = [g multiplicationWithPrimaryTensor:z
                                             secondaryTensor:[g subtractionWithPrimaryTensor:one secondaryTensor:s name:nil]
                                                        name:nil];
      return [g multiplicationWithPrimaryTensor:s secondaryTensor:[g additionWithPrimaryTensor:one secondaryTensor:t name:nil] name:nil];
    }
    default: return one;
  }
}

// The graph of `r` over its placeholders `in`.
MPSGraphTensor* Build(const GraphRequest& r, MPSGraph* g, NSArray<MPSGraphTensor*>* in) {
  const fused_conv2d::Attrs& a = r.conv;
  if (r.kind == GraphRequest::kActGrad) {
    MPSGraphTensor* z = in.count > 2 ? in[2] : nil;
    return [g multiplicationWithPrimaryTensor:in[0] secondaryTensor:Derivative(g, in[1], z, r.grad.activation,
                                                                                  r.grad.leaky_relu_alpha)
                                         name:nil];
  }
  if (r.kind == GraphRequest::kNoTaps) {
    MPSGraphTensor* z = [g constantWithScalar:0.0 shape:ShapeOf(r.output_shape) dataType:MPSDataTypeFloat32];
    for (MPSGraphTensor* term in in) z = [g additionWithPrimaryTensor:z secondaryTensor:term name:nil];
    return Activate(g, z, a.activation, a.leaky_relu_alpha);
  }
  const fused_conv2d::Window kc = fused_conv2d::WindowOf(a);
  const bool pad = kc.padding == fused_conv2d::Padding::kExplicit;
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
                 paddingStyle:kc.padding == fused_conv2d::Padding::kSame    ? MPSGraphPaddingStyleTF_SAME
                              : kc.padding == fused_conv2d::Padding::kValid ? MPSGraphPaddingStyleTF_VALID
                                                                              : MPSGraphPaddingStyleExplicit
                   dataLayout:MPSGraphTensorNamedDataLayoutNHWC
                weightsLayout:MPSGraphTensorNamedDataLayoutHWIO];
  MPSGraphTensor* z = [g convolution2DWithSourceTensor:in[0] weightsTensor:in[1] descriptor:d name:nil];
  NSUInteger next = 2;
  if (a.num_bias == 1) z = [g additionWithPrimaryTensor:z secondaryTensor:in[next++] name:nil];  // broadcasts [C]
  if (a.num_residual == 1) z = [g additionWithPrimaryTensor:z secondaryTensor:in[next++] name:nil];
  return Activate(g, z, a.activation, a.leaky_relu_alpha);
}

}  // namespace

std::shared_ptr<CompiledGraph> CompileGraph(const GraphRequest& request, mtl::Device& device, std::string* error) {
  auto cached = std::make_shared<CompiledGraph>();
  NSString* reason = nil;
  @autoreleasepool {
    @try {
      MPSGraph* graph = [[MPSGraph alloc] init];
      NSMutableArray<MPSGraphTensor*>* placeholders = [NSMutableArray array];
      NSMutableDictionary<MPSGraphTensor*, MPSGraphShapedType*>* feeds = [NSMutableDictionary dictionary];
      for (const auto& shape : request.input_shapes) {
        MPSGraphTensor* p = [graph placeholderWithShape:ShapeOf(shape) dataType:MPSDataTypeFloat32 name:nil];
        [placeholders addObject:p];
        feeds[p] = [[MPSGraphShapedType alloc] initWithShape:ShapeOf(shape) dataType:MPSDataTypeFloat32];
      }
      MPSGraphTensor* result = Build(request, graph, placeholders);
      MPSGraphCompilationDescriptor* desc = [[MPSGraphCompilationDescriptor alloc] init];
      cached->executable = [graph compileWithDevice:[MPSGraphDevice deviceWithMTLDevice:MetalDeviceOf(device)]
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
      *error = reason != nil ? std::string(reason.UTF8String) : std::string("unknown reason");
      return nullptr;
    }
  }
  cached->input_shapes = request.input_shapes;
  cached->output_shape = request.output_shape;
  return cached;
}


// ---- a compiled graph encoded on tensorflow-metal's command buffer: the MPSGraph calls, nothing else


std::string EncodeGraph(const std::shared_ptr<CompiledGraph>& graph, mtl::CommandBuffer& command_buffer,
                        const std::vector<mtl::Buffer*>& inputs, mtl::Buffer& output) {
  @autoreleasepool {
    // tensorflow-metal 1.2.0's command buffers are MPSCommandBuffers, which
    // MPSGraph encodes into (and may commit and replace).
    id<MTLCommandBuffer> buffer = MetalCommandBufferOf(command_buffer);
    if (![(id)buffer isKindOfClass:[MPSCommandBuffer class]]) {
      return std::string("the stream's command buffer is a ") + NSStringFromClass([(id)buffer class]).UTF8String +
             ", not an MPSCommandBuffer (as tensorflow-metal 1.2.0's are)";
    }
    NSMutableArray<MPSGraphTensorData*>* in_data = [NSMutableArray array];
    for (size_t i : graph->feed_order) {
      [in_data addObject:[[MPSGraphTensorData alloc] initWithMTLBuffer:MetalBufferOf(*inputs[i])
                                                                 shape:ShapeOf(graph->input_shapes[i])
                                                              dataType:MPSDataTypeFloat32]];
    }
    MPSGraphTensorData* out_data = [[MPSGraphTensorData alloc] initWithMTLBuffer:MetalBufferOf(output)
                                                                           shape:ShapeOf(graph->output_shape)
                                                                        dataType:MPSDataTypeFloat32];
    MPSCommandBuffer* mps_buffer = (MPSCommandBuffer*)buffer;
    [graph->executable encodeToCommandBuffer:mps_buffer inputsArray:in_data resultsArray:@[ out_data ] executionDescriptor:nil];
    // The cache may drop this graph before the GPU has run it: the command
    // buffer holds it until then (MPSGraph may have committed earlier ones and
    // continued on a new one; this is the last, completing after them).
    std::shared_ptr<CompiledGraph> in_flight = graph;
    [mps_buffer addCompletedHandler:^(id<MTLCommandBuffer>) {
      (void)in_flight;
    }];
    return std::string();
  }
}

}  // namespace metal
}  // namespace mo

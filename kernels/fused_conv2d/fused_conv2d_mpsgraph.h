// FusedConv2D's and FusedActivationGrad's MPSGraph kernels: what the C++ glue
// (fused_conv2d_metal.cc) asks of MPSGraph. The graphs are built and compiled
// in fused_conv2d_graph.mm (MPSGraph's graph building, the one part of the
// Metal glue that stays Objective-C++ beyond single Metal calls) and encoded
// in fused_conv2d_mpsgraph.mm. macOS builds only.
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_MPSGRAPH_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_MPSGRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/fused_conv2d/fused_conv2d_spec.h"
#include "kernels/metal_plan/metal_api.h"

namespace mo {
namespace metal {

// One graph: float32 inputs of `input_shapes` to one float32 output of
// `output_shape`.
struct GraphRequest {
  enum Kind {
    kConv,     // act(conv(input, filter) [+ bias] [+ residual])
    kNoTaps,   // act(0 [+ bias] [+ residual]): an empty input or filter sums nothing
    kActGrad,  // gradients * act'(y or z)
  };
  Kind kind = kConv;
  fused_conv2d::ConvAttrs conv;            // kConv, kNoTaps
  fused_conv2d::ActivationGradAttrs grad;  // kActGrad
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<int64_t> output_shape;
};

// A compiled MPSGraphExecutable and the order of its feeds (defined in the
// Objective-C++ files).
struct CompiledGraph;

// Builds and compiles the graph on `device`; nullptr with *error set when
// MPSGraph cannot.
std::shared_ptr<CompiledGraph> CompileGraph(const GraphRequest& request, mtl::Device& device, std::string* error);

// Encodes `graph` on the stream's command buffer over the buffers of its
// inputs (in GraphRequest::input_shapes' order) and output: "" or why
// nothing was encoded. The command buffer keeps `graph` alive until it
// completes.
std::string EncodeGraph(const std::shared_ptr<CompiledGraph>& graph, mtl::CommandBuffer& command_buffer,
                        const std::vector<mtl::Buffer*>& inputs, mtl::Buffer& output);

}  // namespace metal
}  // namespace mo

#ifdef __OBJC__
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

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
NSArray<NSNumber*>* ShapeOf(const std::vector<int64_t>& dims);
}  // namespace metal
}  // namespace mo
#endif  // __OBJC__

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_MPSGRAPH_H_

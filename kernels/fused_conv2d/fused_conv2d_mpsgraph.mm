// A compiled MPSGraph encoded on tensorflow-metal's command buffer
// (fused_conv2d_mpsgraph.h EncodeGraph): the MPSGraph calls, nothing else.
#import "kernels/fused_conv2d/fused_conv2d_mpsgraph.h"

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#import "kernels/metal/metal_device.h"

namespace mo {
namespace metal {

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

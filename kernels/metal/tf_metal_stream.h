// The TF_MetalStream protocol, declared exactly as tensorflow-metal exposes it
// (WWDC21 "Accelerate machine learning with Metal"). TF_GetStream() on the
// Metal PluggableDevice returns an object conforming to it.
//
//  - currentCommandBuffer: the command buffer custom kernels encode into.
//  - queue: serialises encoding with TensorFlow's own work; always encode
//    inside dispatch_sync(stream.queue, ^{ ... }).
//  - commit: submits the command buffer (asynchronously, the normal path).
//  - commitAndWait: submits and blocks; for debugging only.
#ifndef METAL_OPS_KERNELS_METAL_TF_METAL_STREAM_H_
#define METAL_OPS_KERNELS_METAL_TF_METAL_STREAM_H_

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

@protocol TF_MetalStream

- (id<MTLCommandBuffer>)currentCommandBuffer;
- (dispatch_queue_t)queue;
- (void)commit;
- (void)commitAndWait;

@end

#endif  // METAL_OPS_KERNELS_METAL_TF_METAL_STREAM_H_

// The TF_MetalStream protocol, declared exactly as tensorflow-metal exposes it
// (WWDC21 "Accelerate machine learning with Metal"). TF_GetStream() on the
// Metal PluggableDevice returns an object conforming to it.
//
//  - currentCommandBuffer: the command buffer custom kernels encode into
//    (tensorflow-metal 1.2.0: an MPSCommandBuffer, created lazily without a
//    lock; read it only inside the queue block).
//  - queue: serialises encoding with TensorFlow's own work; always encode
//    inside dispatch_sync(stream.queue, ^{ ... }).
//  - commit: in tensorflow-metal 1.2.0 NOT a submit. It is
//    MetalStream::commit(false), which counts its calls and commits the
//    current command buffer (then drops it) only every maxCommit-th call:
//    2 by default, read once from the environment variable
//    MPS_MAX_COMMIT_COUNT. The work may be submitted by a later op's commit
//    or by TensorFlow's own synchronisation; nothing may rely on it having
//    run, or even been submitted, when commit returns.
//  - commitAndWait: always commits and blocks until the command buffer
//    completes (the METAL_OPS_GPU_SYNC=1 debug mode, metal_kernel.h).
#ifndef MO_KERNELS_METAL_TF_METAL_STREAM_H_
#define MO_KERNELS_METAL_TF_METAL_STREAM_H_

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

@protocol TF_MetalStream

- (id<MTLCommandBuffer>)currentCommandBuffer;
- (dispatch_queue_t)queue;
- (void)commit;
- (void)commitAndWait;

@end

#endif  // MO_KERNELS_METAL_TF_METAL_STREAM_H_

// Apple's Metal behind the host path's interface (kernels/metal_plan/metal_api.h):
// kernels/metal/metal_device.mm, one Metal call per method. The stream glue
// (metal_kernel.mm) wraps tensorflow-metal's objects with these.
#ifndef MO_KERNELS_METAL_METAL_DEVICE_H_
#define MO_KERNELS_METAL_METAL_DEVICE_H_

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <memory>

#import "kernels/metal/tf_metal_stream.h"
#include "kernels/metal_plan/metal_api.h"

namespace mo {
namespace metal {

// The interface's device for `device`, made once per MTLDevice (kept for the process).
mtl::Device* WrapDevice(id<MTLDevice> device);
// A buffer of TensorFlow's (not owned: TensorFlow keeps it alive); nullptr for nil.
std::unique_ptr<mtl::Buffer> WrapBuffer(id<MTLBuffer> buffer);
std::unique_ptr<mtl::Stream> WrapStream(id<TF_MetalStream> stream);

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_METAL_DEVICE_H_

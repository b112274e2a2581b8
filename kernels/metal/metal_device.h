// Apple's Metal behind the host path's interface (kernels/metal_plan/metal_api.h):
// kernels/metal/metal_device.mm, one Metal call per method. What the C++ glue
// (metal_kernel.cc) needs of tensorflow-metal's objects, which TensorFlow's C
// API hands out as opaque pointers. macOS builds only.
#ifndef MO_KERNELS_METAL_METAL_DEVICE_H_
#define MO_KERNELS_METAL_METAL_DEVICE_H_

#include <memory>

#include "kernels/metal_plan/metal_api.h"

namespace mo {
namespace metal {

// TF_TensorData of a non-empty tensor on tensorflow-metal's device is its
// id<MTLBuffer> (offset 0): that buffer (not owned: TensorFlow keeps it
// alive), and its device, wrapped once per MTLDevice for the process;
// nullptr where the data is not an MTLBuffer.
std::unique_ptr<mtl::Buffer> WrapTensorData(void* data);
mtl::Device* DeviceOfTensorData(void* data);
// TF_GetStream's object: tensorflow-metal's TF_MetalStream.
std::unique_ptr<mtl::Stream> WrapStream(void* stream);

}  // namespace metal
}  // namespace mo

#ifdef __OBJC__
#import <Metal/Metal.h>

namespace mo {
namespace metal {
// The Metal objects behind the interface, for encoders of others (MPSGraph).
id<MTLDevice> MetalDeviceOf(mtl::Device& device);
id<MTLBuffer> MetalBufferOf(mtl::Buffer& buffer);
id<MTLCommandBuffer> MetalCommandBufferOf(mtl::CommandBuffer& command_buffer);  // as the stream gave it
}  // namespace metal
}  // namespace mo
#endif  // __OBJC__

#endif  // MO_KERNELS_METAL_METAL_DEVICE_H_

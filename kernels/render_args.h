// The renderers' argument structs, for the TensorFlow kernel classes: one
// definition, shared with the device code, in kernels/common/render_args.h.
#ifndef METAL_OPS_KERNELS_RENDER_ARGS_H_
#define METAL_OPS_KERNELS_RENDER_ARGS_H_

#include "kernels/common/render_args.h"

#endif  // METAL_OPS_KERNELS_RENDER_ARGS_H_

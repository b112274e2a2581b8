// The registration macros every C++-API device file uses (the rule:
// docs/ARCHITECTURE.md, "The registration rule"). Each expands to TensorFlow's
// REGISTER_KERNEL_BUILDER for one device and one value of the op's "T".
#ifndef MO_KERNELS_FRAMEWORK_REGISTER_KERNELS_H_
#define MO_KERNELS_FRAMEWORK_REGISTER_KERNELS_H_

#include "tensorflow/core/framework/op_kernel.h"

// Op NAME on DEVICE (DEVICE_CPU / DEVICE_GPU) for T, run by the kernel class
// given last.
#define MO_REGISTER(NAME, DEVICE, T, ...) \
  REGISTER_KERNEL_BUILDER(Name(NAME).Device(::tensorflow::DEVICE).TypeConstraint<T>("T"), __VA_ARGS__)

// Op NAME and its gradient op NAME "Grad", run by CLASS##Op<DEVICE_TYPE, T> and
// CLASS##GradOp<DEVICE_TYPE, T> (kernels/<op>_kernel.h).
#define MO_REGISTER_WITH_GRAD(NAME, CLASS, DEVICE, DEVICE_TYPE, T) \
  MO_REGISTER(NAME, DEVICE, T, CLASS##Op<DEVICE_TYPE, T>);         \
  MO_REGISTER(NAME "Grad", DEVICE, T, CLASS##GradOp<DEVICE_TYPE, T>)

// MO_REGISTER_WITH_GRAD on the CPU (Eigen::ThreadPoolDevice), for a kernel
// class of namespace mo, written outside it (kernels/<op>/<op>_kernels.cc).
#define MO_REGISTER_CPU_WITH_GRAD(NAME, CLASS, T) \
  MO_REGISTER_WITH_GRAD(NAME, ::mo::CLASS, DEVICE_CPU, ::Eigen::ThreadPoolDevice, T)

#endif  // MO_KERNELS_FRAMEWORK_REGISTER_KERNELS_H_

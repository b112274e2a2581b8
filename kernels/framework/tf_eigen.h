// Eigen's Core and ThreadPool headers (which TensorFlow's C++ headers include)
// with g++'s -Winterference-size silenced: Eigen's thread pool aligns its
// queues to std::hardware_destructive_interference_size, and g++ warns that
// the value may differ between CPUs. The warning is about TensorFlow's headers, not our
// code, so it is silenced here only. Include this file first in every source
// that includes a TensorFlow C++ header (the build's -Werror catches one that
// does not). The intrinsics Eigen includes come first, through
// kernels/framework/x86_intrinsics.h (GCC's false positives in them silenced).
#ifndef MO_KERNELS_FRAMEWORK_TF_EIGEN_H_
#define MO_KERNELS_FRAMEWORK_TF_EIGEN_H_

#include "kernels/framework/x86_intrinsics.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winterference-size"
#endif
#include "Eigen/Core"
#include "unsupported/Eigen/CXX11/ThreadPool"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // MO_KERNELS_FRAMEWORK_TF_EIGEN_H_

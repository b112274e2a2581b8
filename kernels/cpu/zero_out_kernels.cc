// CPU kernel for ZeroOut, written with TensorFlow's kernel C API
// (tensorflow/c/kernels.h). This is the one op in the library that shows the
// C-API style used by PluggableDevice plugins; the others use the C++ API to
// reach TensorFlow's intra-op thread pool.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/zero_out.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

struct ZeroOutAttrs {
  int64_t preserve_index = 0;
};

void* ZeroOutCreate(TF_OpKernelConstruction* ctx) {
  auto* attrs = new ZeroOutAttrs;
  TF_Status* status = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrInt64(ctx, "preserve_index",
                                       &attrs->preserve_index, status);
  if (TF_GetCode(status) != TF_OK) {
    TF_OpKernelConstruction_Failure(ctx, status);
  }
  TF_DeleteStatus(status);
  return attrs;
}

void ZeroOutDelete(void* kernel) { delete static_cast<ZeroOutAttrs*>(kernel); }

template <typename T>
void ZeroOutFill(const T* in, T* out, int64_t n, int64_t preserve_index) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = mo::zero_out_element(in[i], i, preserve_index);
  }
}

void ZeroOutCompute(void* kernel, TF_OpKernelContext* ctx) {
  const auto* attrs = static_cast<const ZeroOutAttrs*>(kernel);
  TF_Status* status = TF_NewStatus();
  TF_Tensor* input = nullptr;
  TF_Tensor* output = nullptr;
  TF_GetInput(ctx, 0, &input, status);
  if (TF_GetCode(status) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteStatus(status);
    return;
  }
  const int64_t n = TF_TensorElementCount(input);
  if (n > 0 && attrs->preserve_index >= n) {
    const std::string msg =
        "ZeroOut: preserve_index " + std::to_string(attrs->preserve_index) +
        " is out of range for input 'to_zero' with " + std::to_string(n) +
        " elements";
    TF_SetStatus(status, TF_INVALID_ARGUMENT, msg.c_str());
    TF_OpKernelContext_Failure(ctx, status);
  } else {
    const int num_dims = TF_NumDims(input);
    std::vector<int64_t> dims(num_dims);
    for (int d = 0; d < num_dims; ++d) dims[d] = TF_Dim(input, d);
    const TF_DataType dtype = TF_TensorType(input);
    output = TF_AllocateOutput(ctx, 0, dtype, dims.data(), num_dims,
                               TF_TensorByteSize(input), status);
    if (TF_GetCode(status) != TF_OK) {
      TF_OpKernelContext_Failure(ctx, status);
    } else if (n > 0) {
      const void* in = TF_TensorData(input);
      void* out = TF_TensorData(output);
      switch (dtype) {
        case TF_INT32:
          ZeroOutFill(static_cast<const int32_t*>(in), static_cast<int32_t*>(out), n, attrs->preserve_index);
          break;
        case TF_INT64:
          ZeroOutFill(static_cast<const int64_t*>(in), static_cast<int64_t*>(out), n, attrs->preserve_index);
          break;
        case TF_FLOAT:
          ZeroOutFill(static_cast<const float*>(in), static_cast<float*>(out), n, attrs->preserve_index);
          break;
        case TF_DOUBLE:
          ZeroOutFill(static_cast<const double*>(in), static_cast<double*>(out), n, attrs->preserve_index);
          break;
        default:
          TF_SetStatus(status, TF_INVALID_ARGUMENT, "ZeroOut: unsupported dtype for 'to_zero'");
          TF_OpKernelContext_Failure(ctx, status);
      }
    }
  }
  TF_DeleteTensor(input);
  TF_DeleteTensor(output);
  TF_DeleteStatus(status);
}

// One registration per dtype; a static initializer runs when the library loads.
bool RegisterZeroOutCpuKernels() {
  const TF_DataType types[] = {TF_INT32, TF_INT64, TF_FLOAT, TF_DOUBLE};
  for (TF_DataType type : types) {
    TF_Status* status = TF_NewStatus();
    TF_KernelBuilder* builder = TF_NewKernelBuilder(
        "ZeroOut", "CPU", &ZeroOutCreate, &ZeroOutCompute, &ZeroOutDelete);
    TF_KernelBuilder_TypeConstraint(builder, "T", type, status);
    if (TF_GetCode(status) == TF_OK) {
      TF_RegisterKernelBuilder("ZeroOutOp", builder, status);
    }
    TF_DeleteStatus(status);
  }
  return true;
}

const bool zero_out_cpu_kernels_registered = RegisterZeroOutCpuKernels();

}  // namespace

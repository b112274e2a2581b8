// The TensorFlow kernels of MetalOpsHashEncode / MetalOpsHashEncodeGrad /
// MetalOpsHashEncodeGradGrad, once for every C++-API device (one kernel class templated on the device, a
// functor per device, TF's pattern), and the C++-API adapter of HashEncode's
// checks (kernels/hash_encode/hash_encode_spec.h, where the checks and messages live):
//   CPU  kernels/hash_encode/hash_encode_kernels.cc (the functor; registers HashEncodeOp<CPUDevice, T>)
//   CUDA kernels/hash_encode/hash_encode_gpu.cc    (the functor; registers HashEncodeOp<GPUDevice, T>)
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_KERNEL_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_KERNEL_H_

#include <cstdint>

#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/hash_encode/hash_encode_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {
// The C++-API adapters of HashEncode's spec, beside it in mo::hash_encode.
namespace hash_encode {

// The base of a hash-grid op's kernel class: its attributes in attrs_.
template <GridOp op>
using KernelOf = OpKernelWithAttrs<Attrs, op>;

// inputs and table (inputs `first` and first + 1) against the grid: the
// table's geometry and the number of points.
inline absl::Status CheckInputsAndTable(::tensorflow::OpKernelContext* ctx, const GridAttrs& a, int first,
                                        TableGeometry* g, int64_t* n) {
  const ::tensorflow::Tensor& inputs = ctx->input(first);
  TF_RETURN_IF_ERROR(
      checks::ToStatus(InputsAndTable(a, checks::DimsOf(inputs), checks::DimsOf(ctx->input(first + 1)), g)));
  *n = inputs.dim_size(0);
  return absl::OkStatus();
}

inline absl::Status CheckMatrix(const char* name, const ::tensorflow::Tensor& t, int64_t rows, int64_t cols) {
  return checks::ToStatus(Matrix(name, checks::DimsOf(t), rows, cols));
}

// grad_encoded [N, L * F] (input `dy`) after inputs and table (inputs `first`
// and first + 1, CheckInputsAndTable).
inline absl::Status CheckGradEncoded(::tensorflow::OpKernelContext* ctx, const GridAttrs& a, int dy, int first,
                                     TableGeometry* g, int64_t* n) {
  TF_RETURN_IF_ERROR(CheckInputsAndTable(ctx, a, first, g, n));
  return CheckMatrix("grad_encoded", ctx->input(dy), *n, int64_t(a.num_levels) * g->features);
}

}  // namespace hash_encode

template <typename T>
struct HashEncodeForwardArgs {
  int dims, features;
  int64_t num_points, rows;
  const float* inputs;  // [N, D]
  const T* table;       // [P, F]
  T* encoded;           // [N, L * F]
  const hash_grid::Params& params;  // the grid's geometry (InputsAndTable)
};

template <typename T>
struct HashEncodeBackwardArgs {
  int dims, features;
  int64_t num_points, rows;
  const T* grad_encoded;  // [N, L * F]
  const float* inputs;
  const T* table;
  T* grad_table;          // [P, F], or nullptr when not wanted
  float* grad_inputs;     // [N, D], or nullptr when not wanted
  bool deterministic;     // the op's attribute (devices may add TF's op determinism)
  const hash_grid::Params& params;  // the grid's geometry (InputsAndTable)
};

template <typename T>
struct HashEncodeGradGradArgs {
  int dims, features;
  int64_t num_points, rows;
  const float* grad_grad_inputs;  // [N, D]
  const T* grad_encoded;          // [N, L * F]
  const float* inputs;
  const T* table;
  T* grad_table;                  // [P, F]
  T* grad_grad_encoded;           // [N, L * F]
  const hash_grid::Params& params;  // the grid's geometry (InputsAndTable)
};

// Defined per device; num_points > 0 (forward) or at least one gradient
// wanted (backward); GradGrad takes any num_points (grad_table is zeros when 0).
template <typename Device, typename T>
struct HashEncodeFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const hash_encode::GridAttrs& grid,
                              const HashEncodeForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const hash_encode::GridAttrs& grid,
                               const HashEncodeBackwardArgs<T>& args);
  static absl::Status GradGrad(::tensorflow::OpKernelContext* ctx, const HashEncodeGradGradArgs<T>& args);
};

template <typename Device, typename T>
class HashEncodeOp : public hash_encode::KernelOf<hash_encode::GridOp::kEncode> {
 public:
  using hash_encode::KernelOf<hash_encode::GridOp::kEncode>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    hash_encode::TableGeometry g;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, hash_encode::CheckInputsAndTable(ctx, attrs_.grid, 0, &g, &n));
    const ::tensorflow::Tensor& inputs = ctx->input(0);
    const ::tensorflow::Tensor& table = ctx->input(1);
    ::tensorflow::Tensor* out = nullptr;
    const int64_t width = int64_t(attrs_.grid.num_levels) * g.features;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({n, width}), &out));
    if (n == 0) return;
    const HashEncodeForwardArgs<T> args = {g.dims, g.features, n, g.rows, inputs.flat<float>().data(),
                                           table.flat<T>().data(), out->flat<T>().data(), g.params};
    OP_REQUIRES_OK(ctx, (HashEncodeFunctor<Device, T>::Forward(ctx, attrs_.grid, args)));
  }
};

template <typename Device, typename T>
class HashEncodeGradOp : public hash_encode::KernelOf<hash_encode::GridOp::kEncodeGrad> {
 public:
  using hash_encode::KernelOf<hash_encode::GridOp::kEncodeGrad>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& dy = ctx->input(0);
    const ::tensorflow::Tensor& inputs = ctx->input(1);
    const ::tensorflow::Tensor& table = ctx->input(2);
    hash_encode::TableGeometry g;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, hash_encode::CheckGradEncoded(ctx, attrs_.grid, 0, 1, &g, &n));
    ::tensorflow::Tensor* grad_table = nullptr;
    ::tensorflow::Tensor* grad_inputs = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({attrs_.table_grad ? g.rows : 0, g.features}),
                                             &grad_table));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ::tensorflow::TensorShape({attrs_.input_grad ? n : 0, g.dims}),
                                             &grad_inputs));
    if (!attrs_.table_grad && !attrs_.input_grad) return;
    const HashEncodeBackwardArgs<T> args = {
        g.dims, g.features, n, g.rows, dy.flat<T>().data(), inputs.flat<float>().data(), table.flat<T>().data(),
        attrs_.table_grad ? grad_table->flat<T>().data() : nullptr,
        attrs_.input_grad ? grad_inputs->flat<float>().data() : nullptr, attrs_.deterministic, g.params};
    OP_REQUIRES_OK(ctx, (HashEncodeFunctor<Device, T>::Backward(ctx, attrs_.grid, args)));
  }
};

// The gradients of <grad_grad_inputs, grad_inputs> (second derivatives, for
// eikonal losses): the table's and grad_encoded's.
template <typename Device, typename T>
class HashEncodeGradGradOp : public hash_encode::KernelOf<hash_encode::GridOp::kEncodeGradGrad> {
 public:
  using hash_encode::KernelOf<hash_encode::GridOp::kEncodeGradGrad>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& ggx = ctx->input(0);
    const ::tensorflow::Tensor& dy = ctx->input(1);
    const ::tensorflow::Tensor& inputs = ctx->input(2);
    const ::tensorflow::Tensor& table = ctx->input(3);
    hash_encode::TableGeometry g;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, hash_encode::CheckGradEncoded(ctx, attrs_.grid, 1, 2, &g, &n));
    OP_REQUIRES_OK(ctx, hash_encode::CheckMatrix("grad_grad_inputs", ggx, n, g.dims));
    ::tensorflow::Tensor* grad_table = nullptr;
    ::tensorflow::Tensor* grad_dy = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, table.shape(), &grad_table));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, dy.shape(), &grad_dy));
    const HashEncodeGradGradArgs<T> args = {g.dims, g.features, n, g.rows, ggx.flat<float>().data(),
                                            dy.flat<T>().data(), inputs.flat<float>().data(), table.flat<T>().data(),
                                            grad_table->flat<T>().data(), grad_dy->flat<T>().data(), g.params};
    OP_REQUIRES_OK(ctx, (HashEncodeFunctor<Device, T>::GradGrad(ctx, args)));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_KERNEL_H_

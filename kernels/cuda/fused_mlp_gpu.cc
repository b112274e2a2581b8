// FusedMLP as TensorFlow GPU kernels (C++ API). Compiled only when the
// installed TensorFlow is a CUDA build (`make` then defines GOOGLE_CUDA); no
// such build exists on the machines of this project, so this file is only
// syntax-checked by `make cuda-check`. Launchers: kernels/cuda/fused_mlp.cu.cc.
// Attributes and shapes are checked by ops/fused_mlp_checks.h, as on the CPU.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include <vector>

#include "kernels/cuda/fused_mlp.h"
#include "ops/checks_tf.h"
#include "ops/fused_mlp_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"

namespace mo {
namespace {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::OpOutputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace fm = fused_mlp_checks;

template <typename T> struct CudaType { using type = T; };
template <> struct CudaType<Eigen::half> { using type = __half; };

std::vector<checks::Dims> DimsOfList(const OpInputList& list) {
  std::vector<checks::Dims> dims;
  for (int i = 0; i < list.size(); ++i) dims.push_back(checks::DimsOf(list[i]));
  return dims;
}

void ReadAttrs(OpKernelConstruction* ctx, fm::Attrs* a) {
  std::string activation, output_activation;
  float alpha = 0.0f;
  OP_REQUIRES_OK(ctx, ctx->GetAttr("activation", &activation));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("output_activation", &output_activation));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("leaky_relu_alpha", &alpha));
  OP_REQUIRES_OK(ctx, checks::ToStatus(fm::ParseAttrs(activation, output_activation, alpha, a)));
}

cuda::FusedMlpShape ShapeOf(const fm::Net& net, int64_t n, const fm::Attrs& a) {
  return cuda::FusedMlpShape{n, static_cast<int>(net.in_dim), static_cast<int>(net.width), net.hidden_layers,
                             static_cast<int>(net.out_dim), a.activation, a.output_activation,
                             a.leaky_relu_alpha};
}

template <typename T>
class FusedMlpGpuOp : public OpKernel {
 public:
  explicit FusedMlpGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadAttrs(ctx, &attrs_); }
  void Compute(OpKernelContext* ctx) override {
    using CT = typename CudaType<T>::type;
    const Tensor& x = ctx->input(0);
    OpInputList kernels, biases;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    OP_REQUIRES_OK(ctx, ctx->input_list("biases", &biases));
    fm::Net net;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fm::Shapes(checks::DimsOf(x), DimsOfList(kernels), DimsOfList(biases), &net)));
    const int64_t n = x.dim_size(0);
    Tensor *y = nullptr, *hidden = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, net.out_dim}), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({net.hidden_layers, n, net.width}), &hidden));
    cuda::FusedMlpParams<CT> p{};
    for (int l = 0; l < kernels.size(); ++l) {
      p.w[l] = reinterpret_cast<const CT*>(kernels[l].flat<T>().data());
      p.b[l] = reinterpret_cast<const CT*>(biases[l].flat<T>().data());
    }
    const cudaError_t err = cuda::LaunchFusedMlpForward<CT>(
        reinterpret_cast<const CT*>(x.flat<T>().data()), p, reinterpret_cast<CT*>(y->flat<T>().data()),
        reinterpret_cast<CT*>(hidden->flat<T>().data()), ShapeOf(net, n, attrs_),
        ctx->eigen_device<Eigen::GpuDevice>().stream());
    OP_REQUIRES(ctx, err == cudaSuccess, errors::Internal("FusedMLP CUDA launch failed: ", cudaGetErrorString(err)));
  }

 private:
  fm::Attrs attrs_;
};

template <typename T>
class FusedMlpGradGpuOp : public OpKernel {
 public:
  explicit FusedMlpGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadAttrs(ctx, &attrs_); }
  void Compute(OpKernelContext* ctx) override {
    using CT = typename CudaType<T>::type;
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    OpInputList kernels;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    const Tensor& y = ctx->input(2 + kernels.size());
    const Tensor& hidden = ctx->input(3 + kernels.size());
    std::vector<checks::Dims> bias_dims;
    for (int l = 0; l < kernels.size(); ++l) bias_dims.push_back({kernels[l].dims() == 2 ? kernels[l].dim_size(1) : 0});
    fm::Net net;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fm::Shapes(checks::DimsOf(x), DimsOfList(kernels), bias_dims, &net)));
    const int64_t n = x.dim_size(0);
    OP_REQUIRES_OK(ctx, checks::ToStatus(fm::GradShapes(net, n, checks::DimsOf(dy), checks::DimsOf(y),
                                                        checks::DimsOf(hidden))));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OpOutputList dws, dbs;
    OP_REQUIRES_OK(ctx, ctx->output_list("grad_kernels", &dws));
    OP_REQUIRES_OK(ctx, ctx->output_list("grad_biases", &dbs));
    cuda::FusedMlpParams<CT> p{};
    cuda::FusedMlpGrads<CT> g{};
    for (int l = 0; l < kernels.size(); ++l) {
      Tensor *dw = nullptr, *db = nullptr;
      OP_REQUIRES_OK(ctx, dws.allocate(l, kernels[l].shape(), &dw));
      OP_REQUIRES_OK(ctx, dbs.allocate(l, TensorShape({kernels[l].dim_size(1)}), &db));
      p.w[l] = reinterpret_cast<const CT*>(kernels[l].flat<T>().data());
      g.dw[l] = reinterpret_cast<CT*>(dw->flat<T>().data());
      g.db[l] = reinterpret_cast<CT*>(db->flat<T>().data());
    }
    const cuda::FusedMlpShape s = ShapeOf(net, n, attrs_);
    Tensor workspace;
    const int64_t ws_bytes = static_cast<int64_t>(cuda::FusedMlpBackwardWorkspaceBytes(s, sizeof(CT)));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_UINT8, TensorShape({ws_bytes}), &workspace));
    const cudaError_t err = cuda::LaunchFusedMlpBackward<CT>(
        reinterpret_cast<const CT*>(dy.flat<T>().data()), reinterpret_cast<const CT*>(x.flat<T>().data()),
        reinterpret_cast<const CT*>(y.flat<T>().data()), reinterpret_cast<const CT*>(hidden.flat<T>().data()), p,
        reinterpret_cast<CT*>(dx->flat<T>().data()), g, workspace.flat<uint8_t>().data(), s,
        ctx->eigen_device<Eigen::GpuDevice>().stream());
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("FusedMLPGrad CUDA launch failed: ", cudaGetErrorString(err)));
  }

 private:
  fm::Attrs attrs_;
};

#define METAL_OPS_REGISTER_FUSED_MLP_GPU(T)                                                            \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsFusedMLP").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"), \
                          FusedMlpGpuOp<T>);                                                            \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("MetalOpsFusedMLPGrad").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"),            \
      FusedMlpGradGpuOp<T>)
METAL_OPS_REGISTER_FUSED_MLP_GPU(float);
METAL_OPS_REGISTER_FUSED_MLP_GPU(Eigen::half);
#undef METAL_OPS_REGISTER_FUSED_MLP_GPU

}  // namespace
}  // namespace mo

#endif  // GOOGLE_CUDA

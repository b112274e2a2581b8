// C ABI over tiny-cuda-nn's FullyFusedMLP for benchmarks/cuda/bench_fused_mlp_cuda.py.
// Built against a tiny-cuda-nn checkout given by TCNN_DIR (see
// benchmarks/cuda/build_tcnn_shim.sh); nothing of tiny-cuda-nn is kept here.
#include <tiny-cuda-nn/common.h>
#include <tiny-cuda-nn/gpu_matrix.h>
#include <tiny-cuda-nn/gpu_memory.h>
#include <tiny-cuda-nn/networks/fully_fused_mlp.h>
#include <tiny-cuda-nn/random.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "tcnn_shim.h"

using namespace tcnn;
using T = network_precision_t;

namespace {
struct Net {
  std::unique_ptr<Network<T>> net;
  GPUMemory<float> params_fp;
  GPUMemory<T> params, grads;
  std::unique_ptr<Context> ctx;
};

template <int W>
Network<T>* Make(uint32_t in, uint32_t out, uint32_t hidden, Activation a, Activation oa) {
  return new FullyFusedMLP<T, W>(in, out, hidden, a, oa);
}
}  // namespace

extern "C" {

// act codes: 0 none, 1 relu, 5 sigmoid (the project's numbering).
static Activation Act(int a) {
  return a == 1 ? Activation::ReLU : a == 5 ? Activation::Sigmoid : Activation::None;
}

void* tcnn_mlp_create(int in, int width, int hidden, int out, int act, int out_act) {
  return Guarded<void*>(__func__, nullptr, [&]() -> void* {
    auto* n = new Net;
    Network<T>* p = nullptr;
    switch (width) {
      case 16: p = Make<16>(in, out, hidden, Act(act), Act(out_act)); break;
      case 32: p = Make<32>(in, out, hidden, Act(act), Act(out_act)); break;
      case 64: p = Make<64>(in, out, hidden, Act(act), Act(out_act)); break;
      case 128: p = Make<128>(in, out, hidden, Act(act), Act(out_act)); break;
      default: return nullptr;
    }
    n->net.reset(p);
    const size_t np = p->n_params();
    n->params_fp.resize(np);
    n->params.resize(np);
    n->grads.resize(np);
    pcg32 rng{1337};
    p->initialize_params(rng, n->params_fp.data());
    linear_kernel(cast<T>, 0, nullptr, np, n->params_fp.data(), n->params.data());
    p->set_params(n->params.data(), n->params.data(), n->grads.data());
    CUDA_CHECK_THROW(cudaDeviceSynchronize());
    return n;
  });
}

int tcnn_mlp_padded_output_width(void* h) {
  return static_cast<int>(static_cast<Net*>(h)->net->padded_output_width());
}

// aos = 1: tiny-cuda-nn's CM layout, a [width, n] column-major matrix, i.e. one
// sample's features contiguous (NumPy [n, width], the layout its encodings
// write and ours takes). aos = 0: RM, a [width, n] row-major matrix (NumPy
// [width, n], structure of arrays), which sends inputs narrower than the
// hidden width, and every RM input, through its separate input-layer path.
static MatrixLayout Layout(int aos) { return aos ? CM : RM; }

int tcnn_mlp_inference(void* h, const void* x, void* y, int n, int aos, cudaStream_t s) {
  return Guarded(__func__, 1, [&] {
    auto* net = static_cast<Net*>(h);
    GPUMatrixDynamic<T> in((T*)x, net->net->input_width(), n, Layout(aos));
    GPUMatrixDynamic<T> out((T*)y, net->net->padded_output_width(), n, Layout(aos));
    net->net->inference_mixed_precision(s, in, out);
    return 0;
  });
}

// forward (training) + backward with dL/dy = dy, parameter gradients and dx.
int tcnn_mlp_forward_backward(void* h, const void* x, void* y, const void* dy, void* dx, int n,
                              int aos, cudaStream_t s) {
  return Guarded(__func__, 1, [&] {
    auto* net = static_cast<Net*>(h);
    const MatrixLayout l = Layout(aos);
    GPUMatrixDynamic<T> in((T*)x, net->net->input_width(), n, l);
    GPUMatrixDynamic<T> out((T*)y, net->net->padded_output_width(), n, l);
    GPUMatrixDynamic<T> dout((T*)dy, net->net->padded_output_width(), n, l);
    GPUMatrixDynamic<T> din((T*)dx, net->net->input_width(), n, l);
    auto ctx = net->net->forward(s, in, &out, false, dx != nullptr);
    net->net->backward(s, *ctx, in, out, dout, dx ? &din : nullptr, false, GradientMode::Overwrite);
    return 0;
  });
}

void tcnn_mlp_destroy(void* h) { delete static_cast<Net*>(h); }

}  // extern "C"

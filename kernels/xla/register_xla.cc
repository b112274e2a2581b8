// The library's XLA registration function (docs/XLA.md, "Registration"):
// registers the XLA op kernels (MO_REGISTER_XLA_OP) and the FFI handlers
// (MO_XLA_FFI_HANDLER) of kernels/xla/*_xla.cc with XLA, once per
// process. metal_ops' loader calls it right after tf.load_op_library, once it
// has checked that this copy's ops are the ones TensorFlow registered.
//
// Loading the library registers nothing with XLA: XLA's op registry aborts
// the process on a name registered twice, and a second copy of the library
// (another installed metal_ops, a tf.load_op_library of another build) would
// register every name again. The function checks XLA's registry first and
// registers nothing where another copy did.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/xla/xla_ffi.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace xla_kernels {
namespace {

// What MetalOpsRegisterXla returns (python/metal_ops/_loader.py reads it).
enum RegisterResult : int {
  kRegistered = 0,        // XLA compiles the ops from now on
  kRegisteredLate = 1,    // registered, but XLA took op kernels in before: not used in this process
  kOtherCopy = 2,         // another copy of the library registered these names: nothing registered
  kHandlerRefused = 3,    // XLA refused an FFI handler (the message says which)
};

struct Outcome {
  int result = kRegistered;
  std::string message;
};

// XLA takes the op kernels in once per process
// (XlaOpRegistry::RegisterCompilationKernels), which TensorFlow 2.21 calls
// when it runs its first op: a stock op then has a kernel for XLA's
// compilation devices.
bool XlaTookKernelsIn() {
  const std::string kernels = ::tensorflow::KernelsRegisteredForOp("Identity");
  return kernels.find("XLA_CPU_JIT") != std::string::npos || kernels.find("XLA_GPU_JIT") != std::string::npos;
}

Outcome Register() {
  Outcome outcome;
  std::vector<XlaOpRegistration> ops;
  for (XlaOpRegistrationFn build : XlaOpList()) ops.push_back(build());
  const std::vector<std::string> existing = ::tensorflow::XlaOpRegistry::GetAllRegisteredOps();
  for (const XlaOpRegistration& op : ops) {
    if (std::find(existing.begin(), existing.end(), op->name) != existing.end()) {
      outcome.result = kOtherCopy;
      outcome.message = "the XLA kernel of " + op->name +
                        " is already registered in this process by another copy of the metal_ops op library";
      return outcome;
    }
  }
  const bool late = XlaTookKernelsIn();
  for (XlaOpRegistration& op : ops) ::tensorflow::XlaOpRegistrar registrar(std::move(op));
  const std::string refused = xla_ffi::RegisterFfiHandlers();
  if (!refused.empty()) {
    outcome.result = kHandlerRefused;
    outcome.message = "XLA refused the library's FFI handlers:\n" + refused;
  } else if (late) {
    outcome.result = kRegisteredLate;
    outcome.message =
        "TensorFlow ran an op in this process before the metal_ops op library loaded, and XLA takes op "
        "kernels in only once, at TensorFlow's first op (creating a tensor, a variable, a Keras model or a "
        "tf.distribute strategy runs one): the ops run, but not inside "
        "tf.function(jit_compile=True) or a Keras model compiled with XLA. Import metal_ops right after "
        "tensorflow, before any of these";
  }
  return outcome;
}

}  // namespace
}  // namespace xla_kernels
}  // namespace mo

// Registers the library's XLA kernels and handlers, once per loaded copy
// (later calls return the first call's result). Returns one of
// RegisterResult; the message (for every result but 0) goes to
// `message[0, size)`, NUL-terminated.
extern "C" __attribute__((visibility("default"))) int MetalOpsRegisterXla(char* message, size_t size) {
  static std::once_flag once;
  static mo::xla_kernels::Outcome* outcome = nullptr;
  std::call_once(once, [] { outcome = new mo::xla_kernels::Outcome(mo::xla_kernels::Register()); });
  if (message != nullptr && size > 0) std::snprintf(message, size, "%s", outcome->message.c_str());
  return outcome->result;
}

// The CUDA handlers' registration (docs/XLA.md, "On a GPU"). In the CUDA
// library (`make cuda-lib`), MetalOpsRegisterXlaCuda registers its CUDA
// handlers (MO_XLA_FFI_HANDLER in kernels/<op>/<op>_xla_gpu.cc) with
// XLA, once per loaded copy; metal_ops' loader calls it right after loading
// that library. The XLA op kernels are the op library's
// (kernels/xla/register_xla.cc); they emit custom calls by name, which XLA
// resolves to these handlers on a GPU. In the op library of TensorFlow's
// CUDA build (`make ENV=existing`) the handlers are in the op library's own
// list, which MetalOpsRegisterXla registers. MetalOpsXlaCudaHandlerNames
// names the ops they cover in either. Compiled in the CUDA builds
// (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "kernels/xla/xla_ffi.h"

// Registers the handlers; 0, or 3 with XLA's refusals in `message[0, size)`
// (another copy of the library registered the names first), as
// MetalOpsRegisterXla. Later calls return the first call's result.
extern "C" __attribute__((visibility("default"))) int MetalOpsRegisterXlaCuda(char* message, size_t size) {
  static std::once_flag once;
  static std::string* refused = nullptr;
  std::call_once(once, [] { refused = new std::string(mo::xla_ffi::RegisterFfiHandlers()); });
  if (message != nullptr && size > 0) {
    std::snprintf(message, size, "%s", refused->empty() ? "" : ("XLA refused the CUDA handlers:\n" + *refused).c_str());
  }
  return refused->empty() ? 0 : 3;
}

// The names of the ops with CUDA handlers in this library, comma-separated.
extern "C" __attribute__((visibility("default"))) const char* MetalOpsXlaCudaHandlerNames() {
  static const std::string* names = [] {
    std::string* out = new std::string();
    for (const mo::xla_ffi::FfiHandlerEntry& entry : mo::xla_ffi::FfiHandlerList()) {
      if (std::strcmp(entry.platform, "CUDA") == 0) *out += (out->empty() ? "" : ",") + std::string(entry.name);
    }
    return out;
  }();
  return names->c_str();
}

#endif  // GOOGLE_CUDA

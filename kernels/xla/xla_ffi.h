// What every XLA FFI handler of the library shares (the host handlers in
// kernels/<op>/<op>_xla.cc, and CUDA handlers, kernels/<op>/<op>_xla_gpu.cc):
// XLA's FFI API, the element-type dispatch, status conversion, and the host
// handlers' thread pool. Only XLA's FFI headers (xla/ffi/api/, header-only
// against a C API): no XLA compiler header.
#ifndef MO_KERNELS_XLA_XLA_FFI_H_
#define MO_KERNELS_XLA_XLA_FFI_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/spec/checks.h"
#include "tensorflow/core/framework/numeric_types.h"
// XLA's FFI header ends functions after a switch over every enumerator without
// a return (-Wreturn-type): its warning, not ours, silenced here for every
// unit that includes it (the host handlers compile with -Werror).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wreturn-type"
#include "xla/ffi/api/ffi.h"
#pragma GCC diagnostic pop

namespace xla {
namespace ffi {
// XLA's FFI API of this process, exported by libtensorflow_cc. Declared here:
// its header (xla/ffi/ffi_api.h) needs MLIR headers that TensorFlow's wheel
// does not ship.
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace ffi
}  // namespace xla

namespace mo {
namespace xla_ffi {

namespace ffi = ::xla::ffi;

// The FFI element type of a C++ element type.
template <typename T>
struct TypeOf;
template <> struct TypeOf<float> { static constexpr ffi::DataType value = ffi::DataType::F32; };
template <> struct TypeOf<double> { static constexpr ffi::DataType value = ffi::DataType::F64; };
template <> struct TypeOf<Eigen::half> { static constexpr ffi::DataType value = ffi::DataType::F16; };
template <> struct TypeOf<::tensorflow::bfloat16> { static constexpr ffi::DataType value = ffi::DataType::BF16; };
template <> struct TypeOf<int32_t> { static constexpr ffi::DataType value = ffi::DataType::S32; };
template <> struct TypeOf<int64_t> { static constexpr ffi::DataType value = ffi::DataType::S64; };

// fn(T()) for the one of Ts that is `dtype`; an error naming the op otherwise
// (the XLA kernel registered only Ts: a mismatch is a bug, not a user error).
template <typename... Ts, typename Fn>
ffi::Error ForType(ffi::DataType dtype, const char* op, Fn&& fn) {
  ffi::Error result = ffi::Error::Internal(std::string(op) + ": the XLA call has an element type the op lacks");
  (void)((dtype == TypeOf<Ts>::value ? (result = fn(Ts()), true) : false) || ...);
  return result;
}

// ForType, then nothing to do (success) when the call has no elements (`n`):
// the element-wise handlers' dispatch.
template <typename... Ts, typename Fn>
ffi::Error ForTypeUnlessEmpty(ffi::DataType dtype, int64_t n, const char* op, Fn&& fn) {
  return ForType<Ts...>(dtype, op, [&](auto type) { return n == 0 ? ffi::Error::Success() : fn(type); });
}

// A handler's result buffer.
using RetBuffer = ffi::Result<ffi::AnyBuffer>;

template <typename T>
const T* Data(const ffi::AnyBuffer& buffer) {
  return static_cast<const T*>(buffer.untyped_data());
}

inline checks::Dims DimsOf(const ffi::AnyBuffer& buffer) {
  const auto dims = buffer.dimensions();
  return checks::Dims(dims.begin(), dims.end());
}

// `binding` with kArgs Buffer arguments, then kRets >= 1 Buffer results (by
// default ffi::AnyBuffer; ffi::Buffer<ffi::F32> where the handler has XLA
// check the element type): the handlers' buffer lists, by count rather than
// one .Arg<Buffer>() / .Ret<Buffer>() line per buffer. (A Binding cannot be
// copied or moved into a new one of its own type: each step returns the next
// type, and the last step's result is returned as it is.)
template <int kArgs, int kRets, typename Buffer = ffi::AnyBuffer, typename Binding>
auto BindBuffersFrom(Binding&& binding) {
  static_assert(kRets >= 1, "a handler has at least one result");
  if constexpr (kArgs > 0) {
    return BindBuffersFrom<kArgs - 1, kRets, Buffer>(std::move(binding).template Arg<Buffer>());
  } else if constexpr (kRets > 1) {
    return BindBuffersFrom<0, kRets - 1, Buffer>(std::move(binding).template Ret<Buffer>());
  } else {
    return std::move(binding).template Ret<Buffer>();
  }
}

// ffi::Ffi::Bind() with the buffers (the host handlers).
template <int kArgs, int kRets, typename Buffer = ffi::AnyBuffer>
auto BindBuffers() {
  return BindBuffersFrom<kArgs, kRets, Buffer>(ffi::Ffi::Bind());
}

// The buffers of a variadic call (ops with list inputs or outputs).
inline ffi::Error BuffersOf(const ffi::RemainingArgs& args, std::vector<ffi::AnyBuffer>* out) {
  for (size_t i = 0; i < args.size(); ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> buffer = args.get<ffi::AnyBuffer>(i);
    if (!buffer.has_value()) return buffer.error();
    out->push_back(buffer.value());
  }
  return ffi::Error::Success();
}

inline ffi::Error BuffersOf(const ffi::RemainingRets& rets, std::vector<ffi::Result<ffi::AnyBuffer>>* out) {
  for (size_t i = 0; i < rets.size(); ++i) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> buffer = rets.get<ffi::AnyBuffer>(i);
    if (!buffer.has_value()) return buffer.error();
    out->push_back(buffer.value());
  }
  return ffi::Error::Success();
}

// fn(in, out) with the buffers of a call of fixed arity, `num_args` operands
// and `num_rets` results (an internal error naming `op` otherwise: a bug of
// the XLA kernel).
template <typename Fn>
ffi::Error WithCallBuffers(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets, size_t num_args,
                           size_t num_rets, const char* op, Fn&& fn) {
  std::vector<ffi::AnyBuffer> in;
  std::vector<ffi::Result<ffi::AnyBuffer>> out;
  ffi::Error error = BuffersOf(args, &in);
  if (error.success()) error = BuffersOf(rets, &out);
  if (error.failure()) return error;
  if (in.size() != num_args || out.size() != num_rets) {
    return ffi::Error::Internal(std::string(op) + ": the XLA call has the wrong number of operands or results");
  }
  return fn(in, out);
}

// `binding` (XLA's stream and scratch allocator bound, where the handler takes
// them) followed by the operands and results that WithCallBuffers reads, and
// the attributes Attrs bound whole.
template <typename Attrs, typename Binding>
auto BindCallBuffers(Binding&& binding) {
  return std::move(binding).RemainingArgs().RemainingRets().template Attrs<Attrs>();
}

// `bytes` of device scratch for a CUDA handler, starting on a 256-byte
// boundary (the launchers' workspaces assume cudaMalloc's alignment). XLA's
// FFI refuses alignments above 16 ("Unsupported alignment"), so the block is
// asked for with 16 and 240 bytes more, and its start rounded up. Freed when
// `scratch` goes (the handler's return): later work on XLA's stream reuses it
// only after the kernels queued here.
inline std::optional<void*> AllocateScratch(ffi::ScratchAllocator& scratch, size_t bytes) {
  constexpr size_t kAlign = 256, kFfiAlign = 16;
  std::optional<void*> block = scratch.Allocate(bytes + kAlign - kFfiAlign, kFfiAlign);
  if (!block.has_value()) return std::nullopt;
  const uintptr_t start = reinterpret_cast<uintptr_t>(*block);
  return reinterpret_cast<void*>((start + kAlign - 1) & ~static_cast<uintptr_t>(kAlign - 1));
}

// Handler registration. Nothing registers with XLA while the library loads
// (a second copy of the library in the process would register the same names
// again): MO_XLA_FFI_HANDLER only adds a handler to this copy's own
// list, and the library's registration function (kernels/xla/register_xla.cc)
// registers the list with XLA once, after checking that no other copy did.
struct FfiHandlerEntry {
  const char* name;      // the custom call's target: the TensorFlow op's name
  const char* platform;  // "Host" or "CUDA"
  XLA_FFI_Handler* handler;
};

// This copy's list (hidden: each loaded copy of the library has its own).
__attribute__((visibility("hidden"))) inline std::vector<FfiHandlerEntry>& FfiHandlerList() {
  static std::vector<FfiHandlerEntry>* list = new std::vector<FfiHandlerEntry>();
  return *list;
}

inline bool AddFfiHandler(const char* name, const char* platform, XLA_FFI_Handler* handler) {
  FfiHandlerList().push_back({name, platform, handler});
  return true;
}

// Registers the handlers of the list with XLA: "" or XLA's errors, one a line
// (never an abort: XLA refuses a name already registered with another handler).
inline std::string RegisterFfiHandlers() {
  const XLA_FFI_Api* api = ffi::GetXlaFfiApi();
  std::string errors;
  for (const FfiHandlerEntry& entry : FfiHandlerList()) {
    XLA_FFI_Error* error = ffi::Ffi::RegisterStaticHandler(api, entry.name, entry.platform, entry.handler);
    if (error == nullptr) continue;
    XLA_FFI_Error_GetMessage_Args message = {XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE, nullptr, error, nullptr};
    api->XLA_FFI_Error_GetMessage(&message);
    errors += std::string(entry.name) + " (" + entry.platform + "): " + (message.message ? message.message : "") + "\n";
    XLA_FFI_Error_Destroy_Args destroy = {XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, nullptr, error};
    api->XLA_FFI_Error_Destroy(&destroy);
  }
  return errors;
}

template <typename T>
T* Data(ffi::Result<ffi::AnyBuffer> buffer) {
  return static_cast<T*>(buffer->untyped_data());
}

// `count` elements of T of device memory from XLA's scratch allocator (a
// CUDA handler's check words and workspaces, released after the call), or an
// error naming the op.
template <typename T>
ffi::Error ScratchOf(ffi::ScratchAllocator& scratch, size_t count, const char* op, T** out) {
  std::optional<void*> allocated = AllocateScratch(scratch, count * sizeof(T));
  if (!allocated.has_value()) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": could not allocate its GPU scratch");
  }
  *out = static_cast<T*>(*allocated);
  return ffi::Error::Success();
}

inline ffi::Error ToError(const absl::Status& status) {
  if (status.ok()) return ffi::Error::Success();
  return ffi::Error(static_cast<ffi::ErrorCode>(status.code()), std::string(status.message()));
}

inline ffi::Error ToError(const checks::Result& result) {
  return result.ok ? ffi::Error::Success() : ffi::Error::InvalidArgument(result.message);
}

}  // namespace xla_ffi
}  // namespace mo

// MO_XLA_FFI_HANDLER("MetalOpsX", "Host", Fn, binding): Fn's handler with
// `binding` (XLA_FFI_DEFINE_HANDLER), added to the library's list (above);
// registered with XLA by the library's registration function.
#define MO_XLA_FFI_HANDLER(NAME, PLATFORM, IMPL, ...) \
  MO_XLA_FFI_HANDLER_UNIQ(__COUNTER__, NAME, PLATFORM, IMPL, __VA_ARGS__)
#define MO_XLA_FFI_HANDLER_UNIQ(CTR, NAME, PLATFORM, IMPL, ...) \
  MO_XLA_FFI_HANDLER_UNIQ_(CTR, NAME, PLATFORM, IMPL, __VA_ARGS__)
#define MO_XLA_FFI_HANDLER_UNIQ_(CTR, NAME, PLATFORM, IMPL, ...)               \
  XLA_FFI_DEFINE_HANDLER(mo_xla_ffi_handler_fn_##CTR, IMPL, (__VA_ARGS__)); \
  [[maybe_unused]] static const bool mo_xla_ffi_handler_##CTR =              \
      ::mo::xla_ffi::AddFfiHandler(NAME, PLATFORM, mo_xla_ffi_handler_fn_##CTR)

#endif  // MO_KERNELS_XLA_XLA_FFI_H_

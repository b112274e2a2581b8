// The attributes of an op declared with kernels/spec/op_attrs.h as one
// parameter of its XLA FFI handlers (host and CUDA): MO_XLA_FFI_ATTRS(Attrs)
// lets a handler take `Attrs a` after its buffers, bound with
// binding.Attrs<Attrs>() and decoded from the call's attribute dictionary by
// the op's own ReadAttrs, the reads and checks of every other path
// (kernels/xla/xla_kernel.h FfiAttrsOf writes the dictionary).
#ifndef MO_KERNELS_XLA_XLA_FFI_ATTRS_H_
#define MO_KERNELS_XLA_XLA_FFI_ATTRS_H_

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/spec/checks.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

// The attributes of an op declared with kernels/spec/op_attrs.h, read from an
// FFI call's attribute dictionary: get(name, &value) for ReadAttrs, so the
// op's own reads and checks decode them (kernels/xla/xla_kernel.h FfiAttrsOf
// writes them).
class FfiAttrGetter {
 public:
  explicit FfiAttrGetter(const ffi::Dictionary& dict) : dict_(dict) {}
  template <typename T>
  bool operator()(const char* name, T* value) const {
    if constexpr (std::is_same_v<T, std::string>) {
      ffi::ErrorOr<std::string_view> read = dict_.get<std::string_view>(name);
      if (!read.has_value()) return false;
      *value = std::string(read.value());
    } else if constexpr (std::is_same_v<T, bool>) {  // FfiAttrsOf writes a Bool as an i64 0 or 1
      ffi::ErrorOr<int64_t> read = dict_.get<int64_t>(name);
      if (!read.has_value()) return false;
      *value = read.value() != 0;
    } else if constexpr (std::is_same_v<T, std::vector<float>>) {  // FfiAttrsOf writes a FloatList as an f32 array
      ffi::ErrorOr<ffi::Span<const float>> read = dict_.get<ffi::Span<const float>>(name);
      if (!read.has_value()) return false;
      value->assign(read.value().begin(), read.value().end());
    } else if constexpr (std::is_same_v<T, checks::Dims>) {  // an IntList, FfiAttrsOf's array<i64: ...>
      ffi::ErrorOr<ffi::Span<const int64_t>> read = dict_.get<ffi::Span<const int64_t>>(name);
      if (!read.has_value()) return false;
      *value = checks::Dims(read.value().begin(), read.value().end());
    } else {
      ffi::ErrorOr<T> read = dict_.get<T>(name);
      if (!read.has_value()) return false;
      *value = read.value();
    }
    return true;
  }

 private:
  const ffi::Dictionary& dict_;
};

template <typename Attrs>
std::optional<Attrs> DecodeAttrs(XLA_FFI_AttrType type, void* attr, ffi::DiagnosticEngine& diagnostic) {
  if (type != XLA_FFI_AttrType_DICTIONARY) {
    return diagnostic.Emit("metal_ops: an op's attributes are a dictionary, got attribute type ") << type;
  }
  const ffi::Dictionary dict(reinterpret_cast<XLA_FFI_Attrs*>(attr));
  Attrs attrs;
  const checks::Result read = ReadAttrs(FfiAttrGetter(dict), &attrs);
  if (!read.ok) return diagnostic.Emit(read.message);
  return attrs;
}

}  // namespace xla_ffi
}  // namespace mo

// MO_XLA_FFI_ATTRS(::mo::<op>::Attrs), at namespace scope: the op's Attrs
// as one handler parameter, bound by binding.Attrs<Attrs>() and decoded by
// DecodeAttrs (above); the handler takes `Attrs a` after its buffers.
#define MO_XLA_FFI_ATTRS(ATTRS)                                                                        \
  namespace xla::ffi {                                                                                 \
  template <>                                                                                          \
  struct AttrsBinding<ATTRS> {                                                                         \
    using Attrs = ATTRS;                                                                               \
  };                                                                                                   \
  template <>                                                                                          \
  struct AttrDecoding<ATTRS> {                                                                         \
    using Type = ATTRS;                                                                                \
    static std::optional<ATTRS> Decode(XLA_FFI_AttrType type, void* attr, DiagnosticEngine& diagnostic) { \
      return ::mo::xla_ffi::DecodeAttrs<ATTRS>(type, attr, diagnostic);                                \
    }                                                                                                  \
  };                                                                                                   \
  }                                                                                                    \
  static_assert(true, "a declaration ends with a semicolon")

#endif  // MO_KERNELS_XLA_XLA_FFI_ATTRS_H_

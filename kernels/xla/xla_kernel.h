// The XLA side of every op (docs/XLA.md): an XlaOpKernel per op and gradient
// op (kernels/<op>/<op>_xla.cc) that runs the op's checks
// (kernels/<op>/<op>_spec.h) on the static shapes while XLA compiles, and
// emits one typed-FFI custom call named after the TensorFlow op, its
// attributes as FFI attributes. XLA then calls the handler registered under
// that name for the platform: "Host" (the CPU functor of kernels/<op>/<op>_functor.h,
// registered in kernels/<op>/<op>_kernels.cc: kernels/xla/xla_host.h) or, where an op has one, "CUDA"
// (kernels/<op>/<op>_xla_gpu.cc, the op's CUDA launchers on XLA's
// stream). Registration happens when the library loads; XLA takes the op
// kernels in at its first compilation.
#ifndef MO_KERNELS_XLA_XLA_KERNEL_H_
#define MO_KERNELS_XLA_XLA_KERNEL_H_

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/spec/checks.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

namespace mo {
namespace xla_kernels {

using ::tensorflow::XlaOpKernel;
using ::tensorflow::XlaOpKernelContext;

// Element types of the ops' "T", for REGISTER_XLA_OP(Name(op).TypeConstraint("T", ...), kernel).
inline constexpr ::tensorflow::DataType kFloatTypes[] = {::tensorflow::DT_FLOAT, ::tensorflow::DT_HALF};
inline constexpr ::tensorflow::DataType kFloatAndBfloat16Types[] = {::tensorflow::DT_FLOAT, ::tensorflow::DT_HALF,
                                                                  ::tensorflow::DT_BFLOAT16};

// An op's XLA kernel: compile(ctx, attrs), a plain function, runs the op's
// checks and emits its call; the attributes are read and checked once, at
// construction, as OpKernelWithAttrs (kernels/framework/op_kernel_with_attrs.h) reads
// the TensorFlow kernels' (checks::ReadAttrsOf(ctx, args..., &attrs)).
// XlaOp<compile> is the kernel of an op without attributes.
template <typename Attrs, void (*compile)(XlaOpKernelContext*, const Attrs&), auto... args>
class XlaOpWithAttrs : public XlaOpKernel {
 public:
  explicit XlaOpWithAttrs(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, args..., &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override { compile(ctx, attrs_); }

 private:
  Attrs attrs_;
};

template <void (*compile)(XlaOpKernelContext*)>
class XlaOp : public XlaOpKernel {
 public:
  using XlaOpKernel::XlaOpKernel;
  void Compile(XlaOpKernelContext* ctx) override { compile(ctx); }
};

// An FFI attribute dictionary, in the MLIR syntax XLA parses from a typed-FFI
// custom call's backend config: integers as i64, floats as f32 bit patterns
// (exact, NaN and infinities included).
class FfiAttrs {
 public:
  FfiAttrs& Int(const char* name, int64_t value) { return Add(name, std::to_string(value) + " : i64"); }
  FfiAttrs& Float(const char* name, float value) { return Add(name, FloatBits(value) + " : f32"); }
  // An array of floats (a FloatList attribute), each as Float's bit pattern.
  FfiAttrs& Floats(const char* name, const std::vector<float>& values) {
    std::string text = "array<f32";
    for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : ": ") + FloatBits(values[i]);
    return Add(name, text + ">");
  }
  // A string without quotes or backslashes (an Enum attribute's choice, kernels/spec/op_attrs.h).
  FfiAttrs& Str(const char* name, const char* value) { return Add(name, "\"" + std::string(value) + "\""); }
  // An IntList attribute (kernels/spec/op_attrs.h): array<i64: 1, 2>, array<i64> when empty.
  FfiAttrs& Ints(const char* name, const checks::Dims& value) {
    std::string text = "array<i64";
    for (size_t i = 0; i < value.size(); ++i) text += (i == 0 ? ": " : ", ") + std::to_string(value[i]);
    return Add(name, text + ">");
  }
  std::string Text() const { return "{" + text_ + "}"; }

 private:
  static std::string FloatBits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08X", bits);
    return hex;
  }
  FfiAttrs& Add(const char* name, const std::string& value) {
    text_ += (text_.empty() ? "" : ", ") + std::string(name) + " = " + value;
    return *this;
  }
  std::string text_;
};

// The FFI attributes of an op's Attrs (kernels/spec/op_attrs.h VisitAttrs):
// each attribute under its name, as the handlers' MO_XLA_FFI_ATTRS decodes it.
template <typename Attrs>
FfiAttrs FfiAttrsOf(const Attrs& attrs) {
  struct Writer {
    FfiAttrs* out;
    void operator()(const char* name, int64_t value) const { out->Int(name, value); }
    void operator()(const char* name, float value) const { out->Float(name, value); }
    void operator()(const char* name, const char* value) const { out->Str(name, value); }
    void operator()(const char* name, bool value) const { out->Int(name, value ? 1 : 0); }  // FfiAttrGetter reads it back
    void operator()(const char* name, const std::vector<float>& values) const { out->Floats(name, values); }
    void operator()(const char* name, const checks::Dims& value) const { out->Ints(name, value); }
  };
  FfiAttrs out;
  Writer writer{&out};
  VisitAttrs(attrs, writer);
  return out;
}

// The static shape of input i, as the spec headers take it.
inline checks::Dims InputDims(XlaOpKernelContext* ctx, int i) { return checks::DimsOf(ctx->InputShape(i)); }

// An array shape of `type` (an input's element type, ElementType(ctx, i)).
inline ::xla::Shape ArrayShape(::xla::PrimitiveType type, const checks::Dims& dims) {
  return ::xla::ShapeUtil::MakeShape(type, dims);
}

inline ::xla::PrimitiveType ElementType(XlaOpKernelContext* ctx, int i) {
  return ctx->InputXlaShape(i)->element_type();
}

// The shape of input i (its element type and static shape): an element-wise
// result.
inline ::xla::Shape ShapeLike(XlaOpKernelContext* ctx, int i) {
  return ArrayShape(ElementType(ctx, i), InputDims(ctx, i));
}

// Inputs 0 to n - 1, the operands of a call that takes them all.
inline std::vector<::xla::XlaOp> InputsUpTo(XlaOpKernelContext* ctx, int n) {
  std::vector<::xla::XlaOp> inputs;
  for (int i = 0; i < n; ++i) inputs.push_back(ctx->Input(i));
  return inputs;
}

// Emits the typed-FFI custom call `target` on `operands` with one result per
// shape of `results` (a tuple when several), and makes them the op's outputs
// 0, 1, ...
inline void EmitFfiCall(XlaOpKernelContext* ctx, const std::string& target, const std::vector<::xla::XlaOp>& operands,
                        const std::vector<::xla::Shape>& results, const FfiAttrs& attrs = FfiAttrs()) {
  const bool tuple = results.size() != 1;
  const ::xla::Shape shape = tuple ? ::xla::ShapeUtil::MakeTupleShape(results) : results[0];
  const ::xla::XlaOp call =
      ::xla::CustomCall(ctx->builder(), target, operands, shape, attrs.Text(), /*has_side_effect=*/false,
                        /*output_operand_aliasing=*/{}, /*literal=*/nullptr, ::xla::CustomCallSchedule::SCHEDULE_NONE,
                        ::xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
  for (size_t i = 0; i < results.size(); ++i) {
    ctx->SetOutput(static_cast<int>(i), tuple ? ::xla::GetTupleElement(call, static_cast<int64_t>(i)) : call);
  }
}

// Op kernel registration, deferred like the handlers' (kernels/xla/xla_ffi.h):
// MO_REGISTER_XLA_OP(Name("MetalOpsX").TypeConstraint(...), Kernel), Kernel
// any class (template arguments and all), adds the registration to this
// copy's list instead of constructing a static XlaOpRegistrar (which aborts
// the process on a name registered before: another copy of the library).
// kernels/xla/register_xla.cc registers the list once.
using XlaOpRegistration = decltype(std::declval<::tensorflow::XlaOpRegistrationBuilder>().Build(nullptr));
using XlaOpRegistrationFn = XlaOpRegistration (*)();

__attribute__((visibility("hidden"))) inline std::vector<XlaOpRegistrationFn>& XlaOpList() {
  static std::vector<XlaOpRegistrationFn>* list = new std::vector<XlaOpRegistrationFn>();
  return *list;
}

inline bool AddXlaOp(XlaOpRegistrationFn registration) {
  XlaOpList().push_back(registration);
  return true;
}

#define MO_REGISTER_XLA_OP(BUILDER, ...) MO_REGISTER_XLA_OP_UNIQ(__COUNTER__, BUILDER, __VA_ARGS__)
#define MO_REGISTER_XLA_OP_UNIQ(CTR, BUILDER, ...) MO_REGISTER_XLA_OP_UNIQ_(CTR, BUILDER, __VA_ARGS__)
#define MO_REGISTER_XLA_OP_UNIQ_(CTR, BUILDER, ...)                                                    \
  [[maybe_unused]] static const bool mo_xla_op_##CTR = ::mo::xla_kernels::AddXlaOp([] {               \
    return ::tensorflow::XlaOpRegistrationBuilder::BUILDER.Build(                                       \
        [](::tensorflow::OpKernelConstruction* context) -> ::tensorflow::OpKernel* {                    \
          return new __VA_ARGS__(context);                                                              \
        });                                                                                             \
  })

// Op NAME and its gradient op NAME "Grad", T in TYPES, run by
// XlaOpWithAttrs<ATTRS, COMPILE> and XlaOpWithAttrs<ATTRS, COMPILE##Grad>.
#define MO_REGISTER_XLA_OP_WITH_GRAD(NAME, TYPES, ATTRS, COMPILE)                  \
  MO_REGISTER_XLA_OP(Name(NAME).TypeConstraint("T", TYPES),                         \
                     ::mo::xla_kernels::XlaOpWithAttrs<ATTRS, COMPILE>);            \
  MO_REGISTER_XLA_OP(Name(NAME "Grad").TypeConstraint("T", TYPES),                  \
                     ::mo::xla_kernels::XlaOpWithAttrs<ATTRS, COMPILE##Grad>)
// The same for an op without a type attribute.
#define MO_REGISTER_XLA_OP_AND_GRAD(NAME, ATTRS, COMPILE)                                   \
  MO_REGISTER_XLA_OP(Name(NAME), ::mo::xla_kernels::XlaOpWithAttrs<ATTRS, COMPILE>);        \
  MO_REGISTER_XLA_OP(Name(NAME "Grad"), ::mo::xla_kernels::XlaOpWithAttrs<ATTRS, COMPILE##Grad>)

}  // namespace xla_kernels
}  // namespace mo

#endif  // MO_KERNELS_XLA_XLA_KERNEL_H_

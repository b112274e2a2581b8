// An op's attributes, declared once. The op's header (kernels/<op>/<op>.h)
// lists them in an X-macro, one ATTR(name, Kind, default, constraint...) each:
//
//   #define MO_SOFT_CLIP_ATTRS(ATTR) ATTR(degree, Int, 4, 1, 8)   (a made-up op; grep MO_DECLARE_ATTRS for real ones)
//
//   Int   (default, lo, hi)        an integer in [lo, hi], held as int
//   Int64 (default, lo, hi)        an integer in [lo, hi], held as int64_t (an
//                                  index into a tensor; hi INT64_MAX: no upper
//                                  bound, and TensorFlow's attribute says
//                                  `int >= lo`)
//   Float (default, lo, hi)        a float in [lo, hi] (NaN never is), held as float
//   FloatBelow (default, lo, hi)   a float in [lo, hi), held as float
//   Enum  (default, "a", "b", ...) one of the strings, held as its index; the
//                                  default is an index (the op's enum constant)
//   EnumIn (table, default, "a", ...) one of the strings, held as its index in
//                                  `table`, an array of every name (kActivationNames:
//                                  the activations' codes); the default is a code
//   IntList ({v, ...})             a list of integers, held as checks::Dims;
//   RequiredIntList ({})           the default a braced list; Required...: no
//   RequiredEnum ("a", "b", ...)   default (TensorFlow's `list(int)`, `{'a', 'b'}`)
//   Bool  (default)                true or false, held as bool
//   RequiredInt   (lo, hi)         Int, Int64 and Float without a default: the
//   RequiredInt64 (lo, hi)         caller sets them (TensorFlow's attribute
//   RequiredFloat (lo, hi)         says `int` or `float`); lo until read
//
// and everything else follows from the list:
//   MO_DECLARE_ATTRS("SoftClip", MO_SOFT_CLIP_ATTRS) (in namespace mo::<op>):
//     struct Attrs { int degree = 4; };  the members named as the attributes
//       (a debugger shows attrs.degree), the value every kernel and launcher takes;
//     Result ReadAttrs(get, Attrs*): reads and checks each attribute with
//       get(name, &value) (kernels/spec/checks.h ReadEach's reader): the shape
//       functions and TensorFlow kernels (kernels/spec/checks_tf.h), the Metal
//       glue (mo::metal::RegisterWithAttrs) and XLA's handlers
//       (MO_XLA_FFI_ATTRS, kernels/xla/xla_ffi.h), one message per check;
//     void VisitAttrs(const Attrs&, f): f(name, value) for each attribute, the
//       XLA call's attributes (FfiAttrsOf, kernels/xla/xla_kernel.h);
//   MO_OP_ATTRS(MO_SOFT_CLIP_ATTRS) in a REGISTER_OP chain:
//     .Attr("degree: int = 4"), TensorFlow's attribute of each.
// The checks are the op's (TensorFlow's own constraint syntax is not used:
// the messages name the op and the attribute, as every spec check's does).
// No TensorFlow API; plain C++17.
#ifndef MO_KERNELS_SPEC_OP_ATTRS_H_
#define MO_KERNELS_SPEC_OP_ATTRS_H_

#include <array>
#include <cmath>  // INFINITY, for a Float without a bound
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/spec/checks.h"

namespace mo {
namespace attrs {

// "1, 2, 3 or 4" for a short range, "in [lo, hi]" for a long one, "at
// least lo" for one without an upper bound.
inline std::string RangeText(int64_t lo, int64_t hi) {
  if (hi == INT64_MAX) return "at least " + std::to_string(lo);
  if (hi - lo > 5) return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  std::string s;
  for (int64_t v = lo; v <= hi; ++v) s += (v == lo ? "" : v == hi ? " or " : ", ") + std::to_string(v);
  return s;
}

// A float as TensorFlow's attribute syntax and a message write it (shortest
// text that reads back to the same float).
inline std::string FloatText(float v) {
  char text[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, static_cast<double>(v));
    if (std::strtof(text, nullptr) == v) break;
  }
  return text;
}

// "in [lo, hi]", "at least lo", "at most hi", or "a number" (no bound: NaN is
// what it refuses).
inline std::string FloatRangeText(double lo, double hi) {
  const bool low = lo > -std::numeric_limits<double>::infinity(), high = hi < std::numeric_limits<double>::infinity();
  const std::string l = FloatText(static_cast<float>(lo)), h = FloatText(static_cast<float>(hi));
  return low && high ? "in [" + l + ", " + h + "]" : low ? "at least " + l : high ? "at most " + h : "a number";
}

inline checks::Result Unreadable(const char* op, const char* name) {
  return checks::Invalid(op, ": could not read the attribute '", name, "'");
}

// Int and Int64: an integer in [lo, hi], held as V (a range beyond V's does
// not compile, through Valid).
template <typename V>
struct Integer {
  using Value = V;
  static constexpr Value Default(int64_t value, int64_t, int64_t) { return static_cast<Value>(value); }
  static constexpr bool Valid(int64_t value, int64_t lo, int64_t hi) {
    return lo <= value && value <= hi && lo >= std::numeric_limits<V>::min() && hi <= std::numeric_limits<V>::max();
  }
  // Without an upper bound, TensorFlow's attribute carries the minimum
  // (`int >= lo`), which the op definition shows and the wrappers read.
  static std::string Spec(const char* name, int64_t value, int64_t lo, int64_t hi) {
    const std::string minimum = hi == INT64_MAX ? " >= " + std::to_string(lo) : "";
    return std::string(name) + ": int" + minimum + " = " + std::to_string(value);
  }
  template <typename Get>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, int64_t, int64_t lo,
                             int64_t hi) {
    int64_t value = 0;  // read wide: a huge value gets the range's message
    if (!get(name, &value)) return Unreadable(op, name);
    if (value < lo || value > hi) {
      return checks::Invalid(op, ": '", name, "' must be ", RangeText(lo, hi), ", got ", value);
    }
    *out = static_cast<Value>(value);
    return checks::Ok();
  }
  template <typename F>
  static void Visit(F& f, const char* name, Value value, int64_t, int64_t, int64_t) {
    f(name, static_cast<int64_t>(value));
  }
};

using Int = Integer<int>;
using Int64 = Integer<int64_t>;

struct Float {
  using Value = float;
  static constexpr Value Default(double value, double, double) { return static_cast<Value>(value); }
  static constexpr bool Valid(double value, double lo, double hi) { return lo <= value && value <= hi; }
  static std::string Spec(const char* name, double value, double, double) {
    return std::string(name) + ": float = " + FloatText(static_cast<float>(value));
  }
  template <typename Get>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, double, double lo, double hi,
                             bool below = false) {
    float value = 0.0f;
    if (!get(name, &value)) return Unreadable(op, name);
    if (!(value >= lo && (below ? value < hi : value <= hi))) {
      const std::string range = below ? "in [" + FloatText(static_cast<float>(lo)) + ", " +
                                            FloatText(static_cast<float>(hi)) + ")"
                                      : FloatRangeText(lo, hi);
      return checks::Invalid(op, ": '", name, "' must be ", range, ", got ", FloatText(value));
    }
    *out = value;
    return checks::Ok();
  }
  template <typename F>
  static void Visit(F& f, const char* name, Value value, double, double, double) {
    f(name, value);
  }
};

// A float in [lo, hi): Float's reads with hi itself refused.
struct FloatBelow : Float {
  static constexpr bool Valid(double value, double lo, double hi) { return lo <= value && value < hi; }
  template <typename Get>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, double value, double lo,
                             double hi) {
    return Float::Read(get, op, name, out, value, lo, hi, true);
  }
};

struct Enum {
  using Value = int;
  template <typename... Choices>
  static constexpr Value Default(int index, Choices...) {
    static_assert(sizeof...(Choices) >= 1, "an Enum attribute has at least one choice");
    return index;
  }
  template <typename... Choices>
  static constexpr bool Valid(int index, Choices...) {
    return 0 <= index && index < static_cast<int>(sizeof...(Choices));
  }
  template <typename... Choices>
  static std::string Spec(const char* name, int index, Choices... choices) {
    const char* const all[] = {choices...};
    std::string s = std::string(name) + ": {";
    for (size_t i = 0; i < sizeof...(Choices); ++i) s += std::string(i ? ", " : "") + "'" + all[i] + "'";
    return s + "} = '" + all[index] + "'";
  }
  template <typename Get, typename... Choices>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, int, Choices... choices) {
    const char* const all[] = {choices...};
    std::string value;
    if (!get(name, &value)) return Unreadable(op, name);
    std::string listed;
    for (size_t i = 0; i < sizeof...(Choices); ++i) {
      if (value == all[i]) {
        *out = static_cast<Value>(i);
        return checks::Ok();
      }
      listed += std::string(i == 0 ? "" : i + 1 == sizeof...(Choices) ? " or " : ", ") + "'" + all[i] + "'";
    }
    return checks::Invalid(op, ": '", name, "' must be ", listed, ", got '", value, "'");
  }
  template <typename F, typename... Choices>
  static void Visit(F& f, const char* name, Value value, int, Choices... choices) {
    const char* const all[] = {choices...};
    f(name, all[value]);
  }
};

constexpr bool SameText(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// One of the choices, held as its index in `table` (every name, in the order
// of their codes); read, written and checked as Enum's choices.
struct EnumIn {
  using Value = int;
  template <size_t K, typename... Choices>
  static constexpr Value Default(const char* const (&)[K], int code, Choices...) {
    return code;
  }
  template <size_t K, typename... Choices>
  static constexpr bool Valid(const char* const (&table)[K], int code, Choices... choices) {
    return 0 <= code && code < static_cast<int>(K) && (SameText(table[code], choices) || ...);
  }
  template <size_t K, typename... Choices>
  static std::string Spec(const char* name, const char* const (&table)[K], int code, Choices... choices) {
    return Enum::Spec(name, ChoiceOf(table[code], choices...), choices...);
  }
  template <typename Get, size_t K, typename... Choices>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, const char* const (&table)[K],
                             int, Choices... choices) {
    const char* const all[] = {choices...};
    int choice = 0;
    MO_RETURN_IF_INVALID(Enum::Read(get, op, name, &choice, 0, choices...));
    *out = static_cast<Value>(IndexIn(table, all[choice]));
    return checks::Ok();
  }
  template <typename F, size_t K, typename... Choices>
  static void Visit(F& f, const char* name, Value value, const char* const (&table)[K], int, Choices...) {
    f(name, table[value]);
  }

 private:
  // The index of `text` among `names` (Valid: it is there).
  template <typename... Names>
  static int ChoiceOf(const char* text, Names... names) {
    const char* const all[] = {names...};
    int i = 0;
    while (!SameText(all[i], text)) ++i;
    return i;
  }
  template <size_t K>
  static int IndexIn(const char* const (&table)[K], const char* text) {
    int i = 0;
    while (!SameText(table[i], text)) ++i;
    return i;
  }
};

// IntList ({v, ...}): a list of integers, held as checks::Dims; the
// default a braced list ({1, 1, 1, 1}, or {} for an empty one), TensorFlow's
// attribute `list(int) = [1, 1, 1, 1]`. RequiredIntList ({}): one without a
// default (`list(int)`), the given list until read. The op checks the
// lengths and values itself (its messages name what the list means).
struct IntList {
  using Value = checks::Dims;
  static Value Default(std::initializer_list<int64_t> value) { return Value(value); }
  static constexpr bool Valid(std::initializer_list<int64_t>) { return true; }
  static std::string Spec(const char* name, std::initializer_list<int64_t> value) {
    std::string s = std::string(name) + ": list(int) = [";
    for (const int64_t* v = value.begin(); v != value.end(); ++v) {
      s += (v == value.begin() ? "" : ", ") + std::to_string(*v);
    }
    return s + "]";
  }
  template <typename Get>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, std::initializer_list<int64_t>) {
    Value value;  // read whole: a reader may append
    if (!get(name, &value)) return Unreadable(op, name);
    *out = std::move(value);
    return checks::Ok();
  }
  template <typename F>
  static void Visit(F& f, const char* name, const Value& value, std::initializer_list<int64_t>) {
    f(name, value);
  }
};

struct RequiredIntList : IntList {
  static std::string Spec(const char* name, std::initializer_list<int64_t>) { return std::string(name) + ": list(int)"; }
};

// RequiredEnum ("a", "b", ...): Enum without a default (TensorFlow's
// attribute `{'a', 'b'}`), the first choice until read.
struct RequiredEnum {
  using Value = int;
  template <typename... Choices>
  static constexpr Value Default(Choices... choices) {
    return Enum::Default(0, choices...);
  }
  template <typename... Choices>
  static constexpr bool Valid(Choices... choices) {
    return Enum::Valid(0, choices...);
  }
  template <typename... Choices>
  static std::string Spec(const char* name, Choices... choices) {
    const std::string spec = Enum::Spec(name, 0, choices...);
    return spec.substr(0, spec.rfind(" = "));
  }
  template <typename Get, typename... Choices>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, Choices... choices) {
    return Enum::Read(get, op, name, out, 0, choices...);
  }
  template <typename F, typename... Choices>
  static void Visit(F& f, const char* name, Value value, Choices... choices) {
    Enum::Visit(f, name, value, 0, choices...);
  }
};

// Bool and AnyFloat (below): TensorFlow's bool and float, read as they are.
template <typename V>
struct AsIs {
  using Value = V;
  static constexpr Value Default(V value) { return value; }
  static constexpr bool Valid(V) { return true; }
  static std::string Spec(const char* name, V value) {
    if constexpr (std::is_same_v<V, bool>) return std::string(name) + ": bool = " + (value ? "true" : "false");
    else return std::string(name) + ": float = " + FloatText(value);
  }
  template <typename Get>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, V) {
    return get(name, out) ? checks::Ok() : Unreadable(op, name);
  }
  template <typename F>
  static void Visit(F& f, const char* name, Value value, V) {
    f(name, value);
  }
};

using Bool = AsIs<bool>;

// Kind without a default: the caller always sets it. Its member starts at
// lo (a value the checks accept) until ReadAttrs reads it; TensorFlow's
// attribute is the kind's without ` = default`.
template <typename Kind>
struct Required {
  using Value = typename Kind::Value;
  template <typename Lo, typename Hi>
  static constexpr Value Default(Lo lo, Hi hi) {
    return Kind::Default(lo, lo, hi);
  }
  template <typename Lo, typename Hi>
  static constexpr bool Valid(Lo lo, Hi hi) {
    return Kind::Valid(lo, lo, hi);
  }
  template <typename Lo, typename Hi>
  static std::string Spec(const char* name, Lo lo, Hi hi) {
    const std::string spec = Kind::Spec(name, lo, lo, hi);
    return spec.substr(0, spec.rfind(" = "));
  }
  template <typename Get, typename Lo, typename Hi>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, Lo lo, Hi hi) {
    return Kind::Read(get, op, name, out, lo, lo, hi);
  }
  template <typename F, typename Lo, typename Hi>
  static void Visit(F& f, const char* name, Value value, Lo lo, Hi hi) {
    Kind::Visit(f, name, value, lo, lo, hi);
  }
};

// FloatList<N> (what)              N floats, TensorFlow's `list(float)`, held as
//                                  std::array<float, N>, without a default; `what`
//                                  says what the list holds, in the message for a
//                                  list of another length ("'aabb' must be [min_x,
//                                  ..., max_z], got 5 values"). Visited as a
//                                  std::vector<float> (an array attribute of the
//                                  XLA call).
// AnyFloat (default)               a float the op checks itself (NaN and the
// RequiredAnyFloat (start)         infinities reach its check and its message),
//                                  held as float; RequiredAnyFloat without a
//                                  default (`float`), `start` until read.
template <size_t N>
struct FloatList {
  using Value = std::array<float, N>;
  static constexpr Value Default(const char*) { return Value{}; }
  static constexpr bool Valid(const char*) { return N > 0; }
  static std::string Spec(const char* name, const char*) { return std::string(name) + ": list(float)"; }
  template <typename Get>
  static checks::Result Read(Get& get, const char* op, const char* name, Value* out, const char* what) {
    std::vector<float> values;
    if (!get(name, &values)) return Unreadable(op, name);
    if (values.size() != N) {
      return checks::Invalid(op, ": '", name, "' must be ", what, ", got ", values.size(), " values");
    }
    for (size_t i = 0; i < N; ++i) (*out)[i] = values[i];
    return checks::Ok();
  }
  template <typename F>
  static void Visit(F& f, const char* name, const Value& value, const char*) {
    f(name, std::vector<float>(value.begin(), value.end()));
  }
};

using AnyFloat = AsIs<float>;

struct RequiredAnyFloat : AnyFloat {
  static std::string Spec(const char* name, float) { return std::string(name) + ": float"; }
};

using RequiredInt = Required<Int>;
using RequiredInt64 = Required<Int64>;
using RequiredFloat = Required<Float>;

}  // namespace attrs
}  // namespace mo

// One attribute's part of each generated piece (ATTR of the op's list).
#define MO_ATTRS_MEMBER_(name, Kind, ...) ::mo::attrs::Kind::Value name = ::mo::attrs::Kind::Default(__VA_ARGS__);
#define MO_ATTRS_READ_(name, Kind, ...) \
  MO_RETURN_IF_INVALID(::mo::attrs::Kind::Read(get, op, #name, &a->name, __VA_ARGS__));
#define MO_ATTRS_VISIT_(name, Kind, ...) ::mo::attrs::Kind::Visit(f, #name, a.name, __VA_ARGS__);
#define MO_ATTRS_SPEC_(name, Kind, ...) .Attr(::mo::attrs::Kind::Spec(#name, __VA_ARGS__))
#define MO_ATTRS_VALID_(name, Kind, ...) \
  static_assert(::mo::attrs::Kind::Valid(__VA_ARGS__), "attribute '" #name "': its default breaks its constraint");

// The op's Attrs, ReadAttrs and VisitAttrs (above), in the op's namespace;
// OP names the op in the messages. A default outside its constraint does not
// compile.
#define MO_DECLARE_ATTRS(OP, LIST)                                \
  LIST(MO_ATTRS_VALID_)                                           \
  struct Attrs {                                                  \
    LIST(MO_ATTRS_MEMBER_)                                        \
  };                                                              \
  template <typename Get>                                         \
  ::mo::checks::Result ReadAttrs(Get&& get, Attrs* a) {           \
    [[maybe_unused]] constexpr const char* op = OP;               \
    LIST(MO_ATTRS_READ_)                                          \
    return ::mo::checks::Ok();                                    \
  }                                                               \
  template <typename F>                                           \
  void VisitAttrs([[maybe_unused]] const Attrs& a, F&& f) {       \
    LIST(MO_ATTRS_VISIT_)                                         \
  }                                                               \
  static_assert(true, "a declaration ends with a semicolon")

// MO_DECLARE_ATTRS with checks that span attributes (a list's length, one
// attribute's value given another's): struct Attrs (the declaration's, in
// namespace declared) whose ReadAttrs reads as MO_DECLARE_ATTRS does, then
// returns the op's CheckAttrs(const Attrs&), which the op defines after it.
#define MO_DECLARE_CHECKED_ATTRS(OP, LIST)                    \
  namespace declared {                                        \
  MO_DECLARE_ATTRS(OP, LIST);                                 \
  }                                                           \
  struct Attrs : declared::Attrs {};                          \
  inline ::mo::checks::Result CheckAttrs(const Attrs& a);     \
  template <typename Get>                                     \
  ::mo::checks::Result ReadAttrs(Get&& get, Attrs* a) {       \
    MO_RETURN_IF_INVALID(declared::ReadAttrs(get, a));        \
    return CheckAttrs(*a);                                    \
  }                                                           \
  template <typename F>                                       \
  void VisitAttrs(const Attrs& a, F&& f) {                    \
    declared::VisitAttrs(a, f);                               \
  }                                                           \
  static_assert(true, "a declaration ends with a semicolon")

// The attributes of an op that extends another's (a static form's budget):
// struct NAME : BASE, DECLARED::Attrs {} (DECLARED: the namespace of the
// extension's MO_DECLARE_ATTRS), whose ReadAttrs reads and checks BASE's,
// then the extension's, and whose VisitAttrs visits both in that order.
#define MO_EXTEND_ATTRS(NAME, BASE, DECLARED)                               \
  struct NAME : BASE, DECLARED::Attrs {};                                  \
  template <typename Get>                                                  \
  ::mo::checks::Result ReadAttrs(Get&& get, NAME* a) {                     \
    MO_RETURN_IF_INVALID(ReadAttrs(get, static_cast<BASE*>(a)));           \
    return DECLARED::ReadAttrs(get, static_cast<DECLARED::Attrs*>(a));     \
  }                                                                        \
  template <typename F>                                                    \
  void VisitAttrs(const NAME& a, F&& f) {                                  \
    VisitAttrs(static_cast<const BASE&>(a), f);                            \
    DECLARED::VisitAttrs(a, f);                                            \
  }                                                                        \
  static_assert(true, "a declaration ends with a semicolon")

// TensorFlow's .Attr("...") of each attribute, in a REGISTER_OP chain.
#define MO_OP_ATTRS(LIST) LIST(MO_ATTRS_SPEC_)

#endif  // MO_KERNELS_SPEC_OP_ATTRS_H_

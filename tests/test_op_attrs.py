"""kernels/spec/op_attrs.h, the declaration of an op's attributes, compiled
alone (plain C++, no TensorFlow): the REGISTER_OP text, the read and check of
each kind and its message, the visit the XLA call's attributes come from, and
a default outside its constraint refused at compile time. The ops that use it
are tested through TensorFlow (tests/test_sh_encode.py, tests/test_xla.py,
tests/test_op_signatures.py); Float has no such op yet."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = os.environ.get("CXX", "g++")

pytestmark = pytest.mark.source_tree("kernels/spec/op_attrs.h")

PROGRAM = r"""
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>

#include "kernels/spec/op_attrs.h"

#define MO_EXAMPLE_ATTRS(ATTR) \
  ATTR(levels, Int, 16, 1, 32) \
  ATTR(mode, Enum, 1, "linear", "smoothstep", "nearest") \
  ATTR(scale, Float, 1.5, 1.0, 4.0)
namespace example {
MO_DECLARE_ATTRS("Example", MO_EXAMPLE_ATTRS);
}

// A reader over name -> text, as TensorFlow's and the FFI dictionary's readers are over theirs.
struct Reader {
  std::map<std::string, std::string> values;
  template <typename T>
  bool operator()(const char* name, T* value) const {
    auto it = values.find(name);
    if (it == values.end()) return false;
    if constexpr (std::is_same_v<T, std::string>) {
      *value = it->second;
    } else if constexpr (std::is_same_v<T, float>) {
      *value = std::stof(it->second);
    } else if constexpr (std::is_same_v<T, mo::checks::Dims>) {  // a list: integers separated by spaces
      std::istringstream in(it->second);
      for (int64_t v; in >> v;) value->push_back(v);
    } else {
      *value = static_cast<T>(std::stoll(it->second));
    }
    return true;
  }
};

struct Printer {
  void operator()(const char* name, int64_t v) const { std::printf("visit %s=%lld\n", name, (long long)v); }
  void operator()(const char* name, float v) const { std::printf("visit %s=%g\n", name, v); }
  void operator()(const char* name, const char* v) const { std::printf("visit %s='%s'\n", name, v); }
  void operator()(const char* name, const mo::checks::Dims& v) const {
    std::printf("visit %s=[", name);
    for (size_t i = 0; i < v.size(); ++i) std::printf("%s%lld", i ? " " : "", (long long)v[i]);
    std::printf("]\n");
  }
};

// Reads each case into an Attrs (its namespace's ReadAttrs and VisitAttrs,
// found through the type) and prints the visit, or the check's message.
template <typename Attrs, typename Cases, typename Visitor = Printer>
void ReadAndVisit(const Cases& cases, Visitor visitor = Visitor()) {
  for (const auto& r : cases) {
    Attrs b;
    const mo::checks::Result result = ReadAttrs(r, &b);
    if (result.ok) {
      VisitAttrs(b, visitor);
    } else {
      std::printf("error %s\n", result.message.c_str());
    }
  }
}

// Prints each attribute's REGISTER_OP text.
#define MO_PRINT_SPEC_(name, Kind, ...) std::printf("spec %s\n", ::mo::attrs::Kind::Spec(#name, __VA_ARGS__).c_str());

int main() {
  example::Attrs a;
  std::printf("default %d %d %g\n", a.levels, a.mode, a.scale);
  MO_EXAMPLE_ATTRS(MO_PRINT_SPEC_)
  const Reader cases[] = {
      {{{"levels", "8"}, {"mode", "nearest"}, {"scale", "2.5"}}},
      {{{"levels", "33"}, {"mode", "nearest"}, {"scale", "2.5"}}},
      {{{"levels", "4294967297"}, {"mode", "nearest"}, {"scale", "2.5"}}},
      {{{"levels", "8"}, {"mode", "cubic"}, {"scale", "2.5"}}},
      {{{"levels", "8"}, {"mode", "linear"}, {"scale", "nan"}}},
      {{{"levels", "8"}, {"mode", "linear"}}},
  };
  for (const Reader& r : cases) {
    example::Attrs b;
    const mo::checks::Result result = example::ReadAttrs(r, &b);
    if (result.ok) {
      std::printf("read %d %d %g\n", b.levels, b.mode, b.scale);
      example::VisitAttrs(b, Printer());
    } else {
      std::printf("error %s\n", result.message.c_str());
    }
  }
}
"""

EXPECTED = """default 16 1 1.5
spec levels: int = 16
spec mode: {'linear', 'smoothstep', 'nearest'} = 'smoothstep'
spec scale: float = 1.5
read 8 2 2.5
visit levels=8
visit mode='nearest'
visit scale=2.5
error Example: 'levels' must be in [1, 32], got 33
error Example: 'levels' must be in [1, 32], got 4294967297
error Example: 'mode' must be 'linear', 'smoothstep' or 'nearest', got 'cubic'
error Example: 'scale' must be in [1, 4], got nan
error Example: could not read the attribute 'scale'
"""


def compile_program(tmp_path, text):
    if shutil.which(CXX) is None:
        pytest.skip(f"needs {CXX}")
    src, exe = tmp_path / "op_attrs_main.cc", tmp_path / "op_attrs_main"
    src.write_text(text)
    return subprocess.run([CXX, "-std=c++17", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror", "-I", ROOT,
                           str(src), "-o", str(exe)], capture_output=True, text=True, timeout=120), exe


def test_the_declaration_gives_specs_reads_checks_and_visits(tmp_path):
    built, exe = compile_program(tmp_path, PROGRAM)
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout == EXPECTED


@pytest.mark.parametrize("bad", ["ATTR(levels, Int, 0, 1, 32)", 'ATTR(mode, Enum, 3, "a", "b", "c")',
                                 "ATTR(scale, Float, 5.0, 1.0, 4.0)"])
def test_a_default_outside_its_constraint_does_not_compile(tmp_path, bad):
    text = PROGRAM.replace('ATTR(levels, Int, 16, 1, 32)', bad) if "levels" in bad else \
        PROGRAM.replace('ATTR(mode, Enum, 1, "linear", "smoothstep", "nearest")', bad) if "mode" in bad else \
        PROGRAM.replace("ATTR(scale, Float, 1.5, 1.0, 4.0)", bad)
    assert text != PROGRAM
    built, _ = compile_program(tmp_path, text)
    assert built.returncode != 0 and "its default breaks its constraint" in built.stderr, built.stderr


INT64_PROGRAM = PROGRAM[: PROGRAM.index("int main()")] + r"""
#define MO_INDEX_ATTRS(ATTR) ATTR(index, Int64, 0, 0, INT64_MAX) ATTR(offset, Int64, -2, -4, 4)
namespace indexed {
MO_DECLARE_ATTRS("Indexed", MO_INDEX_ATTRS);
}

int main() {
  static_assert(std::is_same_v<decltype(indexed::Attrs::index), int64_t>, "Int64 is held as int64_t");
  MO_INDEX_ATTRS(MO_PRINT_SPEC_)
  const Reader cases[] = {
      {{{"index", "4294967299"}, {"offset", "-4"}}},
      {{{"index", "-1"}, {"offset", "0"}}},
      {{{"index", "3"}, {"offset", "5"}}},
  };
  ReadAndVisit<indexed::Attrs>(cases);
}
"""

INT64_EXPECTED = """spec index: int >= 0 = 0
spec offset: int = -2
visit index=4294967299
visit offset=-4
error Indexed: 'index' must be at least 0, got -1
error Indexed: 'offset' must be in [-4, 4], got 5
"""


def test_an_int64_attribute_keeps_64_bits_and_may_have_no_upper_bound(tmp_path):
    """Int64 (an index into a tensor, ZeroOut's preserve_index): read without
    truncation; without an upper bound, its minimum in TensorFlow's attribute
    and its message "at least lo"."""
    built, exe = compile_program(tmp_path, INT64_PROGRAM)
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout == INT64_EXPECTED


BOOL_PROGRAM = PROGRAM[: PROGRAM.index("int main()")] + r"""
#define MO_GRID_ATTRS(ATTR) \
  ATTR(jitter, Bool, false) ATTR(levels, RequiredInt, 1, 64) ATTR(step, RequiredFloat, 0.0, 1e10) \
  ATTR(budget, RequiredInt64, 0, INT64_MAX) ATTR(scale, RequiredFloat, -INFINITY, INFINITY)
namespace grid {
MO_DECLARE_ATTRS("Grid", MO_GRID_ATTRS);
}

struct BoolPrinter : Printer {
  using Printer::operator();
  void operator()(const char* name, bool v) const { std::printf("visit %s=%s\n", name, v ? "true" : "false"); }
};

int main() {
  static_assert(std::is_same_v<decltype(grid::Attrs::jitter), bool>, "Bool is held as bool");
  grid::Attrs a;
  std::printf("default %d %d %g %lld %g\n", a.jitter, a.levels, a.step, (long long)a.budget, a.scale);
  MO_GRID_ATTRS(MO_PRINT_SPEC_)
  const Reader cases[] = {
      {{{"jitter", "1"}, {"levels", "16"}, {"step", "0.25"}, {"budget", "4294967299"}, {"scale", "-2"}}},
      {{{"jitter", "0"}, {"levels", "65"}, {"step", "0.25"}, {"budget", "1"}, {"scale", "1"}}},
      {{{"jitter", "0"}, {"levels", "2"}, {"step", "-1"}, {"budget", "1"}, {"scale", "1"}}},
      {{{"jitter", "0"}, {"levels", "2"}, {"step", "1"}, {"budget", "1"}, {"scale", "nan"}}},
      {{{"jitter", "0"}, {"step", "0.5"}, {"budget", "1"}, {"scale", "1"}}},
      {{{"levels", "2"}, {"step", "0.5"}, {"budget", "1"}, {"scale", "1"}}},
  };
  ReadAndVisit<grid::Attrs>(cases, BoolPrinter());
}
"""

BOOL_EXPECTED = """default 0 1 0 0 -inf
spec jitter: bool = false
spec levels: int
spec step: float
spec budget: int >= 0
spec scale: float
visit jitter=true
visit levels=16
visit step=0.25
visit budget=4294967299
visit scale=-2
error Grid: 'levels' must be in [1, 64], got 65
error Grid: 'step' must be in [0, 1e+10], got -1
error Grid: 'scale' must be a number, got nan
error Grid: could not read the attribute 'levels'
error Grid: could not read the attribute 'jitter'
"""


def test_bool_and_required_attributes(tmp_path):
    """Bool (held as bool, visited as bool for the XLA call's attributes) and
    the Required kinds: no default in TensorFlow's attribute, the kind's range
    checked as with a default."""
    built, exe = compile_program(tmp_path, BOOL_PROGRAM)
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout == BOOL_EXPECTED


LIST_PROGRAM = PROGRAM[: PROGRAM.index("int main()")] + r"""
#include <sstream>
#include <vector>

#define MO_BOX_ATTRS(ATTR) \
  ATTR(box, FloatList<4>, "[x0, y0, x1, y1]") ATTR(step, RequiredAnyFloat, 0.0) ATTR(angle, AnyFloat, 0.5)
namespace boxed {
MO_DECLARE_ATTRS("Boxed", MO_BOX_ATTRS);
}

// Lists as comma-separated text.
struct ListReader : Reader {
  using Reader::operator();
  bool operator()(const char* name, std::vector<float>* value) const {
    auto it = values.find(name);
    if (it == values.end()) return false;
    std::stringstream text(it->second);
    std::string item;
    while (std::getline(text, item, ',')) value->push_back(std::stof(item));
    return true;
  }
};

struct ListPrinter : Printer {
  using Printer::operator();
  void operator()(const char* name, const std::vector<float>& v) const {
    std::printf("visit %s=[", name);
    for (size_t i = 0; i < v.size(); ++i) std::printf("%s%g", i ? " " : "", v[i]);
    std::printf("]\n");
  }
};

int main() {
  static_assert(std::is_same_v<decltype(boxed::Attrs::box), std::array<float, 4>>, "FloatList<4> is held as an array");
  boxed::Attrs a;
  std::printf("default %g %g %g %g %g %g\n", a.box[0], a.box[1], a.box[2], a.box[3], a.step, a.angle);
  MO_BOX_ATTRS(MO_PRINT_SPEC_)
  const ListReader cases[] = {
      {{{{"box", "0,1,2,3.5"}, {"step", "nan"}, {"angle", "-inf"}}}},
      {{{{"box", "0,1,2"}, {"step", "1"}, {"angle", "0"}}}},
      {{{{"box", ""}, {"step", "1"}, {"angle", "0"}}}},
      {{{{"step", "1"}, {"angle", "0"}}}},
  };
  ReadAndVisit<boxed::Attrs>(cases, ListPrinter());
}
"""

LIST_EXPECTED = """default 0 0 0 0 0 0.5
spec box: list(float)
spec step: float
spec angle: float = 0.5
visit box=[0 1 2 3.5]
visit step=nan
visit angle=-inf
error Boxed: 'box' must be [x0, y0, x1, y1], got 3 values
error Boxed: 'box' must be [x0, y0, x1, y1], got 0 values
error Boxed: could not read the attribute 'box'
"""


def test_float_list_and_any_float_attributes(tmp_path):
    """FloatList<N> (TensorFlow's list(float), RayMarch's aabb): held as N
    floats, a list of another length refused with the list's own text, visited
    as a vector (an array attribute of the XLA call); AnyFloat and
    RequiredAnyFloat: read unchecked, NaN and infinities included, for the op's
    own check and message."""
    built, exe = compile_program(tmp_path, LIST_PROGRAM)
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout == LIST_EXPECTED


INT_LIST_PROGRAM = PROGRAM[: PROGRAM.index("int main()")] + r"""
#define MO_WINDOW_ATTRS(ATTR) \
  ATTR(strides, RequiredIntList, {}) ATTR(pads, IntList, {}) ATTR(dilations, IntList, {1, 1, 1, 1}) \
  ATTR(padding, RequiredEnum, "SAME", "VALID")
namespace window {
MO_DECLARE_CHECKED_ATTRS("Window", MO_WINDOW_ATTRS);
inline mo::checks::Result CheckAttrs(const Attrs& a) {
  if (a.dilations.size() != 4) return mo::checks::Invalid("dilations must have 4 elements, got ", a.dilations.size());
  return mo::checks::Ok();
}
}

int main() {
  static_assert(std::is_same_v<decltype(window::Attrs::strides), mo::checks::Dims>, "IntList is held as Dims");
  window::Attrs a;
  std::printf("default %zu %zu %zu %d\n", a.strides.size(), a.pads.size(), a.dilations.size(), a.padding);
  MO_WINDOW_ATTRS(MO_PRINT_SPEC_)
  const Reader cases[] = {
      {{{"strides", "1 2 2 1"}, {"pads", ""}, {"dilations", "1 1 1 1"}, {"padding", "VALID"}}},
      {{{"strides", "1 4294967299"}, {"pads", "0 0 1 2 3 4 0 0"}, {"dilations", "1 1 1 2"}, {"padding", "SAME"}}},
      {{{"strides", "1 1 1 1"}, {"pads", ""}, {"dilations", "1 1"}, {"padding", "SAME"}}},
      {{{"strides", "1 1 1 1"}, {"pads", ""}, {"dilations", "1 1 1 1"}, {"padding", "FULL"}}},
      {{{"pads", ""}, {"dilations", "1 1 1 1"}, {"padding", "SAME"}}},
  };
  ReadAndVisit<window::Attrs>(cases);
}
"""

INT_LIST_EXPECTED = """default 0 0 4 0
spec strides: list(int)
spec pads: list(int) = []
spec dilations: list(int) = [1, 1, 1, 1]
spec padding: {'SAME', 'VALID'}
visit strides=[1 2 2 1]
visit pads=[]
visit dilations=[1 1 1 1]
visit padding='VALID'
visit strides=[1 4294967299]
visit pads=[0 0 1 2 3 4 0 0]
visit dilations=[1 1 1 2]
visit padding='SAME'
error dilations must have 4 elements, got 2
error Window: 'padding' must be 'SAME' or 'VALID', got 'FULL'
error Window: could not read the attribute 'strides'
"""


def test_int_list_and_required_enum_attributes(tmp_path):
    """IntList (held as Dims, any length, 64-bit values, visited whole for
    the XLA call's attributes), RequiredIntList and RequiredEnum: TensorFlow's
    `list(int) = [...]`, `list(int)` and `{'a', 'b'}`; MO_DECLARE_CHECKED_ATTRS
    runs the op's CheckAttrs after the reads."""
    built, exe = compile_program(tmp_path, INT_LIST_PROGRAM)
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout == INT_LIST_EXPECTED

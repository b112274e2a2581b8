"""Checks Metal shaders against rules of the Metal Shading Language (MSL) on a
machine without Apple's compiler.

Input: the self-contained shader sources the library embeds
(tools/build/embed_metal.py's output, build/gen/<name>.metal). Each is checked by

1. `compile`: clang compiling it as C++ for OpenCL 2021 (`-x clcpp
   -cl-std=clc++2021 -target spir64`, no OpenCL headers, no fp64) against
   tests/msl_check/include/metal_stdlib, a stand-in that maps MSL's `device`,
   `threadgroup` and `constant` onto OpenCL's address spaces and `thread`
   (MSL's default, the space of `this` in a method) onto OpenCL's default,
   generic, and declares only the MSL types and functions our shaders use,
   with MSL's signatures. So `double` and an undeclared MSL function are
   errors, and a constant pointer is not accepted where another is expected;
2. rules read from the LLVM IR of that compile (`-emit-llvm`, line tables):
   `address-space` (a device or threadgroup pointer converted to generic,
   i.e. passed where MSL expects a thread one: Apple's compiler rejects it),
   `recursion`, `function-pointer`, `threadgroup-memory` (static threadgroup
   arrays above 32 KiB per kernel), `int64-division` (64-bit integer division
   or remainder by a non-constant: Apple GPUs have no 64-bit divider);
3. a lint of the preprocessed source, for what no compiler flag catches:
   `long-long`, `double`, `union`, `exceptions`, `cxx-features` (goto,
   virtual, new/delete, dynamic_cast, typeid, thread_local, lambdas),
   `atomic64`, `atomic-float-msl` (atomic_float needs MSL 3.0),
   `buffer-index` (0..30, once per kernel; an index may be an enumerator of
   an enum in the source), `attributes` (only the MSL attributes our kernels
   use).

Kernel templates instantiated as MLX writes them (`template
[[host_name("name")]] [[kernel]] decltype(f<...>) f<...>;`) are compiled with
those attribute lists blanked (clang rejects them there, Apple's compiler
does not) and count as kernels for the rules above; C++ for OpenCL allows
static threadgroup arrays only in its own kernels, so such a template keeps
its threadgroup memory in a [[threadgroup(i)]] argument.

A 64-bit division done once per thread or threadgroup (not per element) may
be waived on its source line with `// msl_check: allow int64-division: why`.
Each violation is printed as `file:line: [rule] message`, the file and line
being those of the original kernels/ source (found through embed_metal's
`// ---- begin/end` markers). Exit status 1 on any violation, 2 when no clang
with C++ for OpenCL 2021 (clang 14 or newer) is found.

    python tools/check/msl_check.py build/gen/*.metal
    python tools/check/msl_check.py --ensure-clang   # installs Debian's clang when root
"""
import argparse
import collections
import glob
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STDLIB_DIR = os.path.join(ROOT, "tests", "msl_check", "include")

# Apple's limits (Metal feature set tables): 32 KiB of threadgroup memory per
# threadgroup, buffer argument indices 0..30.
MAX_THREADGROUP_BYTES = 32 * 1024
MAX_BUFFER_INDEX = 30

RULES = collections.OrderedDict([
    ("compile", "compiles as MSL would (address spaces, declared MSL API only, no double)"),
    ("address-space", "no device/threadgroup pointer converted to an unqualified (thread) one"),
    ("recursion", "no recursive call"),
    ("function-pointer", "no function pointer or indirect call"),
    ("threadgroup-memory", f"static threadgroup memory of a kernel <= {MAX_THREADGROUP_BYTES} bytes"),
    ("int64-division", "no 64-bit integer division or remainder by a non-constant"),
    ("long-long", "no long long type or ll/ull literal (MSL's 64-bit types are long/ulong)"),
    ("double", "no double"),
    ("union", "no union"),
    ("exceptions", "no throw/try/catch/noexcept"),
    ("cxx-features", "no goto, virtual, new/delete, dynamic_cast, typeid, thread_local or lambda"),
    ("atomic64", "no 64-bit atomic types"),
    ("atomic-float-msl", "atomic_float only in shaders that ask for MSL 3.0"),
    ("buffer-index", f"[[buffer(i)]] indices in 0..{MAX_BUFFER_INDEX}, each once per kernel"),
    ("attributes", "only known MSL attributes"),
])

# The MSL attributes our kernels use ([[...]]); a typo is otherwise ignored
# by clang here (and rejected by Apple's compiler).
KNOWN_ATTRIBUTES = {
    "buffer", "threadgroup", "thread_position_in_grid", "threads_per_grid", "threadgroup_position_in_grid",
    "threadgroups_per_grid", "thread_index_in_threadgroup", "thread_position_in_threadgroup",
    "threads_per_threadgroup", "simdgroup_index_in_threadgroup", "thread_index_in_simdgroup",
    "simdgroups_per_threadgroup", "threads_per_simdgroup", "maybe_unused", "function_constant", "kernel",
    "host_name",
}

MSL_LINE = re.compile(r"^//\s*metal_ops:\s*msl\s+(\d+)\.(\d+)\s*$", re.MULTILINE)
BEGIN = re.compile(r"^// ---- begin (\S+)$")
END = re.compile(r"^// ---- end (\S+)$")

Violation = collections.namedtuple("Violation", "rule path line message")


class ToolError(Exception):
    """No usable clang."""


# ---- clang ---------------------------------------------------------------------------------

CLANG_CANDIDATES = ["clang"] + [f"clang-{v}" for v in range(21, 13, -1)]
_PROBE = "#include <metal_stdlib>\nkernel void f(device int* p [[buffer(0)]]) { p[0] = 1; }\n"


def clang_supports_clcpp2021(clang):
    """Whether `clang` compiles a small shader with this tool's flags and stand-in."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.metal")
        with open(src, "w") as f:
            f.write(_PROBE)
        try:
            r = subprocess.run([clang] + clang_flags((2, 4), STDLIB_DIR) + ["-fsyntax-only", src],
                               capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return r.returncode == 0


def find_clang():
    """The first clang (MSL_CHECK_CLANG, else on PATH) with C++ for OpenCL 2021, or None."""
    wanted = os.environ.get("MSL_CHECK_CLANG")
    for name in [wanted] if wanted else CLANG_CANDIDATES:
        path = shutil.which(name)
        if path and clang_supports_clcpp2021(path):
            return path
    return None


def why_no_clang():
    return ("no clang with C++ for OpenCL 2021 (-x clcpp -cl-std=clc++2021; clang 14 or newer) on PATH: "
            "`apt-get install clang` (Debian 12: clang 14), or set MSL_CHECK_CLANG")


def ensure_clang():
    """Installs Debian's clang when none fits and this is root with apt-get; prints what it did."""
    clang = find_clang()
    if clang:
        print(f"msl_check: using {clang}")
        return 0
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        print("msl_check: installing clang from Debian (apt-get install clang)")
        # apt_install.sh: waits for an install `make -j` runs beside this one.
        ok = subprocess.run(["bash", os.path.join(ROOT, "tools", "build", "apt_install.sh"), "clang"]).returncode == 0
        if ok and find_clang():
            print(f"msl_check: using {find_clang()}")
            return 0
    print(f"msl_check: skipped: {why_no_clang()}")
    return 0


def clang_flags(msl_version, include_dir):
    major, minor = msl_version
    return ["-x", "clcpp", "-cl-std=clc++2021", "-target", "spir64", "-cl-no-stdinc",
            # Only half (cl_khr_fp16): no fp64, so double is an error, as in
            # MSL. The generic address space stays on (clang 14's C++ for OpenCL
            # cannot copy a struct without it); converting a device or
            # threadgroup pointer to it is the `address-space` rule.
            "-Xclang", "-cl-ext=-all,+cl_khr_fp16,+__opencl_c_generic_address_space",
            # MSL's [[buffer(i)]] etc. mean nothing to OpenCL: the lint checks them.
            "-Wno-unknown-attributes",
            f"-D__METAL_VERSION__={major}{minor}0", "-I", include_dir]


# ---- source locations ------------------------------------------------------------------------

def origin_map(text, top_name):
    """[None, (file, line) of expanded line 1, ...]: embed_metal's markers undone."""
    out = [None]
    stack = [[top_name, 0]]
    for line in text.split("\n"):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            stack[-1][1] += 1  # the #include line this text replaced
            out.append((stack[-1][0], stack[-1][1]))
            stack.append([begin.group(1), 0])
        elif end and len(stack) > 1:
            stack.pop()
            out.append((stack[-1][0], stack[-1][1]))
        else:
            stack[-1][1] += 1
            out.append((stack[-1][0], stack[-1][1]))
    return out


def top_name_of(path, root):
    """kernels/<folder>/<name>.metal when that is the source this expanded file came from."""
    name = os.path.basename(path)
    for original in sorted(glob.glob(os.path.join(root, "kernels", "*", name))):
        original = os.path.relpath(original, root)
        if os.path.abspath(path) != os.path.abspath(os.path.join(root, original)):
            return original
    return os.path.relpath(path, root) if os.path.abspath(path).startswith(root + os.sep) else path


def msl_version_of(text):
    found = MSL_LINE.findall(text)
    return (int(found[0][0]), int(found[0][1])) if found else (2, 4)


# ---- lint of the preprocessed source --------------------------------------------------------

LINE_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"')


def main_file_lines(preprocessed, main_path):
    """[(expanded line number, text)] of the lines that come from the main file."""
    out = []
    current, number = None, 0
    main_names = {main_path, os.path.basename(main_path)}
    for line in preprocessed.split("\n"):
        m = LINE_MARKER.match(line)
        if m:
            number, current = int(m.group(1)), m.group(2)
            continue
        if current in main_names or (current and os.path.abspath(current) == os.path.abspath(main_path)):
            out.append((number, line))
        number += 1
    return out


STRING_OR_CHAR = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')

TOKEN_RULES = [
    ("long-long", re.compile(r"\blong\s+long\b"),
     "`long long`: MSL has no long long; its 64-bit integers are long/ulong"),
    ("long-long", re.compile(r"\b(?:0[xX][0-9a-fA-F']+|\d[\d']*)(?:[uU]?(?:ll|LL)|(?:ll|LL)[uU]?)\b"),
     "a long long literal: MSL has no long long; write a long/ulong literal (suffix l/ul) or a cast"),
    ("double", re.compile(r"\bdouble\b"), "`double`: MSL has no double"),
    ("union", re.compile(r"\bunion\b"), "`union`: not used in MSL shaders here (reinterpret with as_type)"),
    ("exceptions", re.compile(r"\b(?:throw|try|catch|noexcept)\b"), "exceptions are not part of MSL"),
    ("cxx-features", re.compile(r"\b(?:goto|virtual|dynamic_cast|typeid|thread_local)\b"),
     "a C++ feature MSL does not support"),
    ("cxx-features", re.compile(r"(?<![=\w])\s*\b(?:new|delete)\b(?!\s*[;,)])"),
     "new/delete: MSL has no dynamic allocation"),
    ("atomic64",
     re.compile(r"\batomic_u?long\b|\b_?atomic\s*<\s*(?:unsigned\s+long|u?long|(?:mo::)?u?int64|size_t)\s*>"),
     "a 64-bit atomic: MSL's atomics are 32-bit (int, uint, bool, float)"),
]
LAMBDA = re.compile(r"(?:[=(,{;]|\breturn)\s*\[[^\[\]]*\]\s*(?:\(|\{|mutable\b)")
ATOMIC_FLOAT = re.compile(r"\batomic_float\b|\b_?atomic\s*<\s*float\s*>")
ATTRIBUTE = re.compile(r"\[\[\s*([^\[\]]*?)\s*\]\]")
KERNEL = re.compile(r"(?:\bkernel|\[\[\s*kernel\s*\]\])\s+void\s+(\w+)\s*\(")
BUFFER = re.compile(r"\[\[\s*buffer\s*\(\s*([\w:]+)\s*\)\s*\]\]")
# Unscoped enums (buffer indices named in a shared header): name { A, B = 3, C = B, ... }.
ENUM = re.compile(r"\benum\s+(?:\w+\s*)?(?::\s*\w+\s*)?\{([^{}]*)\}")
# A kernel template instantiated under its host name (as MLX writes them):
#   template [[host_name("name")]] [[kernel]] decltype(f<...>) f<...>;
INSTANTIATION = re.compile(
    r'^[ \t]*template\s*(?P<attrs>\[\[\s*host_name\(\s*"(?P<name>[^"]+)"\s*\)\s*\]\]\s*\[\[\s*kernel\s*\]\])\s*'
    r'decltype\((?P<declared>[^;]+?)\)\s+(?P<function>[^;]+?)\s*;', re.MULTILINE)


# Where a host name is given: each must be part of an INSTANTIATION.
HOST_NAME = re.compile(r"\[\[\s*host_name\b")


def instantiation_spans(text, source="<text>"):
    """[(host name, function, start, end)] of the kernel template instantiations
    in an MSL source, `text[start:end]` being each one's declaration. A
    `[[host_name` this reading does not take as an instantiation is an error."""
    found = []
    for m in INSTANTIATION.finditer(text):
        declared, function = (" ".join(m.group(g).split()) for g in ("declared", "function"))
        if declared != function:
            raise ValueError(f"{source}: {m.group('name')}: decltype({declared}) declares {function}")
        found.append((m.group("name"), function, m.start(), m.end()))
    for m in HOST_NAME.finditer(text):
        if not any(start <= m.start() < end for _, _, start, end in found):
            number = text.count("\n", 0, m.start()) + 1
            line = text.splitlines()[number - 1].strip()
            raise ValueError(f"{source}: line {number}: a host name outside an instantiation of the form "
                             f"`template [[host_name(\"name\")]] [[kernel]] decltype(f<...>) f<...>;`: {line}")
    names = [n for n, _, _, _ in found]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"{source}: host names instantiated twice: {', '.join(duplicates)}")
    return found


def instantiations(text, source="<text>"):
    """[(host name, function)] of the kernel template instantiations in an MSL source."""
    return [(name, function) for name, function, _, _ in instantiation_spans(text, source)]


def without_instantiation_attributes(text):
    """The source with the attribute lists of its instantiations blanked (same
    lines and columns): clang's C++ for OpenCL does not accept attributes after
    `template` there, Apple's compiler does."""
    return INSTANTIATION.sub(lambda m: m.group(0).replace(m.group("attrs"), " " * len(m.group("attrs"))), text)


def enum_values(text):
    """{enumerator: value} of the unscoped enums in `text` (values as written or counted)."""
    values = {}
    for m in ENUM.finditer(text):
        next_value = 0
        for item in m.group(1).split(","):
            item = re.sub(r"//[^\n]*", "", item).strip()
            if not item:
                continue
            name, _, value = (part.strip() for part in item.partition("="))
            if value:
                next_value = int(value, 0) if re.fullmatch(r"-?\d+|0x[0-9a-fA-F]+", value) else values.get(value)
                if next_value is None:
                    break
            values[name] = next_value
            next_value += 1
    return values


def lint(lines, msl_version):
    """[(rule, expanded line, message)] for the main file's preprocessed lines."""
    found = []
    clean = [(n, STRING_OR_CHAR.sub('""', text)) for n, text in lines]
    for n, text in clean:
        for rule, pattern, message in TOKEN_RULES:
            for m in pattern.finditer(text):
                found.append((rule, n, f"{message} (`{m.group(0).strip()}`)"))
        if LAMBDA.search(text):
            found.append(("cxx-features", n, "a lambda: MSL does not support lambdas"))
        if msl_version < (3, 0):
            for m in ATOMIC_FLOAT.finditer(text):
                found.append(("atomic-float-msl", n,
                              f"`{m.group(0)}` needs MSL 3.0 (macOS 13); this shader asks for "
                              f"{msl_version[0]}.{msl_version[1]}: add the line `// metal_ops: msl 3.0`"))
        for m in ATTRIBUTE.finditer(text):
            for attribute in m.group(1).split(","):
                name = re.match(r"\s*([\w:]+)", attribute)
                if name and name.group(1) not in KNOWN_ATTRIBUTES:
                    found.append(("attributes", n, f"unknown MSL attribute [[{attribute.strip()}]]"))
    # Kernel signatures: the text from `kernel void name(` to its closing parenthesis.
    joined = "\n".join(text for _, text in clean)
    enums = enum_values(joined)
    starts = [0]
    for _, text in clean:
        starts.append(starts[-1] + len(text) + 1)

    def line_at(offset):
        lo, hi = 0, len(clean) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return clean[lo][0]

    for m in KERNEL.finditer(joined):
        depth, end = 1, m.end()
        while end < len(joined) and depth:
            depth += {"(": 1, ")": -1}.get(joined[end], 0)
            end += 1
        seen = {}
        for b in BUFFER.finditer(joined, m.end(), end):
            n = line_at(b.start())
            written = b.group(1)
            index = int(written) if written.isdigit() else enums.get(written.split("::")[-1])
            if index is None:
                found.append(("buffer-index", n, f"kernel {m.group(1)}: [[buffer({written})]]: not an integer "
                                                 "or an enumerator of an enum in this source"))
                continue
            if index > MAX_BUFFER_INDEX:
                found.append(("buffer-index", n, f"kernel {m.group(1)}: [[buffer({index})]]: Metal's buffer "
                                                 f"argument table has indices 0..{MAX_BUFFER_INDEX}"))
            if index in seen:
                found.append(("buffer-index", n, f"kernel {m.group(1)}: [[buffer({index})]] bound twice"))
            seen[index] = n
    return found


# ---- rules read from the LLVM IR ----------------------------------------------------------------

# An LLVM IR name: quoted, or letters, digits and -._$.
_NAME = r'("[^"]+"|[-\w.$]+)'
# Top-level lines: definitions, declarations, globals, named struct types.
DEFINE = re.compile(rf"^define\b[^@]*@{_NAME}\((.*)$")
DECLARE = re.compile(rf"^declare\b[^@]*@{_NAME}\(")
GLOBAL = re.compile(rf"^@{_NAME} = (.*)$")
TYPE_DEF = re.compile(rf"^%{_NAME} = type (.*)$")
# Inside a function: the callee of a call (a %value: an indirect call), any @name.
CALL = re.compile(r"\b(?:call|invoke)\b[^@%]*?([@%](?:\"[^\"]+\"|[-\w.$]+))\(")
REF = re.compile(rf"@{_NAME}")
# Line tables: an instruction's !dbg and the line it names.
DBG = re.compile(r"!dbg !(\d+)")
LOCATION = re.compile(r"^!(\d+) = !DILocation\(line: (\d+)")
# Instructions: a 64-bit division (its divisor last), an address-space cast.
DIVISION = re.compile(r"= (sdiv|udiv|srem|urem)(?: exact)? i64 ([^,]+), ([^\s,]+)")
ADDRSPACECAST = re.compile(r"addrspacecast\s*\(?\s*(.*?)\s+to\s+([^,)]*\))")
AS_OF = re.compile(r"addrspace\((\d+)\)")
LAMBDA_NAME = re.compile(r"Ul[^E]*E\d*_")
# spir64: 1 global (MSL device), 2 constant, 3 local (threadgroup), 4 generic.
AS_NAMES = {"1": "device", "3": "threadgroup"}


def type_size(t, types):
    """Bytes of an LLVM IR type (natural alignment), for threadgroup arrays."""
    t = t.strip()
    m = re.fullmatch(r"\[(\d+) x (.*)\]", t)
    if m:
        return int(m.group(1)) * type_size(m.group(2), types)
    m = re.fullmatch(r"<(\d+) x (.*)>", t)
    if m:
        n = int(m.group(1))
        return (4 if n == 3 else n) * type_size(m.group(2), types)
    if t.endswith("*") or t == "ptr" or t.startswith("ptr "):
        return 8
    sizes = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "half": 2, "float": 4, "double": 8}
    if t in sizes:
        return sizes[t]
    if t.startswith("%"):
        return type_size(types.get(t[1:], "{}"), types)
    m = re.fullmatch(r"<?\{(.*)\}>?", t)
    if m:
        size, align = 0, 1
        depth, field, fields = 0, "", []
        for ch in m.group(1):
            depth += ch in "[{<(" and 1 or (ch in "]}>)" and -1 or 0)
            if ch == "," and depth == 0:
                fields.append(field)
                field = ""
            else:
                field += ch
        if field.strip():
            fields.append(field)
        for f in fields:
            s = type_size(f, types)
            a = min(s, 8) if s in (1, 2, 4, 8) else 8
            size = (size + a - 1) // a * a + s
            align = max(align, a)
        return (size + align - 1) // align * align
    return 0


def read_ir(ir):
    """Functions (name -> kernel?, lines), declared names, globals (name -> text), types, debug lines."""
    functions, declared, globals_, types, locations = {}, set(), {}, {}, {}
    current = None
    for line in ir.split("\n"):
        if current is not None:
            if line == "}":
                current = None
            else:
                functions[current]["lines"].append(line)
            continue
        m = DEFINE.match(line)
        if m:
            current = m.group(1)
            functions[current] = {"kernel": "spir_kernel" in line.split("@", 1)[0], "lines": [], "header": line}
            continue
        m = DECLARE.match(line)
        if m:
            declared.add(m.group(1))
            continue
        m = GLOBAL.match(line)
        if m:
            globals_[m.group(1)] = m.group(2)
            continue
        m = TYPE_DEF.match(line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        m = LOCATION.match(line)
        if m:
            locations[m.group(1)] = int(m.group(2))
    return functions, declared, globals_, types, locations


def instantiated_kernels(ir, functions):
    """The IR names of the defined functions that are the instantiations `functions` ("f<1, float>")."""
    wanted = {re.sub(r"\s+", "", f) for f in functions}
    defined = [m.group(1) for m in (DEFINE.match(line) for line in ir.split("\n")) if m]
    names = demangle(set(defined))
    found = []
    for mangled in defined:
        signature = names.get(mangled, mangled).split("(", 1)[0]
        # The demangled name after its return type: the last space outside <...>.
        depth, cut = 0, 0
        for i, c in enumerate(signature):
            depth += {"<": 1, ">": -1}.get(c, 0)
            if c == " " and depth == 0:
                cut = i + 1
        if re.sub(r"\s+", "", signature[cut:]) in wanted:
            found.append(mangled)
    return found


def demangle(names):
    tool = shutil.which("llvm-cxxfilt") or next(
        (shutil.which(f"llvm-cxxfilt-{v}") for v in range(21, 13, -1) if shutil.which(f"llvm-cxxfilt-{v}")), None) \
        or shutil.which("c++filt")
    names = list(names)
    if not tool or not names:
        return {n: n for n in names}
    r = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    out = r.stdout.split("\n")
    return {n: (out[i] if i < len(out) and out[i] else n) for i, n in enumerate(names)}


VALUE = re.compile(r"^\s*(%[-\w.$]+) = ")
MEMCPY = re.compile(r"\bcall\b.*@llvm\.mem(?:cpy|move)\.")


def _uses(name, body):
    pattern = re.compile(re.escape(name) + r"(?![-\w.$])")
    return [t for t in body if pattern.search(t) and not t.lstrip().startswith(name + " ")]


def _only_copied(cast_line, body):
    """Whether the value a cast defines is only copied from or to (llvm.memcpy,
    directly or through bitcasts): clang's trivial struct copy, which reaches
    device memory through a generic pointer here and is plain in MSL."""
    m = VALUE.match(cast_line)
    if not m:
        return False
    todo, seen = [m.group(1)], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for use in _uses(name, body):
            if MEMCPY.search(use):
                continue
            d = VALUE.match(use)
            if d and re.search(r"= (?:bitcast|addrspacecast) ", use):
                todo.append(d.group(1))
                continue
            return False
    return True


def ir_rules(ir, kernels=()):
    """[(rule, expanded line or None, message, function or None)] from the IR of one shader;
    `kernels`: functions that are kernel entry points besides the spir_kernel ones
    (kernel template instantiations, plain functions here)."""
    functions, declared, globals_, types, locations = read_ir(ir)
    for k in kernels:
        functions[k]["kernel"] = True
    found = []
    names = set(functions) | declared
    calls = {f: set() for f in functions}
    uses_globals = {f: set() for f in functions}
    wanted = set(functions) | set(globals_)

    def line_of(text):
        m = DBG.search(text)
        return locations.get(m.group(1)) if m else None

    for f, info in functions.items():
        body = info["lines"]
        for text in body:
            callee = None
            m = CALL.search(text)
            if m:
                callee = m.group(1)
                if callee.startswith("%"):
                    found.append(("function-pointer", line_of(text), "an indirect call", f))
                else:
                    callee = callee[1:]
                    if callee in functions:
                        calls[f].add(callee)
            for r in REF.finditer(text):
                name = r.group(1)
                if name.startswith("llvm.") or name not in wanted | declared:
                    continue
                if name == callee and text[r.end():r.end() + 1] == "(":
                    continue
                if name in names:
                    found.append(("function-pointer", line_of(text), f"the address of function {name} is taken", f))
                elif name in globals_:
                    uses_globals[f].add(name)
            d = DIVISION.search(text)
            if d and not re.fullmatch(r"-?\d+", d.group(3)):
                found.append(("int64-division", line_of(text),
                              f"64-bit integer {'division' if 'div' in d.group(1) else 'remainder'} ({d.group(1)} "
                              f"i64) by a non-constant: Apple GPUs have no 64-bit divider; use 32-bit index "
                              f"arithmetic where the host has checked the sizes fit", f))
            for c in ADDRSPACECAST.finditer(text):
                src = AS_OF.findall(c.group(1))
                dst = AS_OF.findall(c.group(2))
                if src and dst and src[-1] in AS_NAMES and dst[-1] == "4" and not _only_copied(text, body):
                    found.append(("address-space", line_of(text),
                                  f"a {AS_NAMES[src[-1]]} pointer or reference converted to an unqualified one: "
                                  f"MSL's unqualified pointers are thread pointers; qualify the parameter (or "
                                  f"method) {AS_NAMES[src[-1]]}", f))
        if LAMBDA_NAME.search(f):
            found.append(("cxx-features", line_of("\n".join(body[:3])), "a lambda: MSL does not support lambdas", f))
    # Globals that take a function's address (outside any function body).
    for g, text in globals_.items():
        for r in REF.finditer(text):
            if r.group(1) in names:
                found.append(("function-pointer", None, f"global {g} holds the address of function {r.group(1)}", None))

    # Recursion: a cycle in the call graph (Tarjan's strongly connected components).
    index, low, on_stack, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        work = [(v, iter(sorted(calls[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(calls[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.append(w)
                    if w == node:
                        break
                if len(scc) > 1 or node in calls[node]:
                    sccs.append(sorted(scc))

    for f in sorted(functions):
        if f not in index:
            visit(f)
    for scc in sccs:
        found.extend(("recursion", next((line_of(t) for t in functions[n]["lines"] if line_of(t)), None),
                      "a recursive call (MSL kernels cannot recurse)", n) for n in scc)

    # Static threadgroup memory per kernel: the addrspace(3) globals its call tree uses.
    sizes = {}
    for g, text in globals_.items():
        m = re.match(r"(?:[\w]+ )*addrspace\(3\) (?:global|constant) (.*?)(?: (?:undef|zeroinitializer|poison)|,|$)",
                     text)
        if m:
            sizes[g] = type_size(m.group(1), types)
    for k, info in functions.items():
        if not info["kernel"]:
            continue
        seen, todo, used = {k}, [k], set()
        while todo:
            f = todo.pop()
            used |= uses_globals[f] & set(sizes)
            for c in calls[f]:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        total = sum(sizes[g] for g in used)
        if total > MAX_THREADGROUP_BYTES:
            found.append(("threadgroup-memory", line_of("\n".join(info["lines"][:5])),
                          f"{total} bytes of static threadgroup memory (Metal allows {MAX_THREADGROUP_BYTES})", k))
    return found


# ---- one shader ---------------------------------------------------------------------------------

class Report:
    def __init__(self, path, msl_version):
        self.path = path
        self.msl_version = msl_version
        self.violations = []
        self.waived = []  # int64-division lines with a `msl_check: allow` comment
        self.compiler_output = ""
        # What was looked at, so a check that saw nothing cannot pass unnoticed.
        self.kernels = 0  # kernel entry points in the compiled IR
        self.lines = 0  # source lines the lint read

    def rules(self):
        return {v.rule for v in self.violations}

    def ok(self):
        return not self.violations


# Compiler errors that are one of the named rules.
COMPILE_ERROR_RULES = [
    (re.compile(r"(pointers|references) to functions are not allowed|taking address of function"), "function-pointer"),
    (re.compile(r"use of type 'double' requires"), "double"),
    (re.compile(r"address space|'__(?:constant|global|local|generic|private) "), "address-space"),
]

# OpenCL's names of the address spaces in clang's messages, as MSL's.
OPENCL_SPACES = [("'__global'", "'device'"), ("'__local'", "'threadgroup'"), ("'__constant'", "'constant'"),
                 ("'__generic'", "'thread'"), ("'__private'", "'thread'"), ("__global ", "device "),
                 ("__local ", "threadgroup "), ("__constant ", "constant "), ("__generic ", "thread "),
                 ("__private ", "thread ")]

ALLOW = re.compile(r"msl_check: allow ([\w-]+)")
# Rules a source line may waive with a `// msl_check: allow <rule>: why` comment:
# a 64-bit division done once per thread or threadgroup, outside the loop over
# elements, costs little.
WAIVABLE = {"int64-division"}


def _allowed(rule, file, line, root, cache):
    if rule not in WAIVABLE or not line:
        return False
    path = os.path.join(root, file)
    if path not in cache:
        try:
            with open(path, encoding="utf-8") as f:
                cache[path] = f.read().split("\n")
        except OSError:
            cache[path] = []
    lines = cache[path]
    return 0 < line <= len(lines) and rule in ALLOW.findall(lines[line - 1])


def check_file(path, clang, include_dir=STDLIB_DIR, root=ROOT):
    """Report of one self-contained shader source."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    version = msl_version_of(text)
    report = Report(path, version)
    origins = origin_map(text, top_name_of(path, root))
    # (rule, file, line, message) -> functions (template instantiations) it was found in
    grouped = collections.OrderedDict()

    def add(rule, line, message, function=None):
        if line is None or line >= len(origins) or origins[line] is None:
            file, number = (origins[1][0] if len(origins) > 1 else path), 0
        else:
            file, number = origins[line]
        grouped.setdefault((rule, file, number, message), [])
        if function:
            grouped[(rule, file, number, message)].append(function)

    flags = clang_flags(version, include_dir)
    try:
        instantiated = [function for _, function in instantiations(text, path)]
    except ValueError as e:
        add("compile", None, str(e))
        instantiated = []
    with tempfile.TemporaryDirectory() as tmp:
        ll = os.path.join(tmp, "out.ll")
        # The compiled copy keeps the file name (clang's messages are matched to it) and every line.
        compiled_path = os.path.join(tmp, os.path.basename(path))
        with open(compiled_path, "w", encoding="utf-8") as f:
            f.write(without_instantiation_attributes(text))
        compile_cmd = [clang] + flags + ["-S", "-emit-llvm", "-O0", "-gline-tables-only", "-o", ll, compiled_path]
        pre_cmd = [clang] + flags + ["-E", "-DMSL_CHECK_KEEP_KEYWORDS", path]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            compiled = pool.submit(subprocess.run, compile_cmd, capture_output=True, text=True)
            pre = pool.submit(subprocess.run, pre_cmd, capture_output=True, text=True)
            compiled, pre = compiled.result(), pre.result()
        report.compiler_output = compiled.stderr
        if compiled.returncode != 0:
            # Each error with the notes after it (an overload's notes say which address spaces clashed).
            groups = []
            for e in compiled.stderr.split("\n"):
                if ": error: " in e or e.startswith("error:"):
                    groups.append([e])
                elif groups:
                    groups[-1].append(e)
            for group in groups or [["clang failed without an error line: " + compiled.stderr.strip()[-500:]]]:
                e, notes = group[0], [n for n in group[1:] if ": note: " in n]
                rule = next((r for pattern, r in COMPILE_ERROR_RULES if pattern.search(e)), None)
                note = next((n.split(": note: ", 1)[1] for n in notes if "address space" in n), None)
                if rule is None:
                    rule = "address-space" if note else "compile"
                m = re.match(r"(.*?):(\d+):\d+: error: (.*)", e)
                message = (m.group(3) if m else e) + (f" ({note})" if note and note not in e else "")
                # The stand-in's renames (OpenCL names MSL lacks) back to the shader's words.
                message = message.replace("msl_check_atomic_", "atomic_").replace("msl_check_name_", "")
                for opencl, msl in OPENCL_SPACES:
                    message = message.replace(opencl, msl)
                if m and os.path.abspath(m.group(1)) in (os.path.abspath(path), os.path.abspath(compiled_path)):
                    add(rule, int(m.group(2)), message)
                else:
                    add(rule, None, message)
        else:
            with open(ll, encoding="utf-8") as f:
                ir = f.read()
            templated = instantiated_kernels(ir, instantiated)
            if len(templated) != len(instantiated):
                add("compile", None, f"{len(instantiated)} kernel template instantiations, "
                                     f"{len(templated)} of them found in the compiled code")
            report.kernels = len(re.findall(r"^define\b[^@]*\bspir_kernel\b", ir, re.MULTILINE)) + len(templated)
            if report.kernels:
                for rule, line, message, function in ir_rules(ir, templated):
                    add(rule, line, message, function)
        if pre.returncode == 0:
            lines = main_file_lines(pre.stdout, path)
            report.lines = sum(1 for _, text in lines if text.strip())
            for rule, line, message in lint(lines, version):
                add(rule, line, message)
        else:
            add("compile", None, "the preprocessor failed: " + pre.stderr.strip()[-500:])
    if report.kernels == 0 and compiled.returncode == 0:
        add("compile", None, "no kernel entry point compiled: nothing was checked")
    names = demangle({f for fs in grouped.values() for f in fs})
    cache = {}
    for (rule, file, line, message), functions in grouped.items():
        if _allowed(rule, file, line, root, cache):
            report.waived.append(Violation(rule, file, line, message))
            continue
        if functions:
            first = names.get(functions[0], functions[0]).split("(")[0]
            more = f" (and {len(functions) - 1} more)" if len(functions) > 1 else ""
            message = f"{message} [in {first}{more}]"
        report.violations.append(Violation(rule, file, line, message))
    return report


def check_files(paths, clang=None, include_dir=STDLIB_DIR, root=ROOT, jobs=None):
    clang = clang or find_clang()
    if clang is None:
        raise ToolError(why_no_clang())
    jobs = jobs or max(1, min(len(paths), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda p: check_file(p, clang, include_dir, root), paths))


def format_report(report):
    lines = [f"{v.path}:{v.line}: [{v.rule}] {v.message}" for v in sorted(
        report.violations, key=lambda v: (v.path, v.line, v.rule))]
    name = os.path.basename(report.path)
    version = "%d.%d" % report.msl_version
    if report.ok():
        lines.append(f"msl_check: {name} (MSL {version}): OK ({len(RULES)} rules)")
    else:
        counts = collections.Counter(v.rule for v in report.violations)
        lines.append(f"msl_check: {name} (MSL {version}): " +
                     ", ".join(f"{n} {rule}" for rule, n in sorted(counts.items())))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="expanded shader sources (build/gen/*.metal)")
    parser.add_argument("--include", default=STDLIB_DIR, help="folder of the stand-in metal_stdlib")
    parser.add_argument("--root", default=ROOT, help="repository root (for the original file names)")
    parser.add_argument("--ensure-clang", action="store_true", help="install Debian's clang if none fits (root)")
    parser.add_argument("--rules", action="store_true", help="list the rules")
    args = parser.parse_args(argv)
    if args.rules:
        for rule, text in RULES.items():
            print(f"{rule:20} {text}")
        return 0
    if args.ensure_clang:
        return ensure_clang()
    if not args.files:
        parser.error("no shader sources given")
    try:
        reports = check_files(args.files, include_dir=args.include, root=os.path.abspath(args.root))
    except ToolError as e:
        print(f"msl_check: {e}", file=sys.stderr)
        return 2
    for r in reports:
        print(format_report(r))
    return 0 if all(r.ok() for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())

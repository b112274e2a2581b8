"""Checks of the macOS binaries the Metal backend depends on, run on Linux.

    python tools/macos_binaries.py plugin-compat --plugin tensorflow-plugins/libmetal_plugin.dylib \\
        --tf-dir A/tensorflow [--tf-dir B/tensorflow ...]
    python tools/macos_binaries.py stream-protocol --plugin tensorflow-plugins/libmetal_plugin.dylib \\
        --header kernels/metal/tf_metal_stream.h
    python tools/macos_binaries.py binds --plugin tensorflow-plugins/libmetal_plugin.dylib
    python tools/macos_binaries.py exports --lib tensorflow/libtensorflow_framework.2.dylib TF_GetStream ...
    python tools/macos_binaries.py wheel --wheel dist/tf_metal_ops-...-py3-none-macosx_12_0_arm64.whl \\
        --site-packages build/macos/tf-<v>-openblas-<v> --sdk MacOSX.sdk --macos-min 12.0

wheel: the macOS wheel `make wheels` builds (check_macos_wheel): tag, thin
arm64 Mach-O files, the minimum macOS of LC_BUILD_VERSION, install names,
`@rpath/` dependencies found through the libraries' rpaths from
site-packages/metal_ops, every bind exported by TensorFlow's and OpenBLAS's
dylibs or the SDK's text stubs, and TF_InitGraph exported by the plugin only.

plugin-compat: whether dyld can load tensorflow-metal's plugin into each
TensorFlow (an unpacked wheel's `tensorflow/` folder per --tf-dir). The plugin
binds some TensorFlow symbols two-level to the library it links
(`@rpath/_pywrap_tensorflow_internal.so`) and the rest through the flat
namespace (it was linked with `-undefined dynamic_lookup`). TensorFlow loads
`tensorflow-plugins/` at `import tensorflow` without catching errors, so a
plugin dyld refuses breaks the import. Model of dyld (not run here): an
`@rpath/` dependency resolves to an already-loaded image with that install
name, else through the plugin's LC_RPATHs in the installed layout; a two-level
bind must be exported (or re-exported) by that library; a flat bind by any
TensorFlow image `import tensorflow` has loaded. Missing non-lazy binds make
dyld refuse the plugin, missing lazy ones fail at their first call; weak
imports may be missing.

stream-protocol: a class of the plugin adopting `TF_MetalStream` implements
every selector of the header's `@protocol TF_MetalStream` (methods, property
getters and setters), void where declared void, so a plugin release that
changes the protocol is caught.

Exit status: 0 when the checks pass, 1 when one fails (the reason on stderr),
2 when an input cannot be read. --tf-dir takes either the `tensorflow/` folder
of an unpacked wheel or the folder holding it (the version is read from a
`tensorflow-X.dist-info` beside it, else from the path).

Everything is read with this file's own small Mach-O reader (standard library
only), not llvm-objdump: Debian's llvm-objdump 14 misreads the relative
Objective-C method lists Apple's toolchains emit, cannot list the binds of
chained-fixup images, and prints libraries by short name rather than by the
ordinal a two-level bind actually uses.
"""
import argparse
from dataclasses import dataclass
import mmap
import os
import re
import struct
import sys

# ---- Mach-O constants (<mach-o/loader.h>, <mach-o/fixup-chains.h>) ---------------------

MH_MAGIC_64 = 0xFEEDFACF
FAT_MAGIC = 0xCAFEBABE
FAT_MAGIC_64 = 0xCAFEBABF
CPU_TYPE_ARM64 = 0x0100000C
MH_TWOLEVEL = 0x80

LC_REQ_DYLD = 0x80000000
LC_SEGMENT_64 = 0x19
LC_ID_DYLIB = 0x0D
LC_LOAD_DYLIB = 0x0C
LC_LOAD_WEAK_DYLIB = 0x18 | LC_REQ_DYLD
LC_REEXPORT_DYLIB = 0x1F | LC_REQ_DYLD
LC_LAZY_LOAD_DYLIB = 0x20
LC_LOAD_UPWARD_DYLIB = 0x23 | LC_REQ_DYLD
LC_RPATH = 0x1C | LC_REQ_DYLD
LC_DYLD_INFO = 0x22
LC_DYLD_INFO_ONLY = 0x22 | LC_REQ_DYLD
LC_DYLD_EXPORTS_TRIE = 0x33 | LC_REQ_DYLD
LC_DYLD_CHAINED_FIXUPS = 0x34 | LC_REQ_DYLD
LC_BUILD_VERSION = 0x32
PLATFORM_MACOS = 1
# Every dylib-loading command takes the next two-level ordinal, in file order.
DYLIB_COMMANDS = (LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB, LC_LAZY_LOAD_DYLIB, LC_LOAD_UPWARD_DYLIB)

ORDINAL_SELF, ORDINAL_MAIN, ORDINAL_FLAT, ORDINAL_WEAK = 0, -1, -2, -3

BIND_SYMBOL_FLAGS_WEAK_IMPORT = 0x1
EXPORT_SYMBOL_FLAGS_REEXPORT = 0x08
EXPORT_SYMBOL_FLAGS_STUB_AND_RESOLVER = 0x10

RELATIVE_METHODS = 0x80000000  # method_list_t flag: 32-bit offsets instead of pointers
RELATIVE_SELECTORS_ARE_DIRECT = 0x40000000  # shared-cache only: the offset is to the name


class MachOError(Exception):
    pass


def _leb(buf, pos):
    """An LEB128 number's bits: (value as unsigned, next position, bits read, last byte)."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos, shift, byte


def uleb(buf, pos):
    result, pos, _, _ = _leb(buf, pos)
    return result, pos


def sleb(buf, pos):
    result, pos, shift, byte = _leb(buf, pos)
    if byte & 0x40:
        result -= 1 << shift
    return result, pos


def cstring_at(buf, pos):
    end = buf.find(b"\0", pos)
    if end < 0:
        raise MachOError(f"unterminated string at offset {pos:#x}")
    return bytes(buf[pos:end]).decode("utf-8", "replace"), end + 1


@dataclass(frozen=True)
class Bind:
    """One symbol an image binds, from the library with this two-level ordinal."""
    ordinal: int
    symbol: str
    weak_import: bool = False
    lazy: bool = False


def parse_bind_opcodes(buf, lazy=False):
    """The binds (dyld_info bind or lazy-bind stream): one Bind per distinct symbol use.

    Addresses are not tracked: what matters here is which symbol is wanted from
    which library ordinal.
    """
    binds = []
    seen = set()
    pos, ordinal, symbol, flags = 0, 0, None, 0

    def emit():
        key = (ordinal, symbol, bool(flags & BIND_SYMBOL_FLAGS_WEAK_IMPORT))
        if symbol is not None and key not in seen:
            seen.add(key)
            binds.append(Bind(ordinal, symbol, key[2], lazy))

    while pos < len(buf):
        byte = buf[pos]
        pos += 1
        op, imm = byte & 0xF0, byte & 0x0F
        if op == 0x00:  # DONE: ends the stream, except that every lazy entry ends with one
            if not lazy:
                break
        elif op == 0x10:  # SET_DYLIB_ORDINAL_IMM
            ordinal = imm
        elif op == 0x20:  # SET_DYLIB_ORDINAL_ULEB
            ordinal, pos = uleb(buf, pos)
        elif op == 0x30:  # SET_DYLIB_SPECIAL_IMM: 0, -1, -2, -3 sign-extended from 4 bits
            ordinal = 0 if imm == 0 else imm - 16
        elif op == 0x40:  # SET_SYMBOL_TRAILING_FLAGS_IMM
            flags = imm
            symbol, pos = cstring_at(buf, pos)
        elif op == 0x50:  # SET_TYPE_IMM
            pass
        elif op == 0x60:  # SET_ADDEND_SLEB
            _, pos = sleb(buf, pos)
        elif op in (0x70, 0x80):  # SET_SEGMENT_AND_OFFSET_ULEB, ADD_ADDR_ULEB
            _, pos = uleb(buf, pos)
        elif op == 0x90:  # DO_BIND
            emit()
        elif op == 0xA0:  # DO_BIND_ADD_ADDR_ULEB
            emit()
            _, pos = uleb(buf, pos)
        elif op == 0xB0:  # DO_BIND_ADD_ADDR_IMM_SCALED
            emit()
        elif op == 0xC0:  # DO_BIND_ULEB_TIMES_SKIPPING_ULEB
            _, pos = uleb(buf, pos)
            _, pos = uleb(buf, pos)
            emit()
        elif op == 0xD0:  # THREADED: SET_BIND_ORDINAL_TABLE_SIZE_ULEB (0) or APPLY (1)
            if imm == 0:
                _, pos = uleb(buf, pos)
        else:
            raise MachOError(f"unknown bind opcode {byte:#x}")
    return binds


def parse_chained_imports(buf):
    """The imports of an LC_DYLD_CHAINED_FIXUPS blob (all bound at load: none lazy)."""
    (_version, _starts, imports_off, symbols_off, count, imports_format,
     symbols_format) = struct.unpack_from("<7I", buf, 0)
    if symbols_format != 0:
        raise MachOError("compressed chained-fixup symbol names are not supported")
    binds = []
    for i in range(count):
        if imports_format in (1, 2):  # DYLD_CHAINED_IMPORT(_ADDEND): ordinal:8 weak:1 name_offset:23
            raw = struct.unpack_from("<I", buf, imports_off + 4 * imports_format * i)[0]
            ordinal, weak, name_off = raw & 0xFF, (raw >> 8) & 1, raw >> 9
            ordinal = ordinal - 256 if ordinal >= 0xF0 else ordinal
        elif imports_format == 3:  # DYLD_CHAINED_IMPORT_ADDEND64: ordinal:16 weak:1 _:15 name_offset:32
            raw = struct.unpack_from("<Q", buf, imports_off + 16 * i)[0]
            ordinal, weak, name_off = raw & 0xFFFF, (raw >> 16) & 1, raw >> 32
            ordinal = ordinal - 65536 if ordinal >= 0xFFF0 else ordinal
        else:
            raise MachOError(f"unknown chained-fixup import format {imports_format}")
        binds.append(Bind(ordinal, cstring_at(buf, symbols_off + name_off)[0], bool(weak), False))
    return binds


class ExportTrie:
    """A dyld export trie: `lookup` one name without reading the rest."""

    def __init__(self, buf):
        self.buf = buf

    def _terminal(self, node):
        size, pos = uleb(self.buf, node)
        if size == 0:
            return None
        flags, pos = uleb(self.buf, pos)
        if flags & EXPORT_SYMBOL_FLAGS_REEXPORT:
            ordinal, pos = uleb(self.buf, pos)
            imported, _ = cstring_at(self.buf, pos)
            return ("reexport", ordinal, imported)
        return ("defined", None, None)

    def _children(self, node):
        size, pos = uleb(self.buf, node)
        pos += size
        count = self.buf[pos]
        pos += 1
        for _ in range(count):
            edge, pos = cstring_at(self.buf, pos)
            child, pos = uleb(self.buf, pos)
            yield edge, child

    def lookup(self, name):
        """None, ("defined", None, None) or ("reexport", ordinal, name there or "")."""
        if not self.buf:
            return None
        node, rest = 0, name
        while rest:
            for edge, child in self._children(node):
                if rest.startswith(edge):
                    node, rest = child, rest[len(edge):]
                    break
            else:
                return None
        return self._terminal(node)

    def names(self):
        if not self.buf:
            return []
        found, stack = [], [(0, "")]
        while stack:
            node, prefix = stack.pop()
            if self._terminal(node) is not None:
                found.append(prefix)
            stack.extend((child, prefix + edge) for edge, child in self._children(node))
        return sorted(found)


class MachO:
    """One arm64 (or the only) 64-bit little-endian image of a Mach-O or fat file.

    The file is memory-mapped: TensorFlow's dylibs are hundreds of MB and only
    their load commands, link-edit tables and Objective-C sections are read.
    """

    def __init__(self, path_or_bytes):
        if isinstance(path_or_bytes, (bytes, bytearray)):
            self.path, data = "<bytes>", path_or_bytes
        else:
            self.path = str(path_or_bytes)
            with open(self.path, "rb") as f:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(self.path) else b""
        self.fat_arches = None  # [(cputype, offset)] of a fat file's slices
        self.base = self._slice(data)
        self.data = data
        if len(data) < self.base + 32 or struct.unpack_from("<I", data, self.base)[0] != MH_MAGIC_64:
            raise MachOError(f"{self.path}: not a 64-bit little-endian Mach-O file")
        self.cputype = struct.unpack_from("<I", data, self.base + 4)[0]
        ncmds, _, self.flags = struct.unpack_from("<III", data, self.base + 16)
        self.install_name = None
        self.dylibs = []   # [(load command, path)]: two-level ordinal i is dylibs[i - 1]
        self.rpaths = []
        self.sections = {}  # (segment, section) -> (vmaddr, size, file offset)
        self.segments = []  # (name, vmaddr, vmsize, fileoff, filesize)
        self._dyld_info = None
        self._exports_trie = None
        self._chained = None
        self.build_version = None  # (platform, "X.Y" minimum OS) of LC_BUILD_VERSION
        pos = self.base + 32
        for _ in range(ncmds):
            cmd, cmdsize = struct.unpack_from("<II", data, pos)
            if cmd == LC_SEGMENT_64:
                self._segment(pos)
            elif cmd == LC_ID_DYLIB or cmd in DYLIB_COMMANDS:
                name = cstring_at(data, pos + struct.unpack_from("<I", data, pos + 8)[0])[0]
                if cmd == LC_ID_DYLIB:
                    self.install_name = name
                else:
                    self.dylibs.append((cmd, name))
            elif cmd == LC_RPATH:
                self.rpaths.append(cstring_at(data, pos + struct.unpack_from("<I", data, pos + 8)[0])[0])
            elif cmd in (LC_DYLD_INFO, LC_DYLD_INFO_ONLY):
                self._dyld_info = struct.unpack_from("<10I", data, pos + 8)
            elif cmd == LC_DYLD_EXPORTS_TRIE:
                self._exports_trie = struct.unpack_from("<II", data, pos + 8)
            elif cmd == LC_BUILD_VERSION:
                platform_, minos = struct.unpack_from("<II", data, pos + 8)
                self.build_version = (platform_, f"{minos >> 16}.{(minos >> 8) & 0xFF}")
            elif cmd == LC_DYLD_CHAINED_FIXUPS:
                self._chained = struct.unpack_from("<II", data, pos + 8)
            pos += cmdsize

    def _slice(self, data):
        if len(data) < 8:
            return 0
        magic, count = struct.unpack_from(">II", data, 0)
        if magic not in (FAT_MAGIC, FAT_MAGIC_64):
            return 0
        size = 20 if magic == FAT_MAGIC else 32
        arches = []
        self.fat_arches = arches
        for i in range(count):
            entry = 8 + size * i
            cputype = struct.unpack_from(">I", data, entry)[0]
            offset = (struct.unpack_from(">I", data, entry + 8)[0] if magic == FAT_MAGIC
                      else struct.unpack_from(">Q", data, entry + 8)[0])
            arches.append((cputype, offset))
        for cputype, offset in arches:
            if cputype == CPU_TYPE_ARM64:
                return offset
        raise MachOError(f"{self.path}: fat file without an arm64 slice")

    def _segment(self, pos):
        data = self.data
        segname = bytes(data[pos + 8:pos + 24]).rstrip(b"\0").decode()
        vmaddr, vmsize, fileoff, filesize = struct.unpack_from("<QQQQ", data, pos + 24)
        nsects = struct.unpack_from("<I", data, pos + 64)[0]
        self.segments.append((segname, vmaddr, vmsize, self.base + fileoff, filesize))
        for i in range(nsects):
            s = pos + 72 + 80 * i
            sectname = bytes(data[s:s + 16]).rstrip(b"\0").decode()
            addr, size = struct.unpack_from("<QQ", data, s + 32)
            offset = struct.unpack_from("<I", data, s + 48)[0]
            self.sections[(segname, sectname)] = (addr, size, self.base + offset)

    def _blob(self, offset, size):
        return bytes(self.data[self.base + offset:self.base + offset + size])

    # -- dylibs and symbols

    def library(self, ordinal):
        """The path a two-level bind with this ordinal names."""
        if ordinal == ORDINAL_SELF:
            return "self"
        if ordinal == ORDINAL_MAIN:
            return "main-executable"
        if ordinal == ORDINAL_FLAT:
            return "flat-namespace"
        if ordinal == ORDINAL_WEAK:
            return "weak-lookup"
        if 1 <= ordinal <= len(self.dylibs):
            return self.dylibs[ordinal - 1][1]
        raise MachOError(f"{self.path}: bind to library ordinal {ordinal}, which does not exist")

    def binds(self):
        """Every symbol this image binds, with its library ordinal (weak-definition
        coalescing entries are left out: they never keep an image from loading)."""
        if self._chained is not None:
            return parse_chained_imports(self._blob(*self._chained))
        if self._dyld_info is None:
            return []
        _, _, bind_off, bind_size, _, _, lazy_off, lazy_size, _, _ = self._dyld_info
        return (parse_bind_opcodes(self._blob(bind_off, bind_size)) +
                parse_bind_opcodes(self._blob(lazy_off, lazy_size), lazy=True))

    def exports(self):
        if self._exports_trie is not None:
            return ExportTrie(self._blob(*self._exports_trie))
        if self._dyld_info is not None:
            return ExportTrie(self._blob(self._dyld_info[8], self._dyld_info[9]))
        return ExportTrie(b"")

    # -- memory, for Objective-C metadata

    def offset_of(self, vmaddr):
        for _, base, vmsize, fileoff, filesize in self.segments:
            if base <= vmaddr < base + min(vmsize, filesize):
                return fileoff + (vmaddr - base)
        raise MachOError(f"{self.path}: address {vmaddr:#x} is in no file-backed segment")

    def u32(self, vmaddr):
        return struct.unpack_from("<I", self.data, self.offset_of(vmaddr))[0]

    def i32(self, vmaddr):
        return struct.unpack_from("<i", self.data, self.offset_of(vmaddr))[0]

    def ptr(self, vmaddr):
        """A pointer as stored on disk. Classic images store the unslid address
        (Apple's tag bits above 48 cleared); chained-fixup rebases keep the
        target in the low 36 bits and a bind (bit 63) has no target here (0)."""
        raw = struct.unpack_from("<Q", self.data, self.offset_of(vmaddr))[0]
        if self._chained is not None:
            return 0 if raw >> 63 else raw & 0xFFFFFFFFF
        return raw & 0x0000FFFFFFFFFFFF

    def cstring(self, vmaddr):
        return cstring_at(self.data, self.offset_of(vmaddr))[0]

    def section(self, name):
        for (_, sect), value in self.sections.items():
            if sect == name:
                return value
        return None


# ---- Objective-C metadata (objc4's class_t, class_ro_t, protocol_t, method_list_t) ------

def method_list(macho, list_addr):
    """[(selector, type encoding)] of a method_list_t, pointer-based or relative."""
    if list_addr == 0:
        return []
    entsize_flags = macho.u32(list_addr)
    count = macho.u32(list_addr + 4)
    entsize = entsize_flags & 0xFFFC
    methods = []
    for i in range(count):
        entry = list_addr + 8 + i * entsize
        if entsize_flags & RELATIVE_METHODS:
            # {int32 name, int32 types, int32 imp}, each relative to its own field;
            # the name field points to a selector reference unless marked direct.
            name_ref = entry + macho.i32(entry)
            name = (macho.cstring(name_ref) if entsize_flags & RELATIVE_SELECTORS_ARE_DIRECT
                    else macho.cstring(macho.ptr(name_ref)))
            types = macho.cstring(entry + 4 + macho.i32(entry + 4))
        else:
            name = macho.cstring(macho.ptr(entry))
            types = macho.cstring(macho.ptr(entry + 8))
        methods.append((name, types))
    return methods


def protocol_list(macho, list_addr):
    """{protocol name: [(selector, types)] of its required instance methods}."""
    if list_addr == 0:
        return {}
    count = struct.unpack_from("<Q", macho.data, macho.offset_of(list_addr))[0]
    protocols = {}
    for i in range(count):
        proto = macho.ptr(list_addr + 8 + 8 * i)
        protocols[macho.cstring(macho.ptr(proto + 8))] = method_list(macho, macho.ptr(proto + 24))
    return protocols


def objc_classes(macho):
    """{class name: {"methods": [(selector, types)], "protocols": {name: [...]}}}
    from __objc_classlist (instance methods the class itself defines)."""
    section = macho.section("__objc_classlist")
    if section is None:
        return {}
    addr, size, _ = section
    classes = {}
    for i in range(size // 8):
        cls = macho.ptr(addr + 8 * i)
        if cls == 0:
            continue  # bound to another image: not defined here
        ro = macho.ptr(cls + 32) & ~0x7  # class_t.data; the low bits are flags
        classes[macho.cstring(macho.ptr(ro + 24))] = {
            "methods": method_list(macho, macho.ptr(ro + 32)),
            "protocols": protocol_list(macho, macho.ptr(ro + 40)),
        }
    return classes


# ---- the protocol our glue declares -----------------------------------------------------

def declared_selectors(header_text, protocol):
    """[(selector, returns_void)] of `@protocol <name> ... @end`: its methods and
    its properties' getters (and setters unless readonly)."""
    match = re.search(rf"@protocol\s+{re.escape(protocol)}\b(?!\s*;)(.*?)@end", header_text, re.DOTALL)
    if match is None:
        raise ValueError(f"no @protocol {protocol} ... @end in the header")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", match.group(1), flags=re.DOTALL)
    body = re.sub(r"^\s*(<[^>]*>)", "", body)  # adopted protocols
    body = re.sub(r"@(required|optional)\b", "", body)
    selectors = []
    for decl in (" ".join(d.split()) for d in body.split(";")):
        if decl.startswith("+"):
            continue  # class methods: the stream is an instance
        if decl.startswith("-"):
            returns = re.match(r"-\s*\(([^)]*)\)", decl)
            returns_void = bool(returns) and returns.group(1).strip() == "void"
            rest = decl[returns.end():] if returns else decl[1:]
            parts = re.findall(r"(\w+)\s*:", rest)
            name = "".join(p + ":" for p in parts) if parts else re.match(r"\s*(\w+)", rest).group(1)
            selectors.append((name, returns_void))
        elif decl.startswith("@property"):
            attrs = re.search(r"@property\s*\(([^)]*)\)", decl)
            attrs = [a.strip() for a in attrs.group(1).split(",")] if attrs else []
            name = re.findall(r"(\w+)\s*$", decl)[-1]
            getter = next((a.split("=", 1)[1].strip() for a in attrs if a.startswith("getter")), name)
            selectors.append((getter, False))
            if "readonly" not in attrs:
                setter = next((a.split("=", 1)[1].strip() for a in attrs if a.startswith("setter")),
                              f"set{name[0].upper()}{name[1:]}:")
                selectors.append((setter, True))
        elif decl:
            raise ValueError(f"cannot read this declaration of @protocol {protocol}: {decl!r}")
    return selectors


def check_stream_protocol(plugin_path, header_path, protocol="TF_MetalStream"):
    """(ok, lines): a class adopting `protocol` implements every declared
    selector, with the declared void/non-void return."""
    with open(header_path, encoding="utf-8") as f:
        wanted = declared_selectors(f.read(), protocol)
    classes = objc_classes(MachO(plugin_path))
    adopters = {name: c for name, c in classes.items() if protocol in c["protocols"]}
    if not adopters:
        return False, [f"{os.path.basename(plugin_path)}: no class adopts {protocol} "
                       f"({len(classes)} classes: {', '.join(sorted(classes)[:20]) or 'none'})"]
    ok = True
    lines = []
    for name, c in sorted(adopters.items()):
        types = dict(c["methods"])
        missing = [s for s, _ in wanted if s not in types]
        # An ObjC type encoding starts with the return type: "v" is void.
        wrong = [f"{s} ({'void' if void else 'a value'} declared, {types[s]!r} implemented)"
                 for s, void in wanted if s in types and types[s].startswith("v") != void]
        ok = ok and not missing and not wrong
        lines.append(f"{name} adopts {protocol} and implements {', '.join(types)}")
        if missing:
            lines.append(f"  MISSING from {name}: {', '.join(missing)}")
        if wrong:
            lines.append(f"  WRONG return type in {name}: {', '.join(wrong)}")
        if not missing and not wrong:
            lines.append(f"  every selector of {os.path.basename(header_path)} is implemented: "
                         f"{', '.join(s for s, _ in wanted)}")
        theirs = [s for s, _ in c["protocols"][protocol]]
        extra = [s for s in theirs if s not in {w for w, _ in wanted}]
        if extra:
            lines.append(f"  note: the plugin's own {protocol} also declares {', '.join(extra)}")
    return ok, lines


# ---- loading the plugin into a TensorFlow -----------------------------------------------

# The images `import tensorflow` has loaded before it loads tensorflow-plugins/
# (paths in the wheel's tensorflow/ folder; those a release lacks are skipped).
TF_IMAGES = (
    "python/_pywrap_tensorflow_internal.so",
    "python/lib_pywrap_tensorflow_common.dylib",
    "libtensorflow_framework.2.dylib",
    "libtensorflow_cc.2.dylib",
)


class TensorFlow:
    """The TensorFlow images of one unpacked wheel, with their exports."""

    def __init__(self, tf_dir):
        if os.path.isdir(os.path.join(tf_dir, "tensorflow")):
            tf_dir = os.path.join(tf_dir, "tensorflow")
        self.dir = tf_dir
        self.images = {rel: MachO(os.path.join(tf_dir, rel)) for rel in TF_IMAGES
                       if os.path.exists(os.path.join(tf_dir, rel))}
        if "python/_pywrap_tensorflow_internal.so" not in self.images:
            raise MachOError(f"{tf_dir}: no python/_pywrap_tensorflow_internal.so "
                             "(pass an unpacked TensorFlow wheel's tensorflow/ folder)")
        self.version = self._version()
        self._tries = {}

    def _version(self):
        """The wheel's own: Version in tensorflow-X.dist-info/METADATA beside
        the folder (its name without one); else a tf-X / tensorflow-X folder
        in the path (never another version number the path holds)."""
        parent = os.path.dirname(os.path.abspath(self.dir))
        for entry in sorted(os.listdir(parent)):
            match = re.match(r"tensorflow-([0-9][^-]*)\.dist-info$", entry)
            if match:
                try:
                    with open(os.path.join(parent, entry, "METADATA"), encoding="utf-8") as f:
                        for line in f:
                            if line.startswith("Version:"):
                                return line.split(":", 1)[1].strip()
                except OSError:
                    pass
                return match.group(1)
        found = re.findall(r"(?:^|/)(?:tf|tensorflow)-(\d+\.\d+\.\d+(?:rc\d+)?)", os.path.abspath(self.dir))
        return found[-1] if found else self.dir

    def trie(self, rel):
        if rel not in self._tries:
            self._tries[rel] = self.images[rel].exports()
        return self._tries[rel]

    def by_install_name(self, name):
        return next((rel for rel, m in self.images.items() if m.install_name == name), None)

    def resolve(self, rel, symbol, depth=0):
        """Whether image `rel` exports `symbol` (itself, through a re-export
        entry or a re-exported library), as dyld looks it up."""
        if depth > 8:
            return False
        image = self.images[rel]
        found = self.trie(rel).lookup(symbol)
        if found is not None:
            if found[0] == "defined":
                return True
            target = self.dependency(image.library(found[1]))
            return target is not None and self.resolve(target, found[2] or symbol, depth + 1)
        for cmd, path in image.dylibs:
            target = self.dependency(path) if cmd == LC_REEXPORT_DYLIB else None
            if target is not None and self.resolve(target, symbol, depth + 1):
                return True
        return False

    def dependency(self, path):
        """The TensorFlow image a load command's path names (None: not one of them)."""
        rel = self.by_install_name(path)
        if rel is None and path.startswith("@rpath/"):
            rel = next((r for r in self.images if os.path.basename(r) == path[len("@rpath/"):]), None)
        return rel

    def exporters(self, symbol):
        return [rel for rel in self.images if self.resolve(rel, symbol)]


def locate_dependency(plugin, path, tf):
    """(rel in tf.images or None, how): where dyld finds a dependency of the
    plugin, installed as site-packages/tensorflow-plugins/ beside tensorflow/."""
    rel = tf.by_install_name(path)
    if rel is not None:
        return rel, f"the loaded image with install name {path}"
    if path.startswith("@rpath/"):
        plugin_dir = os.path.join(os.path.dirname(os.path.abspath(tf.dir)), "tensorflow-plugins")
        for rpath in plugin.rpaths:
            if not rpath.startswith("@loader_path"):
                continue  # absolute or @executable_path: outside any installed wheel
            candidate = os.path.normpath(os.path.join(plugin_dir + rpath[len("@loader_path"):],
                                                      path[len("@rpath/"):]))
            for rel in tf.images:
                if os.path.normpath(os.path.join(os.path.abspath(tf.dir), rel)) == candidate:
                    return rel, f"LC_RPATH {rpath}"
    return None, None


def tensorflow_dependencies(plugin):
    """(ordinal, path) of the plugin's load commands that are not system libraries."""
    return [(i, path) for i, (_, path) in enumerate(plugin.dylibs, 1)
            if not path.startswith(("/usr/lib/", "/System/"))]


TF_SYMBOL = re.compile(r"_(TF|TFE|TSL|SP)_"  # the C APIs
                       r"|__Z(T[VIST])?N?[KVr]*\d+(tensorflow|tsl|google|absl|xla|stream_executor|Eigen)")


def is_tensorflow_symbol(symbol):
    """Flat binds the TensorFlow images must provide: TensorFlow's C APIs and
    C++ (with the protobuf, Abseil and Eigen it bundles). The rest, e.g.
    `_objc_msgSend`, come from system libraries this check cannot see."""
    return TF_SYMBOL.match(symbol) is not None


def kinds(binds):
    lazy = sum(b.lazy for b in binds)
    return f"{len(binds) - lazy} non-lazy, {lazy} lazy"


class Compat:
    """The outcome of loading the plugin into one TensorFlow: `lines` say what
    was checked, `problems` why dyld would refuse the plugin or a call fail."""

    def __init__(self, version):
        self.version = version
        self.lines, self.problems = [], []
        self.bound = self.resolved = 0
        self.missing = []  # symbols

    @property
    def loads(self):
        return not self.problems

    def count(self, binds, missing):
        self.bound += len(binds)
        self.resolved += len(binds) - len(missing)
        self.missing += [b.symbol for b in missing]


def check_plugin_compat(plugin, tf):
    result = Compat(tf.version)
    binds = plugin.binds()
    for ordinal, path in tensorflow_dependencies(plugin):
        wanted = [b for b in binds if b.ordinal == ordinal]
        rel, how = locate_dependency(plugin, path, tf)
        if rel is None:
            names = "; ".join(f"{r} is {tf.images[r].install_name}" for r in tf.images)
            result.problems.append(f"dyld cannot find {path}: no loaded image has that install name ({names}) "
                                   f"and the plugin's LC_RPATHs ({', '.join(plugin.rpaths) or 'none'}) "
                                   "lead to no file of the wheel")
            # Still say whether that file would have done, for the record.
            rel, how = tf.dependency(path), "NOT FOUND by dyld; checked against the file of that name"
        if rel is None:
            result.lines.append(f"{path} ({len(wanted)} binds): NOT FOUND, and no file of that name")
            result.count(wanted, [b for b in wanted if not b.weak_import])
            continue
        missing = [b for b in wanted if not b.weak_import and not tf.resolve(rel, b.symbol)]
        result.count(wanted, missing)
        result.lines.append(f"{path} -> {rel} ({how}): exports {len(wanted) - len(missing)} of the "
                            f"{len(wanted)} symbols bound to it ({kinds(wanted)})")
        if missing:
            result.problems.append(f"{len(missing)} symbols bound two-level to {path} are not exported by "
                                   f"{rel} ({kinds(missing)}): {', '.join(b.symbol for b in missing[:3])} ...")
            elsewhere = sorted({r for b in missing for r in tf.exporters(b.symbol)})
            if elsewhere:
                result.lines.append(f"  (some of them are exported by {', '.join(elsewhere)}: "
                                    "the plugin would need relinking against those)")
    flat = [b for b in binds if b.ordinal == ORDINAL_FLAT]
    ours = [b for b in flat if is_tensorflow_symbol(b.symbol)]
    missing = [b for b in ours if not b.weak_import and not tf.exporters(b.symbol)]
    result.count(ours, missing)
    others = sorted({b.symbol for b in flat} - {b.symbol for b in ours})
    result.lines.append(f"flat namespace: {len(ours) - len(missing)} of {len(ours)} TensorFlow symbols "
                        f"({kinds(ours)}) exported by a TensorFlow image"
                        + (f"; left to the system: {', '.join(others)}" if others else ""))
    if missing:
        result.problems.append(f"{len(missing)} symbols bound through the flat namespace are exported by no "
                               f"TensorFlow image ({kinds(missing)}): "
                               f"{', '.join(b.symbol for b in missing[:3])} ...")
    return result


def binds_by_library(plugin):
    """{library: [Bind]} over every bind of the plugin."""
    grouped = {}
    for b in plugin.binds():
        grouped.setdefault(plugin.library(b.ordinal), []).append(b)
    return grouped


# ---- command line -----------------------------------------------------------------------

def cmd_binds(args):
    plugin = MachO(args.plugin)
    print(f"{args.plugin}: {'two-level' if plugin.flags & MH_TWOLEVEL else 'flat'} namespace; "
          f"install name {plugin.install_name}")
    for rpath in plugin.rpaths:
        print(f"  LC_RPATH {rpath}")
    for i, (_, path) in enumerate(plugin.dylibs, 1):
        print(f"  ordinal {i}: {path}")
    for library, binds in sorted(binds_by_library(plugin).items()):
        lazy = sum(b.lazy for b in binds)
        print(f"{library}: {len(binds)} symbols ({len(binds) - lazy} non-lazy, {lazy} lazy)")
        if args.all or not library.startswith(("/usr/lib/", "/System/")):
            for b in sorted(binds, key=lambda b: b.symbol):
                tags = [t for t, on in (("lazy", b.lazy), ("weak-import", b.weak_import)) if on]
                print(f"  {b.symbol}{'  (' + ', '.join(tags) + ')' if tags else ''}")
    return 0


def cmd_plugin_compat(args):
    plugin = MachO(args.plugin)
    results = [check_plugin_compat(plugin, TensorFlow(d)) for d in args.tf_dir]
    for r in results:
        print(f"TensorFlow {r.version}: {'loads' if r.loads else 'does NOT load'} {os.path.basename(args.plugin)}")
        for line in r.lines:
            print(f"  {line}")
        for line in r.problems:
            print(f"  FAIL: {line}")
        if args.verbose and r.missing:
            print("  missing: " + " ".join(r.missing))
    print()
    print("| TensorFlow | loads | TensorFlow binds resolved | missing (examples) |")
    print("| --- | --- | --- | --- |")
    for r in results:
        examples = ", ".join(f"`{s}`" for s in r.missing[:2]) or "-"
        print(f"| {r.version} | {'yes' if r.loads else 'NO'} | {r.resolved}/{r.bound} | {examples} |")
    failed = [r.version for r in results if not r.loads]
    if failed:
        print(f"plugin-compat: {os.path.basename(args.plugin)} cannot load with TensorFlow "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_stream_protocol(args):
    ok, lines = check_stream_protocol(args.plugin, args.header, args.protocol)
    print("\n".join(f"stream-protocol: {line}" for line in lines))
    if not ok:
        print(f"stream-protocol: {os.path.basename(args.plugin)} does not implement {args.protocol} "
              f"as {args.header} declares it", file=sys.stderr)
    return 0 if ok else 1


def cmd_exports(args):
    image = MachO(args.lib)
    trie = image.exports()
    missing = []
    for name in args.symbols:
        symbol = name if name.startswith("_") else "_" + name  # C names carry a leading underscore
        found = trie.lookup(symbol)
        if found is None:
            missing.append(symbol)
            print(f"{symbol}: NOT EXPORTED")
        elif found[0] == "reexport":
            print(f"{symbol}: re-exported from {image.library(found[1])}")
        else:
            print(f"{symbol}: defined")
    if missing:
        print(f"exports: {os.path.basename(args.lib)} does not export {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0


# ---- the macOS wheel ---------------------------------------------------------------------

TBD_SYMBOL_KEYS = {"symbols": "{}", "weak-symbols": "{}", "thread-local-symbols": "{}",
                   "objc-classes": "_OBJC_CLASS_$_{0} _OBJC_METACLASS_$_{0}", "objc-eh-types": "_OBJC_EHTYPE_$_{}",
                   "objc-ivars": "_OBJC_IVAR_$_{}"}


class TextStubs:
    """The SDK's text stubs (.tbd, `--- !tapi-tbd` v4 documents): what each
    system library exports for arm64-macos, re-exported libraries followed."""

    def __init__(self, sdk):
        self.sdk = sdk
        self.docs = {}  # install name -> (set of symbols, [re-exported install names])

    def _load(self, path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for doc in re.split(r"^--- !tapi-tbd", text, flags=re.M)[1:]:
            name = re.search(r"^install-name:\s*'?([^'\n]+)'?", doc, re.M)
            if name is None:
                continue
            symbols, reexports = set(), []
            sections = [(m.start(), m.group(1)) for m in re.finditer(r"^([a-z-]+):", doc, re.M)]
            targets = []
            for m in re.finditer(r"([a-z-]+):\s*\[([^\]]*)\]", doc):
                section = next((sec for pos, sec in reversed(sections) if pos <= m.start()), "")
                key, values = m.group(1), [v.strip().strip("'") for v in m.group(2).split(",") if v.strip()]
                if key == "targets":
                    targets = values
                elif "arm64-macos" not in targets:
                    continue
                elif section in ("exports", "reexports") and key in TBD_SYMBOL_KEYS:
                    for v in values:
                        symbols.update(TBD_SYMBOL_KEYS[key].format(v).split())
                elif section == "reexported-libraries" and key == "libraries":
                    reexports += values
            self.docs[name.group(1).strip()] = (symbols, reexports)

    def _stub_path(self, install_name):
        base = os.path.join(self.sdk, install_name.lstrip("/"))
        for candidate in (os.path.splitext(base)[0] + ".tbd" if base.endswith(".dylib") else base + ".tbd",
                          base + ".tbd"):
            if os.path.exists(candidate):
                return candidate
        return None

    def library(self, install_name):
        if install_name not in self.docs:
            path = self._stub_path(install_name)
            if path is not None:
                self._load(path)
        return self.docs.get(install_name)

    def exports(self, install_name, symbol, depth=0):
        lib = self.library(install_name)
        if lib is None or depth > 8:
            return False
        return symbol in lib[0] or any(self.exports(r, symbol, depth + 1) for r in lib[1])


def read_wheel_tags(names, read):
    wheel_file = next((n for n in names if n.endswith(".dist-info/WHEEL")), None)
    if wheel_file is None:
        return None, []
    text = read(wheel_file).decode()
    return "Root-Is-Purelib: false" not in text, re.findall(r"^Tag: (\S+)", text, re.M)


def check_macos_wheel(wheel, site, sdk, macos_min):
    """Problems (list of strings) and notes of the macOS wheel: tag, arm64-only
    Mach-O files, minimum macOS, every bind resolved by the TensorFlow and
    OpenBLAS of `site` (their unpacked macOS wheels, side by side as in
    site-packages) or the SDK's stubs, the rpaths that find them from
    site-packages/metal_ops, and the Grappler plugin's TF_InitGraph."""
    import json
    import tempfile
    import zipfile

    problems, notes = [], []
    tag = f"py3-none-macosx_{macos_min.replace('.', '_')}_arm64"
    if not os.path.basename(wheel).endswith(f"-{tag}.whl"):
        problems.append(f"{os.path.basename(wheel)}: file name tag is not {tag}")
    stubs = TextStubs(sdk)
    tf = TensorFlow(os.path.join(site, "tensorflow"))
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        names = z.namelist()
        purelib, tags = read_wheel_tags(names, z.read)
        if purelib is not False or tags != [tag]:
            problems.append(f"WHEEL: tags {tags}, platlib {purelib is False} (want [{tag}], platlib)")
        z.extractall(tmp)
        info = json.loads(z.read("metal_ops/_build_info.json"))
        if info.get("platform") != "Darwin-arm64" or "metal" not in info.get("backends", []):
            problems.append(f"_build_info.json: {info} (want platform Darwin-arm64 with the metal backend)")
        try:
            from tools.tf_flags import wheel_version
        except ImportError:  # run as tools/macos_binaries.py
            from tf_flags import wheel_version
        checked = wheel_version(os.path.join(tf.dir, "include"))
        if info.get("tensorflow_version") != checked:
            problems.append(f"built against TensorFlow {info.get('tensorflow_version')}, checked against {checked}")
        libs = sorted(n for n in names if n.endswith((".so", ".dylib")))
        if libs != ["metal_ops/_metal_ops.so", "metal_ops/_metal_ops_grappler.so"]:
            problems.append(f"compiled files {libs}, want metal_ops/_metal_ops.so and _metal_ops_grappler.so")
        loader_dir = os.path.join(site, "metal_ops")  # where the wheel installs them
        for rel in libs:
            image = MachO(os.path.join(tmp, rel))
            where = os.path.basename(rel)
            if image.fat_arches is not None and [c for c, _ in image.fat_arches] != [CPU_TYPE_ARM64]:
                problems.append(f"{where}: fat file with slices {[hex(c) for c, _ in image.fat_arches]}: arm64 only")
            if image.cputype != CPU_TYPE_ARM64:
                problems.append(f"{where}: CPU type {image.cputype:#x}, not arm64")
            if image.build_version != (PLATFORM_MACOS, macos_min):
                problems.append(f"{where}: LC_BUILD_VERSION {image.build_version}, want macOS minimum {macos_min}")
            if image.install_name != f"@rpath/{where}":
                problems.append(f"{where}: install name {image.install_name}, want @rpath/{where}")
            if not image.flags & MH_TWOLEVEL:
                problems.append(f"{where}: not linked with two-level namespaces")
            found = {}
            for _, path in image.dylibs:
                if path.startswith("@rpath/"):
                    hits = [os.path.normpath(os.path.join(loader_dir + r[len("@loader_path"):], path[7:]))
                            for r in image.rpaths if r.startswith("@loader_path")]
                    hits = [h for h in hits if os.path.exists(h)]
                    if not hits:
                        problems.append(f"{where}: {path} is found through none of its rpaths "
                                        f"{image.rpaths} from site-packages/metal_ops")
                    else:
                        found[path] = hits[0]
                elif path.startswith(("/usr/lib/", "/System/")):
                    if stubs.library(path) is None:
                        problems.append(f"{where}: {path} is not in the SDK")
                else:
                    problems.append(f"{where}: loads {path}, neither @rpath/ nor a system library")
            missing, resolved = [], 0
            for bind in image.binds():
                if bind.ordinal < 1:
                    if bind.ordinal == ORDINAL_FLAT:
                        problems.append(f"{where}: flat-namespace lookup of {bind.symbol}")
                    continue
                path = image.library(bind.ordinal)
                if path in found:
                    target = os.path.relpath(found[path], tf.dir)
                    ok = (tf.resolve(target, bind.symbol) if target in tf.images
                          else MachO(found[path]).exports().lookup(bind.symbol) is not None)
                else:
                    ok = stubs.exports(path, bind.symbol)
                if ok or bind.weak_import:
                    resolved += 1
                else:
                    missing.append(f"{bind.symbol} (from {path})")
            if missing:
                problems.append(f"{where}: {len(missing)} binds resolve nowhere: {missing[:8]}")
            exports_init = image.exports().lookup("_TF_InitGraph") is not None
            if exports_init != (where == "_metal_ops_grappler.so"):
                problems.append(f"{where}: exports TF_InitGraph: {exports_init} (only the Grappler plugin must)")
            local = [r for r in image.rpaths if not r.startswith("@")]
            if local:
                problems.append(f"{where}: rpaths into the build machine (on a user's Mac they name directories "
                                f"anyone may create, searched for TensorFlow's libraries): {local}")
            notes.append(f"{where}: arm64, macOS {image.build_version[1] if image.build_version else '?'}, "
                         f"{resolved} binds resolved ({len(found)} libraries through rpaths "
                         f"{', '.join(r for r in image.rpaths if r.startswith('@'))}), install name {image.install_name}")
    return problems, notes


def report(prefix, wheel, problems, notes):
    """Prints a wheel check's notes and problems; the exit status (0: passed)."""
    for line in notes:
        print(f"{prefix}: {line}")
    for p in problems:
        print(f"{prefix}: FAILED: {p}", file=sys.stderr)
    if not problems:
        print(f"{prefix}: OK: {os.path.basename(wheel)}")
    return 1 if problems else 0


def cmd_wheel(args):
    problems, notes = check_macos_wheel(args.wheel, os.path.abspath(args.site_packages), args.sdk, args.macos_min)
    return report("macos wheel", args.wheel, problems, notes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugin-compat", help="whether the plugin loads with each TensorFlow")
    p.add_argument("--plugin", required=True, help="tensorflow-plugins/libmetal_plugin.dylib")
    p.add_argument("--tf-dir", required=True, action="append",
                   help="an unpacked TensorFlow wheel's tensorflow/ folder (repeatable)")
    p.add_argument("--verbose", action="store_true", help="list every missing symbol")
    p.set_defaults(run=cmd_plugin_compat)
    p = sub.add_parser("stream-protocol", help="the plugin's stream class implements our protocol")
    p.add_argument("--plugin", required=True)
    p.add_argument("--header", required=True)
    p.add_argument("--protocol", default="TF_MetalStream")
    p.set_defaults(run=cmd_stream_protocol)
    p = sub.add_parser("binds", help="the plugin's load commands and the symbols bound to each library")
    p.add_argument("--plugin", required=True)
    p.add_argument("--all", action="store_true", help="list system libraries' symbols too")
    p.set_defaults(run=cmd_binds)
    p = sub.add_parser("exports", help="whether a library's export trie has these symbols")
    p.add_argument("--lib", required=True)
    p.add_argument("symbols", nargs="+")
    p.set_defaults(run=cmd_exports)
    p = sub.add_parser("wheel", help="the macOS wheel: tag, arm64, minimum macOS, binds, rpaths, exports")
    p.add_argument("--wheel", required=True)
    p.add_argument("--site-packages", required=True,
                   help="the pinned macOS TensorFlow and scipy-openblas32 wheels unpacked side by side")
    p.add_argument("--sdk", required=True)
    p.add_argument("--macos-min", required=True, help="the documented minimum macOS, e.g. 12.0")
    p.set_defaults(run=cmd_wheel)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (MachOError, ValueError, OSError) as e:
        print(f"macos_binaries {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

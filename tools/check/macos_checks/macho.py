"""A small Mach-O reader (standard library only): load commands, dyld binds
and export tries of one arm64 image.

Not llvm-objdump: Debian's llvm-objdump 14 misreads the relative Objective-C
method lists Apple's toolchains emit, cannot list the binds of chained-fixup
images, and prints libraries by short name rather than by the ordinal a
two-level bind actually uses.
"""
from dataclasses import dataclass
import mmap
import os
import struct

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


def binds_by_library(plugin):
    """{library: [Bind]} over every bind of the plugin."""
    grouped = {}
    for b in plugin.binds():
        grouped.setdefault(plugin.library(b.ordinal), []).append(b)
    return grouped

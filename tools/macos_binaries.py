"""Checks of the macOS binaries the Metal backend depends on, from Linux.

    python tools/macos_binaries.py stream-protocol --plugin libmetal_plugin.dylib \\
        --header kernels/metal/tf_metal_stream.h
    python tools/macos_binaries.py plugin-compat --plugin libmetal_plugin.dylib --tf-dir DIR/tensorflow

stream-protocol: reads the Objective-C metadata of tensorflow-metal's plugin
(a small Mach-O parser below: Debian's llvm-objdump 14 cannot decode the
relative method lists Apple's toolchains now emit) and checks that a class
adopting `TF_MetalStream` implements every method our header declares, so a
plugin release that changes the protocol is caught before a Mac user is.

plugin-compat: the plugin binds TensorFlow's C API and some protobuf symbols
two-level to `@rpath/_pywrap_tensorflow_internal.so`; dyld refuses to load it
when that library neither defines nor re-exports one of them. Lists the binds
(`llvm-objdump --macho --bind --lazy-bind`) and the library's export trie
(`llvm-objdump --macho --exports-trie`), and checks every two-level bind to a
TensorFlow library and every flat-namespace bind against the TensorFlow
libraries in --tf-dir. Exit status 1 with the missing symbols named.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys

# ---- Mach-O, just enough for Objective-C class metadata ---------------------------------

MH_MAGIC_64 = 0xFEEDFACF
LC_SEGMENT_64 = 0x19
RELATIVE_METHODS = 0x80000000  # method_list_t flag: 32-bit offsets instead of pointers
SMALL_METHOD_SELECTORS_ARE_DIRECT = 0x40000000


class MachOError(Exception):
    pass


class MachO:
    """A 64-bit little-endian Mach-O file (not a fat one) with plain pointers."""

    def __init__(self, data):
        self.data = data
        if len(data) < 32 or struct.unpack_from("<I", data, 0)[0] != MH_MAGIC_64:
            raise MachOError("not a 64-bit Mach-O file (a fat or 32-bit binary is not supported)")
        ncmds = struct.unpack_from("<I", data, 16)[0]
        self.sections = {}  # (segment, section) -> (vmaddr, size, fileoff)
        self.segments = []  # (vmaddr, vmsize, fileoff, filesize)
        offset = 32
        for _ in range(ncmds):
            cmd, cmdsize = struct.unpack_from("<II", data, offset)
            if cmd == LC_SEGMENT_64:
                segname = data[offset + 8:offset + 24].rstrip(b"\0").decode()
                vmaddr, vmsize, fileoff, filesize = struct.unpack_from("<QQQQ", data, offset + 24)
                nsects = struct.unpack_from("<I", data, offset + 64)[0]
                self.segments.append((vmaddr, vmsize, fileoff, filesize))
                for i in range(nsects):
                    s = offset + 72 + 80 * i
                    sectname = data[s:s + 16].rstrip(b"\0").decode()
                    addr, size = struct.unpack_from("<QQ", data, s + 32)
                    sect_off = struct.unpack_from("<I", data, s + 48)[0]
                    self.sections[(segname, sectname)] = (addr, size, sect_off)
            offset += cmdsize

    def offset_of(self, vmaddr):
        for base, vmsize, fileoff, filesize in self.segments:
            if base <= vmaddr < base + min(vmsize, filesize):
                return fileoff + (vmaddr - base)
        raise MachOError(f"address {vmaddr:#x} is in no file-backed segment")

    def u32(self, vmaddr):
        return struct.unpack_from("<I", self.data, self.offset_of(vmaddr))[0]

    def i32(self, vmaddr):
        return struct.unpack_from("<i", self.data, self.offset_of(vmaddr))[0]

    def ptr(self, vmaddr):
        # Plain rebased pointers; the low bits Apple uses for tags are cleared.
        return struct.unpack_from("<Q", self.data, self.offset_of(vmaddr))[0] & 0x0000FFFFFFFFFFFF

    def cstring(self, vmaddr):
        start = self.offset_of(vmaddr)
        end = self.data.index(b"\0", start)
        return self.data[start:end].decode("utf-8", "replace")

    def section(self, name):
        for (_, sect), value in self.sections.items():
            if sect == name:
                return value
        return None


def method_names(macho, list_addr):
    if list_addr == 0:
        return []
    entsize_flags = macho.u32(list_addr)
    count = macho.u32(list_addr + 4)
    names = []
    if entsize_flags & RELATIVE_METHODS:
        entsize = entsize_flags & 0xFFFC
        for i in range(count):
            field = list_addr + 8 + i * entsize
            target = field + macho.i32(field)
            # On disk the name offset points to a selector reference (a
            # pointer to the name); in the shared cache directly to the name.
            names.append(macho.cstring(target) if entsize_flags & SMALL_METHOD_SELECTORS_ARE_DIRECT
                         else macho.cstring(macho.ptr(target)))
    else:
        entsize = entsize_flags & 0xFFFC
        for i in range(count):
            names.append(macho.cstring(macho.ptr(list_addr + 8 + i * entsize)))
    return names


def protocol_names(macho, list_addr):
    if list_addr == 0:
        return []
    count = struct.unpack_from("<Q", macho.data, macho.offset_of(list_addr))[0]
    # protocol_t: isa, name, ...
    return [macho.cstring(macho.ptr(macho.ptr(list_addr + 8 + 8 * i) + 8)) for i in range(count)]


def objc_classes(macho):
    """{class name: {"methods": [...], "protocols": [...]}} from __objc_classlist."""
    section = macho.section("__objc_classlist")
    if section is None:
        return {}
    addr, size, _ = section
    classes = {}
    for i in range(size // 8):
        cls = macho.ptr(addr + 8 * i)
        ro = macho.ptr(cls + 32) & ~0x7  # class_t.data
        name = macho.cstring(macho.ptr(ro + 24))
        classes[name] = {
            "methods": method_names(macho, macho.ptr(ro + 32)),
            "protocols": protocol_names(macho, macho.ptr(ro + 40)),
        }
    return classes


# ---- the protocol our glue declares -----------------------------------------------------

def declared_selectors(header_text, protocol):
    """Instance selectors (and property getters/setters) of `@protocol <name>`."""
    match = re.search(rf"@protocol\s+{protocol}\b(.*?)@end", header_text, re.DOTALL)
    if match is None:
        raise ValueError(f"no @protocol {protocol} ... @end in the header")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", match.group(1), flags=re.DOTALL)
    selectors = []
    for decl in (d.strip() for d in body.split(";")):
        if decl.startswith("-"):
            parts = re.findall(r"(\w+)\s*:", decl)
            selectors.append("".join(p + ":" for p in parts) if parts else re.findall(r"\)\s*(\w+)", decl)[-1])
        elif decl.startswith("@property"):
            attrs = re.search(r"@property\s*\(([^)]*)\)", decl)
            attrs = [a.strip() for a in attrs.group(1).split(",")] if attrs else []
            name = re.findall(r"(\w+)\s*$", decl)[-1]
            getter = next((a.split("=")[1].strip() for a in attrs if a.startswith("getter")), name)
            selectors.append(getter)
            if "readonly" not in attrs:
                selectors.append(f"set{name[0].upper()}{name[1:]}:")
    return selectors


def check_stream_protocol(plugin_path, header_path, protocol="TF_MetalStream"):
    """(ok, lines): every declared selector implemented by a class adopting `protocol`."""
    with open(header_path, encoding="utf-8") as f:
        wanted = declared_selectors(f.read(), protocol)
    with open(plugin_path, "rb") as f:
        classes = objc_classes(MachO(f.read()))
    adopters = {name: c for name, c in classes.items() if protocol in c["protocols"]}
    if not adopters:
        return False, [f"{os.path.basename(plugin_path)}: no class adopts {protocol} "
                       f"(classes: {', '.join(sorted(classes)) or 'none'})"]
    ok = True
    lines = []
    for name, c in sorted(adopters.items()):
        missing = [s for s in wanted if s not in c["methods"]]
        ok = ok and not missing
        lines.append(f"{name} adopts {protocol}; implements {', '.join(c['methods'])}")
        lines.append(f"  missing: {', '.join(missing)}" if missing else
                     f"  every method of {os.path.basename(header_path)} is implemented: {', '.join(wanted)}")
    return ok, lines


# ---- binds against TensorFlow's exports -------------------------------------------------

def llvm_objdump():
    for name in ("llvm-objdump", "llvm-objdump-14", "llvm-objdump-15", "llvm-objdump-16"):
        if shutil.which(name):
            return name
    raise SystemExit("macos_binaries: llvm-objdump not found (apt-get install llvm)")


def parse_binds(text):
    """[(dylib, symbol)] from `llvm-objdump --macho --bind --lazy-bind` text."""
    binds = []
    table = None
    for line in text.splitlines():
        if line.lower().endswith("bind table:"):
            table = line
            continue
        fields = line.split()
        if table is None or len(fields) < 5 or not fields[0].startswith("__"):
            continue
        if fields[-1] == "(weak_import)":
            fields = fields[:-1]
        binds.append((fields[-2], fields[-1]))
    return binds


def parse_exports(text):
    """The names an export trie defines or re-exports."""
    names = set()
    for line in text.splitlines():
        match = re.search(r"(?:\[re-export\]\s+)?(_\S+)", line.strip())
        if match:
            names.add(match.group(1))
    return names


def check_plugin_compat(plugin_path, tf_dir, objdump=None):
    objdump = objdump or llvm_objdump()
    run = lambda *args: subprocess.run([objdump, "--macho", *args], capture_output=True, text=True,  # noqa: E731
                                       check=True).stdout
    binds = parse_binds(run("--bind", "--lazy-bind", plugin_path))
    libraries = {
        "_pywrap_tensorflow_internal.so": os.path.join(tf_dir, "python", "_pywrap_tensorflow_internal.so"),
        "libtensorflow_framework.2.dylib": os.path.join(tf_dir, "libtensorflow_framework.2.dylib"),
        "libtensorflow_cc.2.dylib": os.path.join(tf_dir, "libtensorflow_cc.2.dylib"),
    }
    exports = {}
    for name, path in libraries.items():
        if not os.path.exists(path):
            raise SystemExit(f"macos_binaries: {path} is missing (unpack it from the TensorFlow wheel)")
        exports[name] = parse_exports(run("--exports-trie", path))
    everything = set().union(*exports.values())
    lines, missing = [], []
    for dylib in sorted({d for d, _ in binds}):
        base = os.path.basename(dylib)
        symbols = sorted({s for d, s in binds if d == dylib})
        if base in exports:
            lost = [s for s in symbols if s not in exports[base]]
        elif dylib == "flat-namespace":
            # Resolved in any loaded image; only TensorFlow's own symbols are ours to check.
            ours = [s for s in symbols if "tensorflow" in s or s.startswith(("_TF_", "_TFE_"))]
            lost = [s for s in ours if s not in everything]
            symbols = ours
        else:
            continue  # system libraries
        lines.append(f"{dylib}: {len(symbols)} symbols bound, {len(symbols) - len(lost)} exported by TensorFlow")
        missing += [(dylib, s) for s in lost]
    return not missing, lines, missing


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("stream-protocol", help="the plugin's stream class implements our TF_MetalStream")
    p.add_argument("--plugin", required=True)
    p.add_argument("--header", required=True)
    p.add_argument("--protocol", default="TF_MetalStream")
    c = sub.add_parser("plugin-compat", help="the plugin's TensorFlow binds resolve against --tf-dir")
    c.add_argument("--plugin", required=True)
    c.add_argument("--tf-dir", required=True, help="the unpacked wheel's tensorflow/ folder")
    args = parser.parse_args(argv)

    if args.command == "stream-protocol":
        try:
            ok, lines = check_stream_protocol(args.plugin, args.header, args.protocol)
        except (MachOError, ValueError, OSError) as e:
            print(f"stream-protocol: {args.plugin}: {e}", file=sys.stderr)
            return 1
        print("\n".join(f"stream-protocol: {line}" for line in lines))
        return 0 if ok else 1
    ok, lines, missing = check_plugin_compat(args.plugin, args.tf_dir)
    print("\n".join(f"plugin-compat: {line}" for line in lines))
    if missing:
        shown = ", ".join(f"{s} ({d})" for d, s in missing[:8])
        print(f"plugin-compat: {len(missing)} symbols the plugin binds are not exported: {shown}"
              f"{' ...' if len(missing) > 8 else ''}: dyld would refuse to load it with this TensorFlow",
              file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

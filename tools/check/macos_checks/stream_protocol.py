"""stream-protocol: a class of the plugin adopting `TF_MetalStream` implements
every selector of the header's `@protocol TF_MetalStream` (methods, property
getters and setters), void where declared void, so a plugin release that
changes the protocol is caught.
"""
import os
import re
import struct

from .macho import MachO

RELATIVE_METHODS = 0x80000000  # method_list_t flag: 32-bit offsets instead of pointers
RELATIVE_SELECTORS_ARE_DIRECT = 0x40000000  # shared-cache only: the offset is to the name


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

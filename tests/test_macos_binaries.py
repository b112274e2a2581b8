"""tools/check/macos_binaries.py (tools/check/macos_checks/): the checks `make metal-check` runs on the real
tensorflow-metal and TensorFlow macOS binaries.

The parsers run here on Mach-O files built by this test (load commands, dyld
bind opcodes, an export trie, Objective-C class metadata). When a metal-check
run has unpacked the pinned wheels under build/macos, the checks also run on
the real binaries; otherwise those tests skip. Nothing here downloads.
"""
import glob
import os
import shutil
import struct

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from tools.check import macos_binaries
from tools.check.macos_checks import macho, plugin_compat, stream_protocol
from tools.check.macos_checks.tensorflow_wheel import TensorFlow
from tools.check.macos_checks.text_stubs import TextStubs

pytestmark = pytest.mark.source_tree("tools/check/macos_binaries.py, tools/check/macos_checks and kernels/metal")

HEADER = os.path.join(ROOT, "kernels", "metal", "tf_metal_stream.h")
STREAM_METHODS = [("initWithMetalStream:", "@24@0:8^v16"), ("queue", "@16@0:8"),
                  ("currentCommandBuffer", "@16@0:8"), ("commit", "v16@0:8"), ("commitAndWait", "v16@0:8")]


# ---- encoders for the test inputs ---------------------------------------------------------

def uleb(value, width=None):
    """ULEB128; `width` pads it to a fixed length (legal, and keeps trie offsets simple)."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value or (width and len(out) + 1 < width):
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def bind_stream(entries, lazy=False):
    """dyld bind opcodes for [(ordinal, symbol, weak_import)] (ordinal < 0: special)."""
    out = bytearray()
    for ordinal, symbol, weak in entries:
        out += bytes([0x72]) + uleb(0x10)  # SET_SEGMENT_AND_OFFSET_ULEB: segment 2
        if ordinal <= 0:
            out.append(0x30 | (ordinal & 0x0F))  # SET_DYLIB_SPECIAL_IMM
        elif ordinal < 16:
            out.append(0x10 | ordinal)  # SET_DYLIB_ORDINAL_IMM
        else:
            out += bytes([0x20]) + uleb(ordinal)
        out.append(0x40 | (1 if weak else 0))
        out += symbol.encode() + b"\0"
        if not lazy:
            out.append(0x51)  # SET_TYPE_IMM pointer
            out += bytes([0xC0]) + uleb(2) + uleb(8)  # DO_BIND_ULEB_TIMES_SKIPPING_ULEB
        else:
            out += bytes([0x90, 0x00])  # DO_BIND, DONE (every lazy entry ends with DONE)
    if not lazy:
        out.append(0x00)
    return bytes(out)


def export_trie(symbols):
    """An export trie for {name: None (defined) or (ordinal, imported name)}."""
    def build(names, prefix):
        node = {"terminal": symbols.get(prefix, "absent") if prefix in symbols else "absent", "edges": []}
        rest = sorted(n[len(prefix):] for n in names if n != prefix)
        while rest:
            first = rest[0][0]
            group = [r for r in rest if r[0] == first]
            common = os.path.commonprefix(group)
            node["edges"].append((common, build([prefix + g for g in group], prefix + common)))
            rest = [r for r in rest if r[0] != first]
        return node

    nodes = []

    def flatten(node):
        nodes.append(node)
        for _, child in node["edges"]:
            flatten(child)

    flatten(build(list(symbols), ""))

    def encode(node, offsets):
        if node["terminal"] == "absent":
            body = uleb(0)
        else:
            if node["terminal"] is None:
                info = uleb(0) + uleb(0x1234)  # flags, address
            else:
                ordinal, name = node["terminal"]
                info = uleb(macho.EXPORT_SYMBOL_FLAGS_REEXPORT) + uleb(ordinal) + name.encode() + b"\0"
            body = uleb(len(info)) + info
        body += bytes([len(node["edges"])])
        for edge, child in node["edges"]:
            body += edge.encode() + b"\0" + uleb(offsets[id(child)], width=4)
        return body

    offsets = {id(n): 0 for n in nodes}
    for _ in range(2):  # sizes do not depend on offsets (fixed-width), so one pass settles them
        at = 0
        for n in nodes:
            offsets[id(n)] = at
            at += len(encode(n, offsets))
    return b"".join(encode(n, offsets) for n in nodes)


def dylib_command(cmd, name):
    body = name.encode() + b"\0"
    size = (24 + len(body) + 7) & ~7
    return struct.pack("<IIIIII", cmd, size, 24, 2, 0x10000, 0x10000) + body.ljust(size - 24, b"\0")


def rpath_command(path):
    body = path.encode() + b"\0"
    size = (12 + len(body) + 7) & ~7
    return struct.pack("<III", macho.LC_RPATH, size, 12) + body.ljust(size - 12, b"\0")


DATA_VM, DATA_OFF, LINKEDIT_OFF = 0x4000, 0x1000, 0x2000


def objc_data(class_name, protocol, methods, relative=True, protocol_methods=()):
    """__DATA contents: one class (with `methods` [(selector, types)]) adopting `protocol`."""
    blob = bytearray(0x1000)
    strings = {}
    cursor = [0xA00]

    def cstr(s):
        if s not in strings:
            at = cursor[0]
            blob[at:at + len(s) + 1] = s.encode() + b"\0"
            strings[s] = DATA_VM + at
            cursor[0] += len(s) + 1
        return strings[s]

    def put_q(at, value):
        struct.pack_into("<Q", blob, at, value)

    classlist, cls, ro, mlist, protolist, proto, pmlist, selrefs = 0x0, 0x20, 0x60, 0x100, 0x300, 0x320, 0x380, 0x600
    put_q(classlist, DATA_VM + cls)
    put_q(cls + 32, DATA_VM + ro + 1)                # class_t.data, with a flag bit set
    put_q(ro + 24, cstr(class_name))                 # class_ro_t.name
    put_q(ro + 32, DATA_VM + mlist)                  # baseMethods
    put_q(ro + 40, DATA_VM + protolist)              # baseProtocols
    put_q(protolist, 1)
    put_q(protolist + 8, DATA_VM + proto)
    put_q(proto + 8, cstr(protocol))                 # protocol_t.name
    put_q(proto + 24, DATA_VM + pmlist)              # protocol_t.instanceMethods
    struct.pack_into("<II", blob, pmlist, 24, len(protocol_methods))
    for i, (name, types) in enumerate(protocol_methods):
        put_q(pmlist + 8 + 24 * i, cstr(name))
        put_q(pmlist + 16 + 24 * i, cstr(types))
    if relative:
        struct.pack_into("<II", blob, mlist, stream_protocol.RELATIVE_METHODS | 12, len(methods))
        for i, (name, types) in enumerate(methods):
            put_q(selrefs + 8 * i, cstr(name))
            field = mlist + 8 + 12 * i
            struct.pack_into("<ii", blob, field, (selrefs + 8 * i) - field, (cstr(types) - DATA_VM) - (field + 4))
    else:
        struct.pack_into("<II", blob, mlist, 24, len(methods))
        for i, (name, types) in enumerate(methods):
            put_q(mlist + 8 + 24 * i, cstr(name))
            put_q(mlist + 16 + 24 * i, cstr(types))
    return bytes(blob)


def macho_image(install_name=None, dylibs=(), rpaths=(), binds=(), lazy_binds=(), exports=None, objc=None):
    """A 64-bit arm64 Mach-O dylib; `dylibs` are LC_LOAD_DYLIB paths (or (cmd, path))."""
    linkedit = bytearray()

    def place(blob):
        at = LINKEDIT_OFF + len(linkedit)
        linkedit.extend(blob)
        return at, len(blob)

    bind_off, bind_size = place(bind_stream(binds))
    lazy_off, lazy_size = place(bind_stream(lazy_binds, lazy=True))
    export_off, export_size = place(export_trie(exports or {}))
    cmds = []
    if objc is not None:
        seg = struct.pack("<II16sQQQQiiII", macho.LC_SEGMENT_64, 72 + 80, b"__DATA", DATA_VM, 0x1000, DATA_OFF,
                          0x1000, 3, 3, 1, 0)
        seg += struct.pack("<16s16sQQIIIIIIII", b"__objc_classlist", b"__DATA", DATA_VM, 8, DATA_OFF, 3, 0, 0, 0,
                           0, 0, 0)
        cmds.append(seg)
    if install_name:
        cmds.append(dylib_command(macho.LC_ID_DYLIB, install_name))
    for d in dylibs:
        cmd, path = d if isinstance(d, tuple) else (macho.LC_LOAD_DYLIB, d)
        cmds.append(dylib_command(cmd, path))
    cmds += [rpath_command(p) for p in rpaths]
    cmds.append(struct.pack("<II10I", macho.LC_DYLD_INFO_ONLY, 48, 0, 0, bind_off, bind_size, 0, 0,
                            lazy_off, lazy_size, export_off, export_size))
    commands = b"".join(cmds)
    header = struct.pack("<IiiIIIII", macho.MH_MAGIC_64, macho.CPU_TYPE_ARM64, 0, 6, len(cmds), len(commands),
                         macho.MH_TWOLEVEL, 0)
    data = bytearray((header + commands).ljust(DATA_OFF, b"\0"))
    data += objc if objc is not None else bytes(0x1000)
    return bytes(data + linkedit)


# ---- bind opcodes, chained imports, export tries ------------------------------------------

def test_bind_opcodes():
    binds = macho.parse_bind_opcodes(bind_stream([(2, "_TF_NewStatus", False), (-2, "_TF_GetStream", False),
                                               (20, "_far", False), (6, "_OBJC_CLASS_$_X", True),
                                               (2, "_TF_NewStatus", False)]))
    assert binds == [macho.Bind(2, "_TF_NewStatus"), macho.Bind(-2, "_TF_GetStream"), macho.Bind(20, "_far"),
                     macho.Bind(6, "_OBJC_CLASS_$_X", weak_import=True)]
    lazy = macho.parse_bind_opcodes(bind_stream([(2, "_a", False), (-2, "_b", False)], lazy=True), lazy=True)
    assert lazy == [macho.Bind(2, "_a", lazy=True), macho.Bind(-2, "_b", lazy=True)]


def test_bind_opcodes_reject_garbage():
    with pytest.raises(macho.MachOError, match="unknown bind opcode"):
        macho.parse_bind_opcodes(b"\xe0")


def test_chained_fixup_imports():
    names = b"\0_TF_NewStatus\0_weak\0"
    imports = struct.pack("<II", 2 | (1 << 9), 0xFE | (1 << 8) | (15 << 9))  # ordinal 2; flat, weak
    header = struct.pack("<7I", 0, 0, 28, 28 + len(imports), 2, 1, 0)
    assert macho.parse_chained_imports(header + imports + names) == [
        macho.Bind(2, "_TF_NewStatus"), macho.Bind(-2, "_weak", weak_import=True)]


def test_export_trie_lookup_and_names():
    trie = macho.ExportTrie(export_trie({"_TF_NewStatus": None, "_TF_NewTensor": None, "_TF_New": None,
                                      "_TF_DeleteStatus": (1, ""), "_Py": (2, "_PyInit")}))
    assert trie.names() == ["_Py", "_TF_DeleteStatus", "_TF_New", "_TF_NewStatus", "_TF_NewTensor"]
    assert trie.lookup("_TF_NewStatus") == ("defined", None, None)
    assert trie.lookup("_TF_New") == ("defined", None, None)
    assert trie.lookup("_TF_DeleteStatus") == ("reexport", 1, "")
    assert trie.lookup("_Py") == ("reexport", 2, "_PyInit")
    assert trie.lookup("_TF_Ne") is None and trie.lookup("_TF_NewStatusX") is None
    assert macho.ExportTrie(b"").lookup("_x") is None


def test_load_commands_and_binds_by_ordinal():
    image = macho.MachO(macho_image(install_name="@rpath/libplugin.dylib",
                           dylibs=["/usr/lib/libc++.1.dylib", "@rpath/_pywrap_tensorflow_internal.so",
                                   (macho.LC_LOAD_WEAK_DYLIB, "/usr/lib/libweak.dylib")],
                           rpaths=["@loader_path/../somewhere"],
                           binds=[(2, "_X_default_instance", False), (-2, "_objc_msgSend", False)],
                           lazy_binds=[(2, "_TF_NewStatus", False), (3, "_w", True)]))
    assert image.install_name == "@rpath/libplugin.dylib"
    assert image.rpaths == ["@loader_path/../somewhere"]
    assert [image.library(b.ordinal) for b in image.binds()] == [
        "@rpath/_pywrap_tensorflow_internal.so", "flat-namespace", "@rpath/_pywrap_tensorflow_internal.so",
        "/usr/lib/libweak.dylib"]
    assert image.binds()[2].lazy and image.binds()[3].weak_import
    with pytest.raises(macho.MachOError, match="ordinal 9"):
        image.library(9)


def test_not_a_macho_is_a_clear_error():
    with pytest.raises(macho.MachOError, match="not a 64-bit little-endian Mach-O"):
        macho.MachO(b"\x7fELF" + bytes(60))


def test_fat_file_picks_the_arm64_slice():
    thin = macho_image(install_name="@rpath/x.dylib")
    fat = struct.pack(">IIIIIII", macho.FAT_MAGIC, 1, macho.CPU_TYPE_ARM64, 0, 0x4000, len(thin), 14)
    image = macho.MachO(fat.ljust(0x4000, b"\0") + thin)
    assert image.install_name == "@rpath/x.dylib"


# ---- plugin-compat on a fake plugin and fake TensorFlow wheels ----------------------------

PYWRAP = "@rpath/_pywrap_tensorflow_internal.so"
PLUGIN_DYLIBS = ["/usr/lib/libc++.1.dylib", PYWRAP]
RPATHS = ["@loader_path/../_solib_darwin_arm64/bazel_only"]


def fake_plugin(tmp_path):
    path = tmp_path / "tensorflow-plugins" / "libmetal_plugin.dylib"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(macho_image(dylibs=PLUGIN_DYLIBS, rpaths=RPATHS,
                           binds=[(2, "__ZN10tensorflow28_AttrValue_default_instance_E", False),
                                  (-2, "_objc_msgSend", False)],
                           lazy_binds=[(2, "_TF_NewStatus", False), (-2, "_TF_GetStream", False),
                                       (1, "__ZNSt3__14cout", False)]))
    return str(path)


def fake_tensorflow(tmp_path, version, pywrap_name=PYWRAP, pywrap_exports=None, framework_exports=None):
    """site-packages/{tensorflow, tensorflow-X.dist-info}: the pywrap library re-exports
    the C API from libtensorflow_cc, as 2.17-2.19 do."""
    site = tmp_path / f"site-{version}"
    (site / "tensorflow" / "python").mkdir(parents=True)
    (site / f"tensorflow-{version}.dist-info").mkdir()
    if pywrap_exports is None:
        pywrap_exports = {"_TF_NewStatus": (2, ""), "__ZN10tensorflow28_AttrValue_default_instance_E": (2, "")}
    (site / "tensorflow" / "python" / "_pywrap_tensorflow_internal.so").write_bytes(macho_image(
        install_name=pywrap_name,
        dylibs=["/usr/lib/libc++.1.dylib", "@rpath/libtensorflow_cc.2.dylib"], exports=pywrap_exports))
    (site / "tensorflow" / "libtensorflow_cc.2.dylib").write_bytes(macho_image(
        install_name="@rpath/libtensorflow_cc.2.dylib",
        exports={"_TF_NewStatus": None, "__ZN10tensorflow28_AttrValue_default_instance_E": None}))
    (site / "tensorflow" / "libtensorflow_framework.2.dylib").write_bytes(macho_image(
        install_name="@rpath/libtensorflow_framework.2.dylib",
        exports=framework_exports if framework_exports is not None else {"_TF_GetStream": None}))
    return str(site / "tensorflow")


def test_plugin_loads_when_every_bind_resolves(tmp_path):
    plugin = macho.MachO(fake_plugin(tmp_path))
    result = plugin_compat.check_plugin_compat(plugin, TensorFlow(fake_tensorflow(tmp_path, "2.19.1")))
    assert result.loads, result.problems
    assert result.version == "2.19.1"
    assert (result.resolved, result.bound) == (3, 3)  # libc++ and _objc_msgSend are the system's
    assert "left to the system: _objc_msgSend" in result.lines[-1]


def test_plugin_fails_on_a_stub_with_another_install_name(tmp_path):
    tf = TensorFlow(fake_tensorflow(tmp_path, "2.20.0", pywrap_name="bazel-out/lib__pywrap_16.dylib",
                                       pywrap_exports={"_PyInit__pywrap_tensorflow_internal": None},
                                       framework_exports={}))
    result = plugin_compat.check_plugin_compat(macho.MachO(fake_plugin(tmp_path)), tf)
    assert not result.loads
    assert any("dyld cannot find @rpath/_pywrap_tensorflow_internal.so" in p for p in result.problems)
    assert any("2 symbols bound two-level" in p and "1 non-lazy, 1 lazy" in p for p in result.problems)
    assert any("flat namespace" in p and "_TF_GetStream" in p for p in result.problems)
    assert any("exported by libtensorflow_cc.2.dylib" in line for line in result.lines)
    assert sorted(result.missing) == ["_TF_GetStream", "_TF_NewStatus",
                                      "__ZN10tensorflow28_AttrValue_default_instance_E"]


def test_version_from_the_path_without_dist_info(tmp_path):
    tf_dir = fake_tensorflow(tmp_path, "2.19.1")
    os.rmdir(os.path.join(os.path.dirname(tf_dir), "tensorflow-2.19.1.dist-info"))
    unpacked = tmp_path / "build" / "macos" / "tf-2.18.1"
    unpacked.parent.mkdir(parents=True)
    os.rename(os.path.dirname(tf_dir), unpacked)
    assert TensorFlow(str(unpacked / "tensorflow")).version == "2.18.1"
    assert TensorFlow(str(unpacked)).version == "2.18.1"


def test_version_from_the_wheels_metadata_not_the_cache_folder(tmp_path):
    """metal_check.sh unpacks into tf-<tf>-openblas-<blas>; the report must name
    TensorFlow's version (METADATA's Version), never OpenBLAS's."""
    tf_dir = fake_tensorflow(tmp_path, "2.19.1")
    site = os.path.dirname(tf_dir)
    with open(os.path.join(site, "tensorflow-2.19.1.dist-info", "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: tensorflow\nVersion: 2.19.1\n")
    cache = tmp_path / "build" / "macos" / "tf-2.19.1-openblas-0.3.34.481.3"
    cache.parent.mkdir(parents=True)
    os.rename(site, cache)
    assert TensorFlow(str(cache / "tensorflow")).version == "2.19.1"
    shutil.rmtree(cache / "tensorflow-2.19.1.dist-info")
    assert TensorFlow(str(cache / "tensorflow")).version == "2.19.1"  # from tf-X, not 0.3.34


def test_a_reexport_must_resolve_in_its_target(tmp_path):
    tf = TensorFlow(fake_tensorflow(tmp_path, "2.19.1", pywrap_exports={
        "_TF_NewStatus": (2, "_TF_NewStatusRenamed"),  # libtensorflow_cc has no such name
        "__ZN10tensorflow28_AttrValue_default_instance_E": None}))
    result = plugin_compat.check_plugin_compat(macho.MachO(fake_plugin(tmp_path)), tf)
    assert result.missing == ["_TF_NewStatus"]


def test_plugin_compat_command_prints_a_table_and_fails_for_one_bad_version(tmp_path, capsys):
    plugin = fake_plugin(tmp_path)
    good = fake_tensorflow(tmp_path, "2.19.1")
    bad = fake_tensorflow(tmp_path, "2.20.0", pywrap_exports={}, pywrap_name="stub")
    assert macos_binaries.main(["plugin-compat", "--plugin", plugin, "--tf-dir", good]) == 0
    assert macos_binaries.main(["plugin-compat", "--plugin", plugin, "--tf-dir", good,
                    "--tf-dir", os.path.dirname(bad)]) == 1
    out, err = capsys.readouterr()
    assert "| 2.19.1 | yes | 3/3 |" in out and "| 2.20.0 | NO | 1/3 |" in out
    assert "cannot load with TensorFlow 2.20.0" in err


def test_exports_command(tmp_path, capsys):
    lib = tmp_path / "libtensorflow_framework.2.dylib"
    lib.write_bytes(macho_image(exports={"_TF_GetStream": None, "_TF_GetInput": None}))
    assert macos_binaries.main(["exports", "--lib", str(lib), "TF_GetStream", "_TF_GetInput"]) == 0
    assert macos_binaries.main(["exports", "--lib", str(lib), "TF_GetStream", "TF_Nope"]) == 1
    assert "does not export _TF_Nope" in capsys.readouterr().err


def test_tensorflow_symbols_are_told_from_system_ones():
    for s in ["_TF_NewStatus", "_TFE_NewOp", "_SP_Foo", "__ZN10tensorflow7NodeDefD1Ev",
              "__ZNK6google8protobuf7Message11DebugStringEv", "__ZTVN10tensorflow8GraphDefE"]:
        assert plugin_compat.is_tensorflow_symbol(s), s
    for s in ["_objc_msgSend", "__ZNSt3__14coutE", "_dispatch_sync", "_OBJC_CLASS_$_MPSGraph"]:
        assert not plugin_compat.is_tensorflow_symbol(s), s


# ---- stream-protocol -------------------------------------------------------------------

def stream_plugin(tmp_path, methods=STREAM_METHODS, protocol="TF_MetalStream", relative=True):
    path = tmp_path / "libmetal_plugin.dylib"
    path.write_bytes(macho_image(objc=objc_data("MetalStreamWrapper", protocol, methods, relative,
                                          protocol_methods=[m for m in methods if m[0] != "initWithMetalStream:"])))
    return str(path)


@pytest.mark.parametrize("relative", [True, False])
def test_reads_class_methods_and_protocols(tmp_path, relative):
    classes = stream_protocol.objc_classes(macho.MachO(stream_plugin(tmp_path, relative=relative)))
    assert list(classes) == ["MetalStreamWrapper"]
    assert classes["MetalStreamWrapper"]["methods"] == STREAM_METHODS
    assert [s for s, _ in classes["MetalStreamWrapper"]["protocols"]["TF_MetalStream"]] == [
        "queue", "currentCommandBuffer", "commit", "commitAndWait"]


def test_declared_selectors_of_our_header():
    with open(HEADER, encoding="utf-8") as f:
        assert stream_protocol.declared_selectors(f.read(), "TF_MetalStream") == [
            ("currentCommandBuffer", False), ("queue", False), ("commit", True), ("commitAndWait", True)]


def test_declared_selectors_of_properties_and_multipart_methods():
    text = """@protocol P;  // a forward declaration is not the body
    @protocol P <NSObject>
    - (void)encode:(int)a with:(int)b;  // two-part selector
    + (id)shared;                        /* class method: not the stream's */
    @optional
    @property (nonatomic, readonly) int depth;
    @property (nonatomic, getter=isOn) BOOL on;
    @property id<MTLDevice> device;
    @end"""
    assert stream_protocol.declared_selectors(text, "P") == [
        ("encode:with:", True), ("depth", False), ("isOn", False), ("setOn:", True),
        ("device", False), ("setDevice:", True)]
    with pytest.raises(ValueError, match="no @protocol Q"):
        stream_protocol.declared_selectors(text, "Q")


def test_stream_protocol_passes_when_every_method_is_implemented(tmp_path):
    ok, lines = stream_protocol.check_stream_protocol(stream_plugin(tmp_path), HEADER)
    assert ok, lines


def test_stream_protocol_fails_on_a_header_with_an_extra_method(tmp_path, capsys):
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    header = tmp_path / "tf_metal_stream.h"
    header.write_text(text.replace("- (void)commitAndWait;", "- (void)commitAndWait;\n- (void)flushAll:(BOOL)x;"))
    assert macos_binaries.main(["stream-protocol", "--plugin", stream_plugin(tmp_path), "--header", str(header)]) == 1
    out, err = capsys.readouterr()
    assert "MISSING from MetalStreamWrapper: flushAll:" in out
    assert "does not implement TF_MetalStream" in err


def test_stream_protocol_fails_on_a_missing_method_or_wrong_return(tmp_path):
    ok, lines = stream_protocol.check_stream_protocol(stream_plugin(tmp_path, STREAM_METHODS[:-1]), HEADER)
    assert not ok and any("MISSING from MetalStreamWrapper: commitAndWait" in line for line in lines)
    methods = [(s, "@16@0:8" if s == "commit" else t) for s, t in STREAM_METHODS]
    (tmp_path / "b").mkdir()
    ok, lines = stream_protocol.check_stream_protocol(stream_plugin(tmp_path / "b", methods), HEADER)
    assert not ok and any("WRONG return type" in line and "commit" in line for line in lines)


def test_stream_protocol_fails_without_an_adopting_class(tmp_path):
    ok, lines = stream_protocol.check_stream_protocol(stream_plugin(tmp_path, protocol="SomethingElse"), HEADER)
    assert not ok and "no class adopts TF_MetalStream" in lines[0]


# ---- the real binaries, when metal-check has unpacked them ----------------------------

REAL_TF = sorted(glob.glob(os.path.join(ROOT, "build", "macos", "tf-*")))
REAL_PLUGINS = [p for d in REAL_TF for p in glob.glob(os.path.join(d, "tensorflow-plugins", "libmetal_plugin.dylib"))]
needs_real = pytest.mark.skipif(not REAL_PLUGINS, reason="no unpacked tensorflow-metal wheel under build/macos "
                                                          "(make metal-check unpacks the pinned one)")


@needs_real
def test_real_plugin_implements_our_protocol_and_not_an_extra_method(tmp_path):
    ok, lines = stream_protocol.check_stream_protocol(REAL_PLUGINS[-1], HEADER)
    assert ok, lines
    with open(HEADER, encoding="utf-8") as f:
        extended = f.read().replace("- (void)commitAndWait;", "- (void)commitAndWait;\n- (void)flushEverything;")
    header = tmp_path / "tf_metal_stream.h"
    header.write_text(extended)
    ok, lines = stream_protocol.check_stream_protocol(REAL_PLUGINS[-1], str(header))
    assert not ok and any("MISSING from MetalStreamWrapper: flushEverything" in line for line in lines)


@needs_real
def test_real_plugin_loads_with_the_pinned_tensorflow():
    plugin = REAL_PLUGINS[-1]
    tf_dir = os.path.join(os.path.dirname(os.path.dirname(plugin)), "tensorflow")
    if not os.path.exists(os.path.join(tf_dir, "python", "_pywrap_tensorflow_internal.so")):
        pytest.skip("the TensorFlow wheel beside the plugin is not unpacked")
    result = plugin_compat.check_plugin_compat(macho.MachO(plugin), TensorFlow(tf_dir))
    assert result.loads, result.problems
    assert result.bound > 100  # 27 two-level and ~119 flat TensorFlow binds in tensorflow-metal 1.2.0


# ---- the macOS wheel's checks: the SDK's text stubs ------------------------------------------

TBD = """--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, arm64-macos ]
install-name:    '/usr/lib/libSystem.B.dylib'
reexported-libraries:
  - targets:         [ x86_64-macos, arm64-macos ]
    libraries:       [ '/usr/lib/system/libsystem_c.dylib' ]
exports:
  - targets:         [ x86_64-macos ]
    symbols:         [ _x86_only ]
  - targets:         [ arm64-macos, x86_64-macos ]
    symbols:         [ _both, 
                       _second_line ]
    objc-classes:    [ NSThing ]
undefineds:
  - targets:         [ arm64-macos ]
    symbols:         [ _imported ]
--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, arm64-macos ]
install-name:    '/usr/lib/system/libsystem_c.dylib'
exports:
  - targets:         [ arm64-macos ]
    symbols:         [ _memcpy ]
...
"""


def test_text_stubs_exports_for_arm64_with_reexports(tmp_path):
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / "libSystem.B.tbd").write_text(TBD)
    stubs = TextStubs(str(tmp_path))
    lib = "/usr/lib/libSystem.B.dylib"
    for symbol in ("_both", "_second_line", "_OBJC_CLASS_$_NSThing", "_OBJC_METACLASS_$_NSThing", "_memcpy"):
        assert stubs.exports(lib, symbol), symbol
    for symbol in ("_x86_only", "_imported", "_nothing"):
        assert not stubs.exports(lib, symbol), symbol
    assert stubs.library("/usr/lib/libnope.dylib") is None

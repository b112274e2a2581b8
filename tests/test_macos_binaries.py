"""tools/macos_binaries.py: the checks `make metal-check` runs on the real
tensorflow-metal and TensorFlow macOS binaries.

The parsers are tested on inputs built here (a minimal Mach-O with Objective-C
class metadata, llvm-objdump text); when a metal-check run has unpacked the
pinned wheels under build/macos, the checks also run on the real binaries.
Nothing here downloads.
"""
import glob
import os
import struct
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import macos_binaries as mb  # noqa: E402

HEADER = os.path.join(ROOT, "kernels", "metal", "tf_metal_stream.h")


# ---- a minimal Mach-O: one __DATA segment holding a class adopting a protocol -------------

def _macho(class_name, protocol, methods, relative=True):
    """A 64-bit Mach-O whose __objc_classlist holds one class with `methods`."""
    base = 0x1000
    blob = bytearray(0x800)
    strings = {}
    cursor = [0x600]

    def cstr(s):
        if s not in strings:
            at = cursor[0]
            blob[at:at + len(s) + 1] = s.encode() + b"\0"
            strings[s] = base + at
            cursor[0] += len(s) + 1
        return strings[s]

    def put_q(at, value):
        struct.pack_into("<Q", blob, at, value)

    classlist, cls, ro, mlist, protolist, proto, selrefs = 0x100, 0x120, 0x150, 0x200, 0x300, 0x320, 0x400
    put_q(classlist, base + cls)
    put_q(cls + 32, base + ro)                       # class_t.data
    put_q(ro + 24, cstr(class_name))                 # class_ro_t.name
    put_q(ro + 32, base + mlist)                     # baseMethods
    put_q(ro + 40, base + protolist)                 # baseProtocols
    put_q(protolist, 1)
    put_q(protolist + 8, base + proto)
    put_q(proto + 8, cstr(protocol))                 # protocol_t.name
    if relative:
        struct.pack_into("<II", blob, mlist, mb.RELATIVE_METHODS | 12, len(methods))
        for i, name in enumerate(methods):
            put_q(selrefs + 8 * i, cstr(name))
            field = mlist + 8 + 12 * i
            struct.pack_into("<i", blob, field, (selrefs + 8 * i) - field)
    else:
        struct.pack_into("<II", blob, mlist, 24, len(methods))
        for i, name in enumerate(methods):
            put_q(mlist + 8 + 24 * i, cstr(name))

    header = bytearray(32)
    struct.pack_into("<IiiIIIII", header, 0, mb.MH_MAGIC_64, 0x0100000C, 0, 6, 1, 72 + 80, 0, 0)
    seg = bytearray(72 + 80)
    struct.pack_into("<II16sQQQQiiII", seg, 0, mb.LC_SEGMENT_64, len(seg), b"__DATA", base, len(blob), 0x1000,
                     len(blob), 3, 3, 1, 0)
    struct.pack_into("<16s16sQQIIIIIIII", seg, 72, b"__objc_classlist", b"__DATA", base + classlist, 8,
                     0x1000 + classlist, 3, 0, 0, 0, 0, 0, 0)
    data = bytearray(0x1000)
    data[:len(header)] = header
    data[len(header):len(header) + len(seg)] = seg
    return bytes(data + blob)


@pytest.mark.parametrize("relative", [True, False])
def test_reads_class_methods_and_protocols(relative):
    macho = mb.MachO(_macho("MetalStreamWrapper", "TF_MetalStream", ["queue", "commit", "initWith:x:"], relative))
    assert mb.objc_classes(macho) == {
        "MetalStreamWrapper": {"methods": ["queue", "commit", "initWith:x:"], "protocols": ["TF_MetalStream"]}}


def _check(tmp_path, methods, protocol="TF_MetalStream", header=None):
    plugin = tmp_path / "libplugin.dylib"
    plugin.write_bytes(_macho("MetalStreamWrapper", protocol, methods))
    return mb.check_stream_protocol(str(plugin), header or HEADER)


def test_stream_protocol_passes_when_every_method_is_implemented(tmp_path):
    ok, lines = _check(tmp_path, ["queue", "currentCommandBuffer", "commit", "commitAndWait", "dealloc"])
    assert ok, lines


def test_stream_protocol_names_a_missing_method(tmp_path):
    ok, lines = _check(tmp_path, ["queue", "currentCommandBuffer", "commit"])
    assert not ok
    assert any("missing: commitAndWait" in line for line in lines)


def test_stream_protocol_fails_without_an_adopting_class(tmp_path):
    ok, lines = _check(tmp_path, ["queue"], protocol="SomethingElse")
    assert not ok and "no class adopts TF_MetalStream" in lines[0]


def test_declared_selectors_from_the_header():
    with open(HEADER, encoding="utf-8") as f:
        assert mb.declared_selectors(f.read(), "TF_MetalStream") == [
            "currentCommandBuffer", "queue", "commit", "commitAndWait"]
    text = """@protocol P
    - (void)encode:(int)a with:(int)b;  // two-part selector
    @property (nonatomic, readonly) int depth;
    @property (nonatomic, getter=isOn) BOOL on;
    @end"""
    assert mb.declared_selectors(text, "P") == ["encode:with:", "depth", "isOn", "setOn:"]


def test_not_a_macho_is_a_clear_error(tmp_path):
    with pytest.raises(mb.MachOError, match="not a 64-bit Mach-O"):
        mb.MachO(b"\x7fELF" + bytes(60))


# ---- llvm-objdump text ------------------------------------------------------------------

BINDS = """lib.dylib:
Bind table:
segment  section            address    type       addend dylib            symbol
__DATA_CONST __got              0x00320168 pointer         0 @rpath/_pywrap_tensorflow_internal.so __ZN10tensorflow28_AttrValue_default_instance_E
__DATA   __objc_classrefs   0x00331420 pointer         0 MetalPerformanceShaders _OBJC_CLASS_$_MPSNDArrayIdentity (weak_import)
Lazy bind table:
segment  section            address     dylib            symbol
__DATA   __la_symbol_ptr    0x00330080 @rpath/_pywrap_tensorflow_internal.so _TF_DeleteStatus
__DATA   __la_symbol_ptr    0x00330468 flat-namespace   _TF_NewStatus
"""

TRIE = """lib.so:
[re-export] _TF_DeleteStatus (from libtensorflow_cc)
0x00012345  _PyInit__pywrap_tensorflow_internal
"""


def test_parse_binds_and_exports():
    assert mb.parse_binds(BINDS) == [
        ("@rpath/_pywrap_tensorflow_internal.so", "__ZN10tensorflow28_AttrValue_default_instance_E"),
        ("MetalPerformanceShaders", "_OBJC_CLASS_$_MPSNDArrayIdentity"),
        ("@rpath/_pywrap_tensorflow_internal.so", "_TF_DeleteStatus"),
        ("flat-namespace", "_TF_NewStatus"),
    ]
    assert mb.parse_exports(TRIE) == {"_TF_DeleteStatus", "_PyInit__pywrap_tensorflow_internal"}


# ---- the real binaries, when metal-check has unpacked them ----------------------------

REAL_PLUGINS = sorted(glob.glob(os.path.join(ROOT, "build", "macos", "tf-*", "tensorflow-plugins",
                                             "libmetal_plugin.dylib")))


@pytest.mark.skipif(not REAL_PLUGINS, reason="no unpacked tensorflow-metal wheel (make metal-check unpacks one)")
def test_real_plugin_implements_our_protocol_and_not_an_extra_method(tmp_path):
    ok, lines = mb.check_stream_protocol(REAL_PLUGINS[-1], HEADER)
    assert ok, lines
    with open(HEADER, encoding="utf-8") as f:
        extended = f.read().replace("- (void)commitAndWait;", "- (void)commitAndWait;\n- (void)flushEverything;")
    header = tmp_path / "tf_metal_stream.h"
    header.write_text(extended)
    ok, lines = mb.check_stream_protocol(REAL_PLUGINS[-1], str(header))
    assert not ok and any("missing: flushEverything" in line for line in lines)

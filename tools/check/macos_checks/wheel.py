"""wheel: the macOS wheel `make wheels` builds: tag, thin arm64 Mach-O files,
the minimum macOS of LC_BUILD_VERSION, install names, `@rpath/` dependencies
found through the libraries' rpaths from site-packages/metal_ops, every bind
exported by TensorFlow's and OpenBLAS's dylibs or the SDK's text stubs, and
TF_InitGraph exported by the plugin only. The wheel holds one op library and
one Grappler plugin per TensorFlow stack (build info "tensorflow_builds"); each
pair is checked against the macOS wheel of its own TensorFlow.
"""
import json
import os
import re
import tempfile
import zipfile

from .macho import CPU_TYPE_ARM64, MH_TWOLEVEL, ORDINAL_FLAT, PLATFORM_MACOS, MachO
from .tensorflow_wheel import TensorFlow
from .text_stubs import TextStubs



def read_wheel_tags(names, read):
    wheel_file = next((n for n in names if n.endswith(".dist-info/WHEEL")), None)
    if wheel_file is None:
        return None, []
    text = read(wheel_file).decode()
    return "Root-Is-Purelib: false" not in text, re.findall(r"^Tag: (\S+)", text, re.M)


def metadata_problems(z, names, tag, sites):
    """The wheel's WHEEL tags and its _build_info.json: platform, the metal
    backend, and one build per TensorFlow of `sites` ({TensorFlow version:
    site folder}). Returns (problems, builds)."""
    problems = []
    purelib, tags = read_wheel_tags(names, z.read)
    if purelib is not False or tags != [tag]:
        problems.append(f"WHEEL: tags {tags}, platlib {purelib is False} (want [{tag}], platlib)")
    info = json.loads(z.read("metal_ops/_build_info.json"))
    builds = info.get("tensorflow_builds") or []
    if info.get("platform") != "Darwin-arm64" or not builds:
        problems.append(f"_build_info.json: {info} (want platform Darwin-arm64 with tensorflow_builds)")
    for build in builds:
        if "metal" not in build.get("backends", []):
            problems.append(f"_build_info.json: the build for TensorFlow {build.get('tensorflow_version')} has no "
                            "metal backend")
    built = sorted(b.get("tensorflow_version") for b in builds)
    if built != sorted(sites):
        problems.append(f"built against TensorFlow {', '.join(map(str, built))}, checked against "
                        f"{', '.join(sorted(sites))}")
    return problems, builds


def header_problems(image, where, macos_min):
    """Architecture, minimum macOS, install name and namespace of one library."""
    problems = []
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
    return problems


def locate_dependencies(image, where, loader_dir, stubs):
    """({@rpath/ load command: the file its rpaths find from loader_dir}, problems):
    every load command is found through an rpath or is a library of the SDK."""
    found, problems = {}, []
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
    return found, problems


def resolve_binds(image, where, found, tf, stubs):
    """(binds resolved, problems): each two-level bind is exported by the library
    it names (TensorFlow's, OpenBLAS's or the SDK's); no flat-namespace lookup."""
    problems, missing, resolved = [], [], 0
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
    return resolved, problems


def library_problems(image, where, loader_dir, tf, stubs, macos_min):
    """(problems, note) of one library of the wheel, installed in loader_dir."""
    problems = header_problems(image, where, macos_min)
    found, located = locate_dependencies(image, where, loader_dir, stubs)
    resolved, unresolved = resolve_binds(image, where, found, tf, stubs)
    problems += located + unresolved
    exports_init = image.exports().lookup("_TF_InitGraph") is not None
    if exports_init != where.startswith("_metal_ops_grappler."):
        problems.append(f"{where}: exports TF_InitGraph: {exports_init} (only the Grappler plugin must)")
    local = [r for r in image.rpaths if not r.startswith("@")]
    if local:
        problems.append(f"{where}: rpaths into the build machine (on a user's Mac they name directories "
                        f"anyone may create, searched for TensorFlow's libraries): {local}")
    note = (f"{where}: arm64, macOS {image.build_version[1] if image.build_version else '?'}, "
            f"{resolved} binds resolved ({len(found)} libraries through rpaths "
            f"{', '.join(r for r in image.rpaths if r.startswith('@'))}), install name {image.install_name}")
    return problems, note


def site_version(site):
    """The TensorFlow version of an unpacked macOS wheel folder (site-packages layout)."""
    try:
        from tools.build.tf_flags import wheel_version
    except ImportError:  # run as tools/check/macos_binaries.py
        from tf_flags import wheel_version
    return wheel_version(os.path.join(site, "tensorflow", "include"))


def check_macos_wheel(wheel, sites, sdk, macos_min):
    """Problems (list of strings) and notes of the macOS wheel: tag, arm64-only
    Mach-O files, minimum macOS, each build's binds resolved by its own
    TensorFlow and OpenBLAS (`sites`: their unpacked macOS wheels, side by side
    as in site-packages, one folder per TensorFlow) or the SDK's stubs, the
    rpaths that find them from site-packages/metal_ops, and the Grappler
    plugins' TF_InitGraph."""
    problems, notes = [], []
    tag = f"py3-none-macosx_{macos_min.replace('.', '_')}_arm64"
    if not os.path.basename(wheel).endswith(f"-{tag}.whl"):
        problems.append(f"{os.path.basename(wheel)}: file name tag is not {tag}")
    stubs = TextStubs(sdk)
    by_version = {site_version(site): site for site in sites}
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        names = z.namelist()
        z.extractall(tmp)
        found, builds = metadata_problems(z, names, tag, by_version)
        problems += found
        libs = sorted(n for n in names if n.endswith((".so", ".dylib")))
        want = sorted(f"metal_ops/{b[key]}" for b in builds for key in ("library", "grappler_library") if b.get(key))
        if libs != want or len(want) != 2 * len(builds):
            problems.append(f"compiled files {libs}, want an op library and a Grappler plugin per build: {want}")
        for build in builds:
            site = by_version.get(build.get("tensorflow_version"))
            if site is None:
                continue
            tf = TensorFlow(os.path.join(site, "tensorflow"))
            loader_dir = os.path.join(site, "metal_ops")  # where the wheel installs them
            for key in ("library", "grappler_library"):
                rel = f"metal_ops/{build.get(key)}"
                if rel not in names:
                    continue
                found, note = library_problems(MachO(os.path.join(tmp, rel)), build[key], loader_dir,
                                               tf, stubs, macos_min)
                problems += found
                notes.append(f"TensorFlow {build['tensorflow_version']}: {note}")
    return problems, notes

"""Checks of the Linux wheel `make wheels` builds (run with the wheel-tools venv:
pyelftools, auditwheel).

    python tools/check/wheel_check.py linux --wheel dist/tf_metal_ops-...-py3-none-manylinux_2_27_x86_64.whl \\
        --policy manylinux_2_27_x86_64 [--auditwheel build/wheel-tools/bin/auditwheel]

- the tag: py3-none-<policy> (the libraries use no Python C API, so one wheel
  serves every CPython), platlib;
- the files: one op library per x86-64 level that _build_info.json names, the
  Grappler plugin, the CUDA kernels' library when it names one, and nothing vendored (no TensorFlow or OpenBLAS library, no
  auditwheel `.libs` folder);
- every shared object: x86-64 ELF, no undefined Python C API symbol, libraries
  needed only from TensorFlow, OpenBLAS and the C/C++ runtime, one RUNPATH into
  site-packages (`$ORIGIN/../scipy_openblas32/lib`) and none into this machine,
  the op libraries' ISA level note (if any) not above their level;
- `auditwheel show`: the wheel is consistent with the policy (TensorFlow's own
  wheel's), given TensorFlow's and OpenBLAS's libraries as external.

Exit status 0 when every check passes, 1 otherwise (each failure on stderr).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_lib_check import RUNTIME, TF_LIBS  # noqa: E402  (standard library only)
from check_report import check_main  # noqa: E402  (standard library only)

# Libraries the wheel's objects may need: TensorFlow's, OpenBLAS's (site-packages)
# and the C/C++ runtime every manylinux policy allows (RUNTIME).
EXTERNAL = set(TF_LIBS) | {"libscipy_openblas.so"}
RUNPATH = "$ORIGIN/../scipy_openblas32/lib"
PYTHON_API = re.compile(r"^_?Py[A-Z_]|^_Py")
# GNU_PROPERTY_X86_ISA_1_NEEDED bits (x86-64 psABI: baseline 1, v2 2, v3 4, v4 8)
# a library of each level may carry.
ISA_ALLOWED = {"x86-64-v2": 0b11, "x86-64-v3": 0b111, "x86-64-v4": 0b1111}


def elf_facts(path):
    """NEEDED, RUNPATH/RPATH, undefined dynamic symbols and the x86 ISA-needed bits of one ELF file."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        facts = {"machine": elf["e_machine"], "needed": [], "runpath": [], "undefined": [], "isa_needed": 0}
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        facts["needed"].append(tag.needed)
                    elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                        facts["runpath"] += (tag.runpath if tag.entry.d_tag == "DT_RUNPATH" else tag.rpath).split(":")
            elif section.name == ".dynsym":
                facts["undefined"] = [s.name for s in section.iter_symbols()
                                      if s["st_shndx"] == "SHN_UNDEF" and s.name]
            elif section.name == ".note.gnu.property":
                for note in section.iter_notes():
                    for prop in note["n_desc"] if isinstance(note["n_desc"], list) else []:
                        if prop.get("pr_type") == "GNU_PROPERTY_X86_ISA_1_NEEDED":
                            facts["isa_needed"] |= int.from_bytes(prop["pr_data"], "little") \
                                if isinstance(prop["pr_data"], (bytes, bytearray)) else int(prop["pr_data"])
        return facts


def check_linux(wheel, policy, auditwheel=None):
    problems, notes = [], []
    name = os.path.basename(wheel)
    if not name.endswith(f"-py3-none-{policy}.whl"):
        problems.append(f"{name}: tag is not py3-none-{policy}")
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
            names = z.namelist()
        wheel_meta = [n for n in names if n.endswith(".dist-info/WHEEL")]
        text = open(os.path.join(tmp, wheel_meta[0])).read() if wheel_meta else ""
        if "Root-Is-Purelib: false" not in text or f"Tag: py3-none-{policy}" not in text:
            problems.append(f"WHEEL metadata: {text!r} (want platlib and Tag: py3-none-{policy})")
        vendored = [n for n in names if ".libs/" in n or re.search(r"lib(tensorflow|scipy_openblas)", os.path.basename(n))]
        if vendored:
            problems.append(f"vendored libraries (TensorFlow and OpenBLAS must stay external): {vendored}")
        info_path = os.path.join(tmp, "metal_ops", "_build_info.json")
        if not os.path.exists(info_path):
            return [f"no metal_ops/_build_info.json in {name}"], notes
        info = json.load(open(info_path))
        libs = info.get("isa_libraries") or {}
        if not libs or info.get("library"):
            problems.append(f"_build_info.json must name the per-level libraries only: {info}")
        expected = {f"metal_ops/{lib}": level for level, lib in libs.items()}
        expected["metal_ops/_metal_ops_grappler.so"] = None
        if info.get("cuda_library"):  # the GPU kernels (tools/check/cuda_lib_check.py checks it further)
            expected[f"metal_ops/{info['cuda_library']}"] = None
        shared = sorted(n for n in names if n.endswith(".so") or ".so." in n)
        if sorted(expected) != shared:
            problems.append(f"shared objects {shared}, want {sorted(expected)}")
        for rel in shared:
            facts = elf_facts(os.path.join(tmp, rel))
            if facts["machine"] != "EM_X86_64":
                problems.append(f"{rel}: {facts['machine']}, not x86-64")
            py = [s for s in facts["undefined"] if PYTHON_API.match(s)]
            if py:
                problems.append(f"{rel} uses the Python C API ({py[:5]}): a py3-none tag would be wrong")
            odd = [n for n in facts["needed"] if n not in EXTERNAL | RUNTIME]
            if odd:
                problems.append(f"{rel} needs {odd}: neither TensorFlow, OpenBLAS nor the C/C++ runtime")
            if "libscipy_openblas.so" in facts["needed"] and facts["runpath"] != [RUNPATH]:
                problems.append(f"{rel}: RUNPATH {facts['runpath']}, want only {RUNPATH}")
            if any(p.startswith("/") for p in facts["runpath"]):
                problems.append(f"{rel}: RUNPATH into this machine {facts['runpath']}")
            level = expected.get(rel)
            if facts["isa_needed"] & ~ISA_ALLOWED.get(level or "x86-64-v2", 0):
                problems.append(f"{rel}: ISA-needed note {facts['isa_needed']:#x} is above {level or 'x86-64-v2'}")
            notes.append(f"{rel}: needs {', '.join(facts['needed'])}; runpath {':'.join(facts['runpath']) or '-'}; "
                         f"{len(facts['undefined'])} undefined symbols, none from Python")
    if auditwheel:
        out = subprocess.run([auditwheel, "show", "--disable-isa-ext-check", wheel], capture_output=True, text=True)
        notes.append("auditwheel show:\n  " + "\n  ".join((out.stdout + out.stderr).strip().splitlines()))
        # `show` cannot see that TensorFlow's and OpenBLAS's libraries are the
        # user's (excluded at repair), so it calls the wheel linux_x86_64; what
        # the policy needs is that the symbol versions allow the policy's tag.
        text = " ".join(out.stdout.split())
        if out.returncode != 0 or f'constrains the platform tag to "{policy}"' not in text:
            problems.append(f"auditwheel show: the symbol versions do not allow {policy} (exit {out.returncode})")
    return problems, notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    linux = sub.add_parser("linux")
    linux.add_argument("--wheel", required=True)
    linux.add_argument("--policy", required=True)
    linux.add_argument("--auditwheel")
    return check_main("wheel_check", parser, lambda args: check_linux(args.wheel, args.policy, args.auditwheel),
                      "wheel", argv)


if __name__ == "__main__":
    sys.exit(main())

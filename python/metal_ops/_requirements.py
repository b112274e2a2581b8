"""Which TensorFlow a build of metal_ops needs, and how a user installs it.

Standard library only: setup.py loads this file by path (the build environment
need not import metal_ops), and the loader uses it for its error messages.

`tensorflow`, `tensorflow-cpu`, `tensorflow-macos` (and the older
`tensorflow-intel`, `tensorflow-gpu`) are one library under different pip
names: a package that requires one of them makes pip install a second copy
beside another. So the wheel declares no TensorFlow requirement; extras name
the usual choice per platform (`pip install tf-metal-ops[cpu]`), and the loader
checks the running version against the one the library was built for.
"""

# pip names of TensorFlow builds, most specific first.
TF_DISTRIBUTIONS = (
    "tensorflow-cpu",
    "tensorflow-macos",
    "tensorflow-intel",
    "tensorflow-gpu",
    "tensorflow",
)

LINUX = "sys_platform == 'linux'"
DARWIN = "sys_platform == 'darwin'"

# The two TensorFlow stacks of an Apple-silicon Mac, each with an op library in
# the macOS wheel and a requirements file for a source build (`make
# MACOS_STACK=<name>`). The versions are requirements-macos*.txt's pins; the
# Python ranges are those of the stack's macOS arm64 wheels on PyPI.
#   cpu:   TensorFlow 2.21 alone (CPython 3.10-3.13). No tensorflow-metal exists
#          for it, so TensorFlow has no GPU device; the library's own Metal
#          path runs the ops on the GPU where the build has it.
#   metal: TensorFlow 2.19.1 + tensorflow-metal 1.2.0 (CPython 3.9-3.12):
#          TensorFlow's "GPU" device, the library's kernels on its TF_MetalStream.
TENSORFLOW_METAL_NEWEST_TF = (2, 19)  # the newest TensorFlow tensorflow-metal 1.2.0 loads with
MACOS_STACKS = {
    "cpu": {"requirements": "requirements-macos.txt", "python": ((3, 10), (3, 13)), "min_macos": (12, 0)},
    "metal": {"requirements": "requirements-macos-metal.txt", "python": ((3, 9), (3, 12)), "min_macos": (12, 1)},
}


def minor(version):
    """'2.21.0' -> (2, 21)."""
    major, minor_, *_ = (int(p) for p in version.split(".")[:2] + ["0"])
    return major, minor_


def minor_range(version):
    """'2.21.0' -> '>=2.21,<2.22': the releases a library built against version loads in."""
    major, minor_ = minor(version)
    return f">={major}.{minor_},<{major}.{minor_ + 1}"


def installed_tensorflow_distribution():
    """(pip name, version) of the TensorFlow installed in this environment, or None."""
    from importlib import metadata

    for dist in TF_DISTRIBUTIONS:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def show_range(versions):
    """((3, 10), (3, 13)) -> '3.10-3.13'."""
    return "-".join("%d.%d" % v for v in versions)


def python_marker(versions):
    """((3, 9), (3, 12)) -> "python_version >= '3.9' and python_version < '3.13'"."""
    (lo_major, lo_minor), (hi_major, hi_minor) = versions
    return f"python_version >= '{lo_major}.{lo_minor}' and python_version < '{hi_major}.{hi_minor + 1}'"


def macos_extras(builds):
    """The extras of the macOS wheel from its builds (build info
    "tensorflow_builds": each a dict with tensorflow_version and, for the
    tensorflow-metal stack, tensorflow_metal). `[cpu]`: the cpu stack's
    TensorFlow on the Pythons it has wheels for, else (Python 3.9) the metal
    stack's TensorFlow without the plugin; `[metal]`: the metal stack's
    TensorFlow and tensorflow-metal, on the Pythons tensorflow-metal has wheels
    for (on Python 3.13 `[metal]` installs no TensorFlow: the loader then says
    why and what to install)."""
    cpu = next((b for b in builds if not b.get("tensorflow_metal")), None)
    metal = next((b for b in builds if b.get("tensorflow_metal")), None)
    result = {}
    cpu_reqs = []
    if cpu is not None:
        cpu_python = MACOS_STACKS["cpu"]["python"]
        cpu_reqs.append(f"tensorflow{minor_range(cpu['tensorflow_version'])}; {DARWIN} and "
                        f"python_version >= '%d.%d'" % cpu_python[0])
    if metal is not None:
        when = f"{DARWIN} and {python_marker(MACOS_STACKS['metal']['python'])}"
        tf = f"tensorflow{minor_range(metal['tensorflow_version'])}"
        if cpu is not None:  # the Pythons below the cpu stack's
            cpu_reqs.append(f"{tf}; {DARWIN} and python_version < '%d.%d'" % MACOS_STACKS["cpu"]["python"][0])
        result["metal"] = [f"{tf}; {when}", f"tensorflow-metal=={metal['tensorflow_metal']}; {when}"]
    if cpu_reqs:
        result["cpu"] = cpu_reqs
    return result


def extras(tf_version, platform, metal_version=None):
    """The optional dependencies of a build for `platform` ("Linux-x86_64",
    "Darwin-arm64") against TensorFlow `tf_version`: the usual TensorFlow
    distribution per platform, pinned to that minor version (a macOS wheel
    with several builds: macos_extras)."""
    tf = minor_range(tf_version)
    if platform.startswith("Darwin"):
        result = {"cpu": [f"tensorflow{tf}; {DARWIN}"]}
        # tensorflow-metal 1.2.0 loads with TensorFlow 2.19 and older only.
        if metal_version and minor(tf_version) <= TENSORFLOW_METAL_NEWEST_TF:
            result["metal"] = [f"tensorflow{tf}; {DARWIN}", f"tensorflow-metal=={metal_version}; {DARWIN}"]
        return result
    return {
        "cpu": [f"tensorflow-cpu{tf}; {LINUX}"],
        # TensorFlow's CUDA build on Linux, with the NVIDIA libraries from pip.
        "and-cuda": [f"tensorflow[and-cuda]{tf}; {LINUX}"],
    }


def install_hint(tf_version, platform):
    """What to run to get a TensorFlow this build loads in, e.g.
    `pip install 'tensorflow-cpu>=2.21,<2.22'` (keeping the user's distribution)."""
    installed = installed_tensorflow_distribution()
    tf = minor_range(tf_version)
    if installed is not None:
        dist = "tensorflow" if installed[0] in ("tensorflow-macos", "tensorflow-intel", "tensorflow-gpu") \
            else installed[0]
    else:
        dist = "tensorflow" if platform.startswith("Darwin") else "tensorflow-cpu"
    return f"pip install '{dist}{tf}'"


def describe_builds(builds):
    """'TensorFlow 2.21 (Python 3.10-3.13), TensorFlow 2.19 + tensorflow-metal 1.2.0
    (Python 3.9-3.12)': the builds of a macOS wheel, for messages."""
    parts = []
    for b in builds:
        stack = MACOS_STACKS["metal" if b.get("tensorflow_metal") else "cpu"]
        text = "TensorFlow %d.%d" % minor(b["tensorflow_version"])
        if b.get("tensorflow_metal"):
            text += f" + tensorflow-metal {b['tensorflow_metal']}"
        parts.append(f"{text} (Python {show_range(stack['python'])}, `pip install 'tf-metal-ops[%s]'`)"
                     % ("metal" if b.get("tensorflow_metal") else "cpu"))
    return ", ".join(parts)

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


def extras(tf_version, platform, metal_version=None):
    """The optional dependencies of a build for `platform` ("Linux-x86_64",
    "Darwin-arm64") against TensorFlow `tf_version`: the usual TensorFlow
    distribution per platform, pinned to that minor version."""
    tf = minor_range(tf_version)
    if platform.startswith("Darwin"):
        metal = [f"tensorflow{tf}; {DARWIN}"]
        if metal_version:
            metal.append(f"tensorflow-metal=={metal_version}; {DARWIN}")
        return {"cpu": [f"tensorflow{tf}; {DARWIN}"], "metal": metal}
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

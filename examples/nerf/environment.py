"""The process's environment for TensorFlow and XLA, set by train.main() once the flags are parsed
(never at import): TensorFlow's logging and GPU threads, the sample's XLA flags where it compiles
with XLA (--jit), and TensorFlow's persistent XLA cache (--xla-cache)."""
import os


def set_process_environment(environ=os.environ):
    """TensorFlow's settings that it reads when it starts, each unless the caller set it:
    - its C++ logging at warnings and above;
    - each GPU launching its kernels from two threads of its own rather than from TensorFlow's
      inter-op pool, which the step's host work shares: the step on a GPU is bound by the host's
      kernel launches (README.md, "Measured on two H100s"). TensorFlow reads it when it creates
      its GPU devices, at the process's first op."""
    environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    environ.setdefault("TF_GPU_THREAD_MODE", "gpu_private")


def set_xla_flags(environ=os.environ):
    """XLA_FLAGS with the sample's choices added (xla_flags_for_the_sample); XLA reads them at its
    first compilation, so this runs before one."""
    flags = xla_flags_for_the_sample(environ.get("XLA_FLAGS", ""), tensorflow_version(), nvidia_gpu_visible(environ))
    if flags:
        environ["XLA_FLAGS"] = flags


def xla_flags_for_the_sample(flags, tensorflow_version, nvidia_gpu):
    """XLA_FLAGS with the sample's choices for XLA, each unless `flags` names it:
    - XLA's fusion-emitter autotuner off (TensorFlow 2.21 only). For each fusion XLA's GPU
      compiler (TensorFlow 2.21's) times its native emitter against Triton's: a large part of the
      --jit step's first call, for no faster step (docs/NERF.md, "The compiled step"). XLA refuses a flag it does
      not know, and this one is experimental (older XLAs lack it, a later one may drop it).
    - LLVM's optimisation level 1 for XLA's own kernels, where an NVIDIA GPU is visible
      (`nvidia_gpu`): on the GPU the --jit step's first call compiles sooner and its steady step is
      no slower, while on the CPU XLA's kernels of the same step run slower (docs/NERF.md, "The compiled step")."""
    added = []
    autotuner = "--xla_gpu_experimental_enable_fusion_autotuner"
    if autotuner not in flags and tensorflow_version == (2, 21):
        added.append(f"{autotuner}=false")
    level = "--xla_backend_optimization_level"
    if level not in flags and nvidia_gpu:
        added.append(f"{level}=1")
    return " ".join(filter(None, [flags.strip(), *added])) if added else flags


def nvidia_gpu_visible(environ=os.environ, devices="/dev/nvidia[0-9]*"):
    """Whether CUDA can see an NVIDIA GPU, read without TensorFlow (the XLA flags are set before it
    starts): a GPU's device node exists and CUDA_VISIBLE_DEVICES does not hide them all."""
    import glob

    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return bool(glob.glob(devices))


def tensorflow_version():
    """(major, minor) of the installed TensorFlow, read without importing it; None if none is found."""
    from importlib import metadata
    for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return tuple(int(part) for part in metadata.version(dist).split(".")[:2])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return None


def use_xla_cache(directory):
    """TensorFlow's persistent XLA compilation cache in `directory`: compiled programs are written
    there and read back by later processes. TensorFlow reads TF_XLA_FLAGS at its first XLA
    compilation, so this takes effect only before one; a directory the flags already name stays."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "tf_xla_persistent_cache_directory" not in flags:
        os.makedirs(directory, exist_ok=True)
        # quoted: TF_XLA_FLAGS splits at white space outside quotes
        cache = f'--tf_xla_persistent_cache_directory="{os.path.abspath(directory)}"'
        os.environ["TF_XLA_FLAGS"] = f"{flags} {cache}".strip()

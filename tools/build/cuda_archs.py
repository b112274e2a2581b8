"""The GPU architectures of the wheel's CUDA library (`make cuda-lib`).

    cuda_archs.py gencode --nvcc nvcc sm_60 sm_70 sm_80 sm_89 compute_90   # nvcc -gencode flags
    cuda_archs.py describe --nvcc nvcc sm_60 ...                           # JSON, for _build_info.json

The names are TensorFlow's (`tf.sysconfig.get_build_info()
["cuda_compute_capabilities"]` of its CUDA wheel): `sm_XY` is machine code
(SASS) for compute capability X.Y, `compute_XY` is SASS for X.Y plus its PTX,
which the driver compiles for newer GPUs. Entries this nvcc cannot compile
(CUDA 13's nvcc dropped everything before sm_75), and those below MIN_SM,
are left out and named on stderr and in `describe`'s "dropped".
"""
import argparse
import json
import re
import subprocess
import sys


# The oldest GPUs the kernels serve: the fused MLP's TF32/fp16 tensor-core
# kernels use mma.sync m16n8k8 TF32 and cp.async, which need compute
# capability 8.0 (A100). P100 (6.0) and V100 (7.0) get no CUDA library: the
# loader names the reason there and the ops run on the CPU.
MIN_SM = 80
MIN_SM_REASON = "the kernels need compute capability 8.0 (tensor-core mma.sync TF32, cp.async)"


def parse(capabilities):
    """[(kind, number)] for names like sm_80 / compute_90; ValueError otherwise."""
    out = []
    for name in capabilities:
        m = re.fullmatch(r"(sm|compute)_(\d+[a-z]?)", name)
        if not m:
            raise ValueError(f"not a CUDA capability name: {name!r} (sm_XY or compute_XY)")
        out.append((m.group(1), m.group(2)))
    return out


def nvcc_sass(nvcc):
    """The sm_XY numbers this nvcc compiles machine code for (`nvcc --list-gpu-code`)."""
    text = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"\bsm_(\d+[a-z]?)\b", text)}


def number_value(number):
    return int(re.match(r"\d+", number).group(0))


def plan(capabilities, supported):
    """{"requested": [names], "sass": [sm_..], "ptx": [compute_..], "dropped": [names]}, in the order given."""
    sass, ptx, dropped = [], [], []
    for kind, number in parse(capabilities):
        if number not in supported or number_value(number) < MIN_SM:
            dropped.append(f"{kind}_{number}")
            continue
        if f"sm_{number}" not in sass:
            sass.append(f"sm_{number}")
        if kind == "compute" and f"compute_{number}" not in ptx:
            ptx.append(f"compute_{number}")
    return {"requested": list(capabilities), "sass": sass, "ptx": ptx, "dropped": dropped}


def gencode(p):
    flags = [f"-gencode arch=compute_{s[3:]},code={s}" for s in p["sass"]]
    flags += [f"-gencode arch={c},code={c}" for c in p["ptx"]]
    return " ".join(flags)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["gencode", "describe"])
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("capabilities", nargs="+")
    args = parser.parse_args(argv)
    p = plan(args.capabilities, nvcc_sass(args.nvcc))
    if not p["sass"]:
        print(f"cuda_archs: {args.nvcc} compiles none of {' '.join(args.capabilities)}", file=sys.stderr)
        return 1
    if args.command == "gencode":
        low = [d for d in p["dropped"] if number_value(d.split("_")[1]) < MIN_SM]
        if low:
            print(f"cuda_archs: {' '.join(low)} left out: {MIN_SM_REASON}", file=sys.stderr)
        if set(p["dropped"]) - set(low):
            print(f"cuda_archs: {' '.join(sorted(set(p['dropped']) - set(low)))} left out: {args.nvcc} cannot "
                  f"compile them (`{args.nvcc} --list-gpu-code`)", file=sys.stderr)
        print(gencode(p))
    else:
        print(json.dumps(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())

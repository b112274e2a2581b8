"""`python -m metal_ops`: prints how the op library was built (JSON on stdout)
and, on stderr, which CPU instruction-set level runs."""
import json
import sys

from metal_ops import build_info

if __name__ == "__main__":
    info = build_info()
    print(json.dumps(info, indent=2))
    isa = info.get("isa")
    if isa:
        if isa.get("running") is None:
            line = isa.get("error", "no op library can be loaded")
        else:
            how = (f"forced by METAL_OPS_ISA={isa['forced_by_env']}" if isa.get("forced_by_env")
                   else "the -march=native build" if isa["running"] == "native"
                   else "the highest level this CPU runs")
            line = f"CPU kernels: {isa['running']} ({how}; built: {', '.join(isa['built'])})"
        print(f"metal_ops: {line}", file=sys.stderr)

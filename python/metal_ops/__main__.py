"""`python -m metal_ops`: prints how the op library was built."""
import json

from metal_ops import build_info

if __name__ == "__main__":
    print(json.dumps(build_info(), indent=2))

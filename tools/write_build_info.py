"""Records what the op library was built against (read by metal_ops' loader)."""
import argparse
import json
import os
import platform

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--backends", required=True)
    parser.add_argument("--lib", required=True)
    args = parser.parse_args()
    info = {
        "tensorflow_version": tf.__version__,
        "backends": args.backends.split(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "library": os.path.basename(args.lib),
    }
    with open(args.out, "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()

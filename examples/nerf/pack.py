"""A compact copy of a scene folder, for moving it where size is limited:

    python -m examples.nerf.pack SRC DST

NeRF-synthetic folders: the transforms_*.json files as they are, and each
image they list as lossless WebP with the colour of fully transparent pixels
dropped. The loader premultiplies colour by alpha, so what it reads from the
copy is the same, which is checked image by image (mic's train and test
splits: 67 MB of PNGs, about 40 MB of WebP; the depth and normal images
beside its test views, listed nowhere, are left out). `--splits train test`
copies those splits only. instant-ngp folders: transforms.json as it is and the
images it lists that exist, copied as they are (JPEG is already compact).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

from examples.nerf import datasets


def _listed(root, json_name):
    with open(os.path.join(root, json_name), encoding="utf-8") as f:
        return [fr["file_path"] for fr in json.load(f)["frames"]]


def pack(src, dst, log=print, splits=None):
    """Writes the compact copy of the scene folder `src` to `dst`; returns (files, bytes written).
    `splits`: the NeRF-synthetic splits to copy (default all)."""
    fmt, target = datasets.detect_format(src)
    root = target if fmt == "blender" else os.path.dirname(os.path.abspath(target))
    os.makedirs(dst, exist_ok=True)
    files, size = 0, 0
    if fmt == "blender":
        import imageio.v2 as imageio
        from PIL import Image

        for json_name in sorted(n for n in os.listdir(root) if n.startswith("transforms_") and n.endswith(".json")
                                and (splits is None or n[len("transforms_"):-len(".json")] in splits)):
            shutil.copyfile(os.path.join(root, json_name), os.path.join(dst, json_name))
            for file_path in _listed(root, json_name):
                path = datasets._image_path(root, file_path, os.path.join(root, json_name))
                out = os.path.join(dst, os.path.splitext(os.path.relpath(path, root))[0] + ".webp")
                os.makedirs(os.path.dirname(out), exist_ok=True)
                raw = np.asarray(imageio.imread(path))
                if raw.dtype == np.uint8 and raw.ndim == 3 and raw.shape[-1] == 4:
                    raw = np.where(raw[..., 3:] == 0, 0, raw).astype(np.uint8)  # premultiplied away anyway
                Image.fromarray(raw).save(out, format="WEBP", lossless=True, quality=100, method=4)
                if not np.array_equal(datasets.read_image(out), datasets.read_image(path)):
                    raise datasets.DatasetError(f"{out}: the WebP copy does not read back as {path}")
                files, size = files + 1, size + os.path.getsize(out)
    elif fmt == "instant-ngp":
        shutil.copyfile(target, os.path.join(dst, os.path.basename(target)))
        for file_path in _listed(root, os.path.basename(target)):
            path = datasets._present_image(root, file_path)
            if path is None:
                continue
            out = os.path.join(dst, os.path.relpath(path, root))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copyfile(path, out)
            files, size = files + 1, size + os.path.getsize(out)
    else:
        raise datasets.DatasetError(f"{src}: only NeRF-synthetic and instant-ngp folders are packed")
    if log:
        log(f"{dst}: {files} images, {size / 2**20:.1f} MiB")
    return files, size


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m examples.nerf.pack", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--splits", nargs="+", default=None,
                   help="NeRF-synthetic: the splits to copy (e.g. train test; default all)")
    a = p.parse_args(argv)
    return datasets.exit_status(lambda: pack(a.src, a.dst, splits=a.splits))


if __name__ == "__main__":
    sys.exit(main())

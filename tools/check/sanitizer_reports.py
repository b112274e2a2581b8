#!/usr/bin/env python3
"""The verdict of `make asan-test` on its sanitizer reports: prints every
report file in FOLDER (ASan / UBSan log_path files, one per process that
reported) and exits 1 when there is one, 0 when there are none. (The MSL
shim's fibers switch stacks without swapcontext, whose interceptor printed a
notice in every process that ran them; they announce each switch to ASan:
tests/metal_shim/threadgroups.cc.)

    python3 tools/check/sanitizer_reports.py FOLDER
"""
import os
import sys


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    folder = argv[1]
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    bad = []
    for name in names:
        with open(os.path.join(folder, name), errors="replace") as f:
            bad.append((name, f.read()))
    if not bad:
        print(f"sanitizer reports: no errors ({folder})")
        return 0
    for name, text in bad:
        print(f"== {os.path.join(folder, name)}:\n{text}")
    print(f"sanitizer reports: {len(bad)} process(es) reported errors ({folder})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""The verdict of `make asan-test` on its sanitizer reports: prints every
report file in FOLDER (ASan / UBSan log_path files, one per process that
reported) and exits 1 when one holds an error, 0 when there are none or they
hold only ASan's notice that it does not fully support swapcontext. That
notice comes once from every process that runs the MSL shim's threadgroups
(fibers: tests/metal_shim/threadgroups.cc, which announces each stack switch
to ASan) and is not an error.

    python3 tools/check/sanitizer_reports.py FOLDER
"""
import os
import re
import sys

# ASan's swapcontext interceptor prints this once per process, whatever the program does.
NOTICE = re.compile(r"==\d+==WARNING: ASan doesn't fully support makecontext/swapcontext functions "
                    r"and may produce false positives in some cases!")


def errors(text):
    """The lines of one report file other than the swapcontext notice (blank lines dropped)."""
    return [line for line in text.splitlines() if line.strip() and not NOTICE.fullmatch(line.strip())]


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    folder = argv[1]
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    bad, notices = [], 0
    for name in names:
        with open(os.path.join(folder, name), errors="replace") as f:
            text = f.read()
        if errors(text):
            bad.append((name, text))
        else:
            notices += 1
    if notices:
        print(f"sanitizer reports: {notices} process(es) printed only ASan's swapcontext notice (not an error)")
    if not bad:
        print(f"sanitizer reports: no errors ({folder})")
        return 0
    for name, text in bad:
        print(f"== {os.path.join(folder, name)}:\n{text}")
    print(f"sanitizer reports: {len(bad)} process(es) reported errors ({folder})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

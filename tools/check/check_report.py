"""The report of a wheel check (tools/check/macos_binaries.py, wheel_check.py, cuda_lib_check.py)."""
import os
import sys


def report(prefix, wheel, problems, notes):
    """Prints a wheel check's notes and problems; the exit status (0: passed)."""
    for line in notes:
        print(f"{prefix}: {line}")
    for p in problems:
        print(f"{prefix}: FAILED: {p}", file=sys.stderr)
    if not problems:
        print(f"{prefix}: OK: {os.path.basename(wheel)}")
    return 1 if problems else 0


def check_main(prefix, parser, check, subject, argv=None):
    """A wheel check's main(): `argv` read by `parser`, then check(args) ->
    (problems, notes) reported on the file or folder args.<subject>; the exit
    status."""
    args = parser.parse_args(argv)
    problems, notes = check(args)
    return report(prefix, getattr(args, subject), problems, notes)

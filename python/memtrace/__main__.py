"""`python3 -m memtrace ...`: the memtrace command, as `python3 -m memray`
is memray's. `run` then runs the program with this interpreter, unless
--python names another."""

import os
import sys

from . import _native


def main(argv):
    cmd = _native.command()
    if not cmd:
        sys.stderr.write("memtrace: cannot find the memtrace command (set MEMTRACE_BIN "
                         "to its path)\n")
        return 2
    args = list(argv)
    if args and args[0] == "run":
        args[1:1] = ["--python", sys.executable]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(cmd, ["memtrace"] + args)
    except OSError as e:
        sys.stderr.write("memtrace: cannot run %s: %s\n" % (cmd, e.strerror))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

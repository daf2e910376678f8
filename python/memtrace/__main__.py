"""`python3 -m memtrace ...`: the memtrace command, as `python3 -m memray`
is memray's. `run` then runs the program with this interpreter, unless
--python names another."""

import os
import shutil
import sys

from . import _native


def _command():
    """The memtrace executable: MEMTRACE_BIN, a build tree's, the one
    installed with this package (<prefix>/bin beside <prefix>/lib...), or
    the one on PATH."""
    if os.environ.get("MEMTRACE_BIN"):
        return os.environ["MEMTRACE_BIN"]
    here = _native._HERE
    tried = []
    build = os.environ.get("MEMTRACE_BUILD_DIR")
    if build:
        tried.append(os.path.join(build, "cli", "memtrace"))
    tried.append(os.path.join(here, os.pardir, os.pardir, "build", "cli", "memtrace"))
    up = here
    for _ in range(6):
        up = os.path.dirname(up)
        tried.append(os.path.join(up, "bin", "memtrace"))
    for path in tried:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.normpath(path)
    return shutil.which("memtrace")


def main(argv):
    cmd = _command()
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

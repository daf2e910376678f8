"""README.md and docs/*.md against the command: every option that a
command's --help lists is written somewhere a user reads, and every
option that the usage lines of the README give a command is one it takes."""

import glob
import os
import re

import pytest

from conftest import ROOT, run

COMMANDS = ["run", "attach", "detach", "stats", "summary", "flamegraph", "table", "tree",
            "diff", "transform", "growth", "live", "parse"]


def docs_text():
    paths = [os.path.join(ROOT, "README.md")] + [
        p for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        if os.path.basename(p) != "format.md"]
    out = []
    for p in paths:
        with open(p) as f:
            out.append(f.read())
    return "\n".join(out)


def long_options(text):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


def help_options(memtrace, command):
    return long_options(run(memtrace, command, "--help").stdout) - {"--help"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_the_help_is_documented(memtrace, command):
    documented = long_options(docs_text())
    missing = sorted(help_options(memtrace, command) - documented)
    assert not missing, "memtrace %s: %s in --help, in no document" % (command, missing)


def readme_usage_lines():
    """The `memtrace CMD ...` lines of the README's sh blocks, with their
    continuation lines, comments cut."""
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"```sh\n(.*?)```", f.read(), re.S)
    lines = []
    for block in blocks:
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split(" #", 1)[0].strip()
            m = re.match(r"memtrace (\w+)\b(.*)", line)
            if m and m.group(1) in COMMANDS:
                lines.append((m.group(1), m.group(2)))
    return lines


def test_readme_usage_options_are_taken(memtrace):
    lines = readme_usage_lines()
    assert len(lines) > 20, lines
    helps = {c: help_options(memtrace, c) for c in COMMANDS}
    bad = [(c, sorted(long_options(rest) - helps[c])) for c, rest in lines
           if long_options(rest) - helps[c]]
    assert not bad, bad

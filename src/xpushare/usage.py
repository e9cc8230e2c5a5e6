"""Usage errors as command-line tools usually answer them: one short usage line, the error, and
where the whole help is, instead of the full usage (nvsharectl's alone is twenty lines).

    usage: nvsharectl [options] [COMMAND ...]
    nvsharectl: error: argument -T/--set-tq: invalid value '0': ...
    Try 'nvsharectl --help' for more information.

`--help` still prints everything. Subcommands' parsers are of the same class (argparse makes them
with the parent's), so `nvsharectl top --interval 0` points at `nvsharectl top --help`.
"""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors print `short_usage` (default: PROG [options]) and a hint."""

    def __init__(self, *args, short_usage: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.short_usage = short_usage

    def error(self, message: str):
        usage = self.short_usage or f"{self.prog} [options]"
        self.exit(2, f"usage: {usage}\n{self.prog}: error: {message}\n"
                     f"Try '{self.prog} --help' for more information.\n")


"""Flags whose default comes from an environment variable (what the Helm chart and the systemd unit
set), held to what the flag accepts: a bad value stops the program with usage, naming the variable,
as the same value given on the command line would (and a valid flag on the command line wins, so
the variable is not read then).

    p.add_argument("--nvml-health", choices=(...), default=env_default(p, "NVSHARE_NVML_HEALTH", "auto"))
    ...
    args = parse_args(p, argv)
"""

from __future__ import annotations

import argparse
import os
import sys


class EnvValue(str):
    """A default taken from the environment: the string, and the variable it came from."""
    env: str


def env_default(parser: argparse.ArgumentParser, name: str, default=None):
    """The variable's value (unset or empty: `default`), marked so that parse_args checks it against
    the argument whose default it becomes. (`parser`: whose flags these are; kept for symmetry.)"""
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    marked = EnvValue(value)
    marked.env = name
    return marked


def _given(action: argparse.Action, argv: list[str]) -> bool:
    return any(a == f or a.startswith(f + "=") for f in action.option_strings for a in argv)


def _problem(action: argparse.Action, value: str) -> str | None:
    try:
        converted = action.type(value) if action.type else value
    except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
        return str(e) or f"invalid value {value!r}"
    if action.choices is not None and converted not in action.choices:
        return f"expected one of {', '.join(map(str, action.choices))}"
    return None


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """parser.parse_args(argv), after checking every environment default of a flag not given."""
    argv = sys.argv[1:] if argv is None else list(argv)
    for action in parser._actions:
        value = action.default
        if isinstance(value, EnvValue) and action.option_strings and not _given(action, argv):
            problem = _problem(action, str(value))
            if problem:
                parser.error(f"{value.env}={str(value)!r} (the default of {action.option_strings[0]}): "
                             f"{problem}")
    return parser.parse_args(argv)

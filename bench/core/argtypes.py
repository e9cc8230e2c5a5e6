"""argparse types of the benchmarks' command lines (numbers that must be positive, finite, ...).
Stdlib only: the job program (a child process) uses them too."""

from __future__ import annotations

import argparse
import math


def positive(kind):
    """An argparse type: `kind` (int or float) of the text, which must be above zero."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive number is required")
        return value
    return parse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive integer is required")
    return value


def non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else positive_int(text)


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid number {text!r}")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive number is required")
    return value


def non_negative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: zero or more is required")
    return value

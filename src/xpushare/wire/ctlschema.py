"""The schema of control requests: what each op of control.OPS takes, declared as data, and the one
validator that checks a request against it before any handler runs.

A request is a JSON object: its `op` and that op's fields, nothing else. Each Field names a kind
(Int, Choice, GpuSelector) that carries its type and range; a field that is absent or null counts
as absent. validate() returns the fields as a new dict, which handlers read without further checks,
or raises Invalid with the reason that goes back as `error`. Unknown fields are refused, not ignored:
a misspelt `gpus` would otherwise apply a setting to every GPU instead of one. Values shown in error
texts are shortened, so that a reply stays small whatever a request carries.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar, Protocol

SHOW_LIMIT = 64  # characters of a request's value quoted in an error text


class Invalid(Exception):
    """A request that does not match its op's schema; its text goes back as `error`."""


def show(value) -> str:
    """repr() of a value taken from a request, cut to SHOW_LIMIT characters."""
    try:
        text = repr(value)
    except ValueError:  # an integer with more digits than int -> str converts
        return "a very large integer"
    return text if len(text) <= SHOW_LIMIT else text[:SHOW_LIMIT - 3] + "..."


def unsigned_max(payload, field: str) -> int:
    """The largest value an unsigned integer field of a fixed payload (messages.py) carries."""
    _, size = payload.layout()[field]
    return (1 << (8 * size)) - 1


class Kind(Protocol):
    hint: str  # what a valid value is, for error texts

    def check(self, name: str, value): ...


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is no number


@dataclass(frozen=True)
class Int:
    """An integer from lo to hi, or one of `words`; `high` is the reason given for a value above hi
    when it deserves its own text (the hint otherwise)."""
    lo: int
    hi: int
    hint: str
    high: str = ""
    words: tuple[str, ...] = ()

    def check(self, name: str, value):
        if isinstance(value, str) and value in self.words:
            return value
        if not _is_int(value) or value < self.lo:
            raise Invalid(f"invalid {name} {show(value)}: {self.hint}")
        if value > self.hi:
            raise Invalid(f"invalid {name} {show(value)}: {self.high or self.hint}")
        return value


@dataclass(frozen=True)
class Number:
    """A finite number from lo to hi, both included (an integer or a fraction), or one of
    `words`."""
    lo: float
    hi: float
    hint: str
    words: tuple[str, ...] = ()

    def check(self, name: str, value):
        if isinstance(value, str) and value in self.words:
            return value
        # An integer is compared as it is: math.isfinite() would convert it to a float, which
        # raises OverflowError for one of more than about 308 digits (JSON has no bound on them).
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or (isinstance(value, float) and not math.isfinite(value))
                or not self.lo <= value <= self.hi):
            raise Invalid(f"invalid {name} {show(value)}: {self.hint}")
        return value


@dataclass(frozen=True)
class PodName:
    """NAMESPACE/NAME as Kubernetes spells them (a namespace is a DNS label, a pod name a DNS
    subdomain): returned as a (namespace, name) pair."""
    hint: str = "NAMESPACE/NAME of a pod"
    TEXT: ClassVar[re.Pattern] = re.compile(r"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/"
                                            r"([a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?)")

    def check(self, name: str, value):
        match = self.TEXT.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise Invalid(f"invalid {name} {show(value)}: {self.hint}")
        return (match.group(1), match.group(3))


@dataclass(frozen=True)
class Uid:
    """A Kubernetes object's metadata.uid (a pod's, a ResourceClaim's): letters, digits and dashes,
    at most 64 characters."""
    hint: str = "a Kubernetes UID (letters, digits and dashes)"
    TEXT: ClassVar[re.Pattern] = re.compile(r"[A-Za-z0-9][-A-Za-z0-9]{0,63}")

    def check(self, name: str, value):
        if not isinstance(value, str) or self.TEXT.fullmatch(value) is None:
            raise Invalid(f"invalid {name} {show(value)}: {self.hint}")
        return value


@dataclass(frozen=True)
class Choice:
    """One of a few strings."""
    values: tuple[str, ...]

    @property
    def hint(self) -> str:
        return ", ".join(self.values[:-1]) + " or " + self.values[-1]

    def check(self, name: str, value):
        if not isinstance(value, str) or value not in self.values:
            raise Invalid(f"invalid {name} {show(value)}: {self.hint}")
        return value


@dataclass(frozen=True)
class GpuSelector:
    """A GPU's index (0 to max_index), or its UUID or a prefix of one: printable ASCII without
    spaces, at most max_len characters (a longer text names no GPU the scheduler can know)."""
    max_index: int
    max_len: int
    hint: str = "an index, a UUID or a unique UUID prefix"
    TEXT: ClassVar[re.Pattern] = re.compile(r"[!-~]+")

    def check(self, name: str, value):
        if _is_int(value) and 0 <= value <= self.max_index:
            return value
        if isinstance(value, str) and len(value) <= self.max_len and self.TEXT.fullmatch(value):
            return value
        raise Invalid(f"invalid {name} {show(value)}: {self.hint}")


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    required: bool = False


@dataclass(frozen=True)
class Schema:
    """An op's fields; `one_of`: names of which exactly one must be given."""
    fields: tuple[Field, ...] = ()
    one_of: tuple[str, ...] = ()


def validate(op: str, schema: Schema, msg: dict) -> dict:
    """The request's fields, checked against `schema`; Invalid at the first that does not fit."""
    names = [f.name for f in schema.fields]
    for key in msg:
        if key != "op" and key not in names:
            takes = f"it takes {', '.join(names)}" if names else "it takes no fields"
            raise Invalid(f"unknown field {show(key)} for {op} ({takes})")
    fields = {}
    for f in schema.fields:
        value = msg.get(f.name)
        if value is not None:
            fields[f.name] = f.kind.check(f.name, value)
        elif f.required:
            raise Invalid(f"{op} needs {f.name}: {f.kind.hint}")
    given = [name for name in schema.one_of if name in fields]
    if schema.one_of and len(given) != 1:
        choices = " or ".join(f"a {name}" for name in schema.one_of)
        raise Invalid(f"{op} needs {choices}" if not given else f"{op} takes {choices}, not both")
    return fields

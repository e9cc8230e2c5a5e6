"""The library's NVSHARE_COMPUTE_LIMIT and NVSHARE_COMPUTE_SHARE (native/src/core/config.c) against
src/xpushare/wire/quota_ranges.py, the ranges nvsharectl, the control ops and the pod
annotations use: at the edges of tests/quota_edges.py and at edges made from quota_ranges' bounds
(so that a bound moved on one side only is caught), the environment accepts a value exactly when
quota_ranges does, sends it in SETTINGS in the wire's units, and quotes the same range when it
refuses one."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest

from tests.quota_edges import COMPUTE_LIMIT_EDGES, COMPUTE_SHARE_EDGES
from xpushare.wire.protocol import COMPUTE_LIMIT_SCALE, COMPUTE_SHARE_SCALE, FEATURE_QUOTAS, MessageType
from xpushare.wire.ctlschema import Invalid
from xpushare.wire import quota_ranges as ranges

LIMIT, SHARE = "NVSHARE_COMPUTE_LIMIT", "NVSHARE_COMPUTE_SHARE"
KIND = {LIMIT: ranges.COMPUTE_LIMIT, SHARE: ranges.COMPUTE_SHARE}
UNITS = {LIMIT: Decimal(COMPUTE_LIMIT_SCALE) / 100, SHARE: Decimal(COMPUTE_SHARE_SCALE)}  # per unit
SPAN = {LIMIT: ranges.COMPUTE_LIMIT_SPAN, SHARE: ranges.COMPUTE_SHARE_SPAN}


def _edges_of(variable: str) -> list[str]:
    """Each bound of quota_ranges and a tenth of the wire's step beyond it, as decimal text: beyond
    a bound by less than a step, a value still rounds into the range on the wire, and is refused."""
    kind, tenth_step = KIND[variable], 1 / UNITS[variable] / 10
    lo, hi = Decimal(ranges.plain(kind.lo)), Decimal(ranges.plain(kind.hi))
    return [str(lo - tenth_step), str(lo), str(hi), str(hi + tenth_step)]


def _python_accepts(variable: str, text: str) -> bool:
    kind = KIND[variable]
    if text in kind.words:
        return True
    try:
        kind.check(variable, float(text.rstrip("%")))
    except (Invalid, ValueError):
        return False
    return True


CASES = ([(LIMIT, text, ok) for text, ok in COMPUTE_LIMIT_EDGES] +
         [(SHARE, text, ok) for text, ok in COMPUTE_SHARE_EDGES] +
         [(variable, text, None) for variable in (LIMIT, SHARE) for text in _edges_of(variable)])


@pytest.mark.parametrize("variable, text, accepted", CASES, ids=str)
def test_the_environment_accepts_what_quota_ranges_accepts(world, recorder, variable, text, accepted):
    """`accepted`: what the shared table says (None for the edges made here, which quota_ranges
    decides alone)."""
    python = _python_accepts(variable, text)
    assert accepted in (None, python), "tests/quota_edges.py and quota_ranges.py disagree"
    recorder.welcome_features = FEATURE_QUOTAS
    app = world.run("init", "ctx", 0, "launch", 1, env={variable: text})
    warnings = app.stderr().splitlines()
    (settings,) = recorder.messages(MessageType.SETTINGS)
    sent = getattr(settings.msg, "compute_limit" if variable == LIMIT else "compute_share")
    assert (warnings == []) == python, (variable, text, warnings)
    if not python:
        assert warnings == [f'nvshare[{app.pid}]: warning: ignoring {variable}="{text}": expected '
                            f"a {'percentage' if variable == LIMIT else 'number'} {SPAN[variable]}"
                            f"{' (e.g. 50 or 50%) or none' if variable == LIMIT else ' (e.g. 0.5 or 30)'}"]
        assert sent == 0
    elif text == ranges.CLEAR:
        assert sent == 0
    else:  # in the wire's units, to the nearest (half up), and never 0, which means not set
        exact = Decimal(text.rstrip("%")) * UNITS[variable]
        assert sent == int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP)) >= 1

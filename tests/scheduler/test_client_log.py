"""The lines a user's clients cause are rate-limited per uid (issue 22, item 6; clientlog.py): a
flood of refused control requests, or of connections that come, attach and go, from another user
writes at most LINES lines per interval, then one line saying how many were suppressed, and every
one is counted; root's lines and the scheduler's own are not suppressed."""

from __future__ import annotations

import os
import re

import pytest

from sched_harness import FakeClient, as_user
from testkit.waiting import poll

NOBODY = 65534
LINES, INTERVAL = 5, 0.5
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
SUPPRESSED = re.compile(r"suppressed (\d+) similar lines from uid (\d+)")


def _suppressed(log: str, uid: int) -> int:
    return sum(int(n) for n, u in SUPPRESSED.findall(log) if int(u) == uid)


def _refused_set_tq(sock, n: int) -> int:
    with FakeClient(sock) as c:
        refused = sum(not c.ctl("set_tq", seconds=5)["ok"] for _ in range(n))
    return refused


def _churn(sock, n: int) -> int:
    for _ in range(n):
        with FakeClient(sock) as c:
            c.hello()
            c.attach(0)
    return os.getpid()


@pytest.fixture
def limited(start_scheduler):
    return start_scheduler("--no-nvml", "--mode", "serial", "--tq", "30",
                           "--client-log-limit", f"{LINES}/{INTERVAL}")


@needs_root
def test_refused_requests_of_a_user_are_limited_and_counted(limited):
    n = 400
    assert as_user(NOBODY, NOBODY, _refused_set_tq, limited.sock, n) == n
    with FakeClient(limited.sock) as root:  # root's are not limited: its line orders the check
        assert root.ctl("set_tq", seconds=7)["ok"]
    poll(lambda: "ctl set_tq from" in limited.log() and "uid=0: ok" in limited.log(),
         what="root's set_tq in the log")
    logged = lambda: limited.log().count(f"uid={NOBODY}: permission denied")  # noqa: E731
    assert logged() < n / 4, "the refusals were not limited"
    poll(lambda: logged() + _suppressed(limited.log(), NOBODY) == n,
         what=lambda: f"{logged()} logged + {_suppressed(limited.log(), NOBODY)} suppressed")


@needs_root
def test_connection_churn_of_a_user_is_limited_and_counted(limited):
    n = 100
    with FakeClient(limited.sock) as root:  # made up the GPU, which stays: its lines are root's
        root.hello()
        root.attach(0)
        pid = as_user(NOBODY, NOBODY, _churn, limited.sock, n)
        root.ctl("set_tq", seconds=7)  # root's line: not limited, and logged after the churn's
    mine = lambda: sum(f"pid={pid} " in line for line in limited.log().splitlines())  # noqa: E731
    poll(lambda: "uid=0: ok" in limited.log(), what="root's set_tq in the log")
    assert mine() < n, "ATTACH and disconnect lines were not limited"
    # ATTACH (which says what HELLO told too) and disconnect: two lines a connection
    poll(lambda: mine() + _suppressed(limited.log(), NOBODY) == 2 * n,
         what=lambda: f"{mine()} logged + {_suppressed(limited.log(), NOBODY)} suppressed")


def test_the_budget_counts_per_uid_and_reports_at_the_next_interval(caplog):
    from xpushare.scheduler.node.clientlog import ClientLog
    now = [0.0]
    budget = ClientLog(lines=2, interval=10.0, clock=lambda: now[0])
    caplog.set_level("INFO", logger="nvshare.scheduler")
    logged = [budget.info(NOBODY, "line %d", i) for i in range(5)]
    assert logged == [True, True, False, False, False]
    assert budget.info(NOBODY + 1, "another user's") and budget.info(0, "root's")
    now[0] = 10.0  # no loop here to end the interval: the uid's next line does
    assert budget.info(NOBODY, "later")
    assert [r.getMessage() for r in caplog.records] == [
        "line 0", "line 1", "another user's", "root's",
        f"suppressed 3 similar lines from uid {NOBODY} in 10s (at most 2 per uid)", "later"]

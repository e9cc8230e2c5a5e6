"""Strings a client sends cannot forge a log line or reach a terminal raw: the scheduler's text log
writes every character that is not printable as its escape (logformat.TextFormatter), and nvsharectl
status and top show such strings escaped, with no markup or emoji codes interpreted."""

from __future__ import annotations

import re
import subprocess
import sys

from sched_harness import FakeClient, child_env
from xpushare.inert import inert
from xpushare.wire.protocol import Job, MessageType

FORGED = "x\n2026-11-27 00:00:00,000 nvshare-scheduler WARNING evict pid=1 gpu=0"
HOSTILE = "A\x1b[2J\x1b]0;owned\x07\x1b[5mB\u2028[blink]C[/blink] :fire:"


def test_a_rendezvous_with_a_newline_writes_one_log_line(scheduler):
    with FakeClient(scheduler.sock) as client:
        client.hello()
        client.send(MessageType.JOB, Job(2, "", 2, 2, 0, 0, "run", FORGED).pack())
        client.attach(0)
        client.ctl("status")  # everything before it was handled
    log = scheduler.logfile.read_text()
    forged = [ln for ln in log.splitlines() if re.match(r"^2026-11-27 00:00:00,000", ln)]
    assert forged == [], log
    job_lines = [ln for ln in log.splitlines() if " job pid=" in ln]
    assert len(job_lines) == 1 and "x\\x0a2026-11-27" in job_lines[0], job_lines


def _ctl(sock, *args) -> str:
    argv = [sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(sock), *args]
    r = subprocess.run(argv, env=child_env({"COLUMNS": "400"}), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_status_and_top_show_hostile_names_escaped(scheduler):
    """A GPU name, a pod hint and a job name with a screen clear, a window title, a line separator,
    blink, rich markup and an emoji code: status and top show them as written, escapes spelt out."""
    with FakeClient(scheduler.sock) as client:
        client.hello(pod_name=HOSTILE, pod_namespace="ns")
        client.send(MessageType.JOB, Job(1, name=HOSTILE).pack())
        client.attach(0, name=HOSTILE)
        client.ctl("status")
        for text in (_ctl(scheduler.sock, "status"), _ctl(scheduler.sock, "top", "--once")):
            assert "\x1b" not in text and "\x07" not in text and "\u2028" not in text, repr(text)
            assert "\\x1b[2J" in text or "\\x1b]0;owned" in text, text
            assert "[blink]" in text and ":fire:" in text, text


def test_inert_escapes_only_what_is_not_printable():
    assert inert("plain text, é, 中文") == "plain text, é, 中文"
    assert inert("a\nb\tc\x7f\u200b") == "a\\x0ab\\x09c\\x7f\\u200b"

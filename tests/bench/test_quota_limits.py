"""bench/quotas/quota_limits.py: its pure parts (the plan, the verdicts, the report), its group runner and
all four parts end to end with a stand-in workload and a stand-in nvidia-smi (no GPU), and the
control operation it lowers a limit with, against a real scheduler."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bench.quotas import quota_limits as ql
from bench.quotas import quota_workload as qw
from bench.core.gpu_clocks import ClockSampler

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fake_quota_workload.py"
FAKE_SMI = HERE / "fake_nvidia_smi.py"


def test_plan():
    live = {"from": 75, "to": 25, "change_at": 3.0, "seconds": 8.0, "trace_every": 16}
    assert ql.plan(False, None, None) == {"seconds": 8.0, "tq": 2.0, "limits": [25, 50, 75],
                                          "shares": [30, 70], "graph_limit": 30, "graph_live_op": "add",
                                          "live": live}
    quick = ql.plan(True, None, 0.5)
    assert quick["seconds"] == 3.0
    assert quick["live"]["seconds"] == 7.0  # the live run keeps 4 s after its change
    assert ql.plan(True, 5.0, 0.5)["tq"] == 0.5
    assert ql.plan(False, 12.0, None)["live"]["seconds"] == 12.0


def test_judge_limit():
    assert ql.judge_limit(100.0, 27.9, 25) == {"percent": pytest.approx(27.9), "met": True}
    assert ql.judge_limit(100.0, 28.1, 25)["met"] is False
    assert ql.judge_limit(200.0, 96.0, 50) == {"percent": pytest.approx(48.0), "met": True}
    assert ql.judge_limit(100.0, 71.0, 75)["met"] is False
    assert ql.judge_limit(None, 50.0, 50) == {"percent": None, "met": None}
    assert ql.judge_limit(100.0, None, 50) == {"percent": None, "met": None}


def test_judge_shares():
    v = ql.judge_shares([50.0, 50.0], [29.0, 68.0], [30, 70])
    assert v["percent"] == pytest.approx([29.0 / 0.97, 68.0 / 0.97])
    assert v["expected"] == pytest.approx([30.0, 70.0])
    assert v["met"] == [True, True]
    assert v["combined_ratio"] == pytest.approx(0.97) and v["combined_met"] is True
    bad = ql.judge_shares([50.0, 50.0], [45.0, 45.0], [30, 70])
    assert bad["met"] == [False, False] and bad["combined_ratio"] == pytest.approx(0.9)
    assert bad["combined_met"] is False
    none = ql.judge_shares([50.0, None], [None, 30.0], [30, 70])
    assert none["met"] == [None, None] and none["combined_ratio"] is None


def _result():
    limits = {"none": {"ips": 200.0}}
    for lim, ips in ((25, 51.0), (50, 90.0), (75, 150.0)):
        limits[str(lim)] = {"ips": ips, **ql.judge_limit(200.0, ips, lim)}
    return {"parameters": {"seconds": 8.0, "tq": 2.0, "shares": [30, 70]}, "limits": limits,
            "shares": {"without": [100.0, 100.0], "with": [60.0, 135.0],
                       "verdict": ql.judge_shares([100.0, 100.0], [60.0, 135.0], [30, 70])}}


def test_report_from_a_result():
    r = _result()
    text = ql.section(r)
    assert "| alone, NVSHARE_COMPUTE_LIMIT=25 | 51.0 products | **25.5** | 25 ± 3 of solo throughput | **yes** |" \
        in text
    assert "| alone, NVSHARE_COMPUTE_LIMIT=50 | 90.0 products | **45.0** | 50 ± 3 of solo throughput | **no** |" \
        in text
    assert "| NVSHARE_COMPUTE_SHARE=30 / 70 | 60.0 / 135.0 | 195.0 | **30.8 / 69.2** | 30 / 70 ± 3 | " \
           "**yes** / **yes** |" in text
    assert "Combined throughput with shares over without: **0.975x**" in text
    rows = ql.goals(r)
    assert len(rows) == 6
    assert "compute limit 25%" in rows[0] and "**yes**" in rows[0]
    assert "compute limit 50%" in rows[1] and "**no**" in rows[1]
    assert "compute share 70 (of 30+70)" in rows[4] and "**69.2%**" in rows[4]
    assert "**0.975x**" in rows[5]
    assert "compute limits and shares" in ql.goals({"error": "no GPU"})[0]
    assert ql.all_met(r) is False
    r["limits"]["50"] = {"ips": 100.0, **ql.judge_limit(200.0, 100.0, 50)}
    assert ql.all_met(r) is True


def test_main_rejects_bad_arguments():
    for argv in (["--seconds", "0"], ["--tq", "0"], ["--bogus"]):
        with pytest.raises(SystemExit):
            ql.main(argv)


def test_workload_arguments():
    files = ["--warm", "w", "--go", "g", "--ready", "r"]
    a = qw.parse(["--seconds", "3", *files])
    assert (a.seconds, a.matrix, a.dtype, a.ready, a.graph, a.trace_every) == \
        (3.0, 4096, "float16", "r", False, 0)
    a = qw.parse(["--graph", "--trace-every", "16", *files])
    assert (a.graph, a.trace_every) == (True, 16)
    a = qw.parse(["--op", "add", "--elements", "1024", *files])
    assert (a.op, a.elements) == ("add", 1024)
    assert qw.parse(files).op == "matmul"
    assert qw.GRAPH_PRODUCTS == qw.CHUNK  # one replay is one chunk: iterations count products
    for bad in (["--dtype", "int8"], ["--trace-every", "12"], ["--trace-every", "0"], ["--op", "conv"],
                ["--elements", "0"], ["--elements", str((1 << 30) + 1)]):
        with pytest.raises(SystemExit):
            qw.parse([*bad, *files])


def test_run_group_starts_them_together_and_reads_their_results(tmp_path):
    env = {**os.environ, "FAKE_IPS": "80", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    seen = []
    out = ql.run_group([env, {**env, "NVSHARE_COMPUTE_LIMIT": "25"}], sys.executable, 0.2, tmp_path,
                       "t", script=FAKE, during=lambda pids, t_go: seen.append((pids, t_go)) or "x")
    assert [r["ips"] for r in out["results"]] == [80.0, 20.0]
    assert (tmp_path / "t.go").exists()
    assert out["during"] == "x"
    assert seen[0][0] == [r["pid"] for r in out["results"]]  # the workloads' own pids
    assert seen[0][1] == out["t_go"] < out["t_ready"]
    assert out["clocks"] == {"samples": 0, "sm_mhz": None, "power_w": None, "util_pct": None}


def test_an_earlier_result_renders_without_the_new_parts():
    text = ql.section(_result())
    assert "| alone, no limit | 200.0 products | 100 | — | — |\n" in text
    assert "CUDA graph" not in text and "live change" not in text and "SM clock" not in text
    assert not any("graph" in row or "lowered" in row for row in ql.goals(_result()))


def test_clock_columns_are_blank_without_nvidia_smi():
    r = _result()
    r["parameters"]["clocks"] = False
    r["limits"]["25"]["clocks"] = {"samples": 0, "sm_mhz": None, "power_w": None, "util_pct": None}
    r["limits"]["50"]["clocks"] = {"samples": 40, "sm_mhz": 1771.4, "power_w": 509.6, "util_pct": 51.0}
    text = ql.section(r)
    assert "| run | per second | **percent of solo** | goal | met | SM clock (MHz) | power (W) | " \
           "GPU util (%) |" in text
    assert "| alone, NVSHARE_COMPUTE_LIMIT=25 | 51.0 products | **25.5** | 25 ± 3 of solo throughput | " \
           "**yes** |  |  |  |" in text
    assert "| alone, NVSHARE_COMPUTE_LIMIT=50 | 90.0 products | **45.0** | 50 ± 3 of solo throughput | " \
           "**no** | 1771 | 510 | 51 |" in text


def _env(tmp_path: Path, **extra) -> dict:
    return {**os.environ, "FAKE_IPS": "200", "FAKE_GRAPH_IPS": "300",
            "FAKE_LIMIT_FILE": str(tmp_path / "limit"),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            **{k: str(v) for k, v in extra.items()}}


def _writes_limit(tmp_path: Path, reply: dict | None = None):
    """set_limit as the scheduler would carry it to the stand-in: a file it reads."""
    calls = []

    def set_limit(pid, pct):
        calls.append((pid, pct))
        if reply is None:
            (tmp_path / "limit").write_text(str(pct))
        return reply or {"ok": True, "clients": 1}
    return set_limit, calls


def _short_plan() -> dict:
    p = ql.plan(True, 0.2, None)
    p["live"].update(change_at=1.2, seconds=3.5)  # a second before the change, two after it
    return p


def test_all_four_parts_end_to_end_with_stand_ins(tmp_path):
    p = _short_plan()
    set_limit, calls = _writes_limit(tmp_path)
    with ClockSampler([sys.executable, str(FAKE_SMI)]) as sampler:
        parts = ql.measure_parts(p, sys.executable, lambda **e: _env(tmp_path, **e), tmp_path,
                                 set_limit, sampler, script=FAKE)
    assert [parts["limits"][k]["percent"] for k in ("25", "50", "75")] == \
        [pytest.approx(25.0), pytest.approx(50.0), pytest.approx(75.0)]
    g = parts["graph"]
    assert g["solo"]["ips"] == 300.0 and g["limited"]["limit"] == 30
    assert g["limited"]["percent"] == pytest.approx(30.0) and g["limited"]["met"] is True
    live = parts["live"]
    assert calls == [(calls[0][0], 25)] and calls[0][0] > 0
    assert 1.1 <= live["change_s"] < 1.5  # the workload starts its clock just after the go
    v = live["verdict"]
    assert v["windows"]["before"] == pytest.approx(75.0, abs=2)
    assert v["windows"]["second_s"] == pytest.approx(25.0, abs=2)
    assert v["windows"]["first_s"] == pytest.approx(25.0, abs=3)
    assert v["effect_met"] is True and v["held_met"] is True
    assert [parts["memory_bound"][k]["percent"] for k in ("25", "50", "75")] == \
        [pytest.approx(25.0), pytest.approx(50.0), pytest.approx(75.0)]
    # Clocks: the 0.2 s runs have no samples inside their window (so no GPU-time verdict); the
    # live run has.
    assert parts["limits"]["none"]["clocks"]["samples"] == 0
    assert parts["limits"]["25"]["gpu_time"] == {"util_pct": None, "met": None}
    assert parts["limits"]["25"]["goal"] == "gpu_time" and parts["limits"]["25"]["met"] is None
    assert parts["limits"]["25"]["throughput_met"] is True
    assert parts["memory_bound"]["25"]["goal"] == "throughput" and parts["memory_bound"]["25"]["met"]
    assert live["clocks"]["samples"] > 10 and live["clocks"]["sm_mhz"] == 1755.0
    assert parts["shares"]["verdict"]["met"] == [True, True]

    result = {"parameters": {**p, "clocks": True}, **parts}
    assert ql.all_met(result) is False  # the GPU time was not measured
    for key, row in parts["limits"].items():
        if key != "none":  # as the GPU's utilisation would say it under the limit
            row["gpu_time"] = ql.judge_gpu_time({"util_pct": float(key)}, int(key))
            row["met"] = row["gpu_time"]["met"]
    assert ql.all_met(result) is True
    text = ql.section(result)
    assert "| CUDA graph, NVSHARE_COMPUTE_LIMIT=30 | 90.0 sums | **30.0** (of graph solo) | 30 ± 3 | **yes** |" \
        in text
    live_row = next(line for line in text.splitlines() if line.startswith("| NVSHARE_COMPUTE_LIMIT=75"))
    assert "lowered to 25" in live_row and "| 1755 | 512 | 100 |" in live_row
    assert "**yes** / **yes**" in live_row
    assert "| alone, memory-bound sums, NVSHARE_COMPUTE_LIMIT=50 | 100.0 sums | **50.0** | 50 ± 3 of solo " \
           "throughput | **yes** |" in text
    assert "| alone, NVSHARE_COMPUTE_LIMIT=50 | 100.0 products | **50.0** | 50 ± 3 of the GPU's time " \
           "(NVML) | **yes** |" in text
    rows = ql.goals(result)
    assert len(rows) == 3 * 2 + 1 + 2 + 3  # limits of both workloads, graph, live, shares
    assert any("compute limit 30%, CUDA graph replays" in r and "**30.0%**" in r for r in rows)
    assert any("compute limit 50%, memory-bound sums" in r and "of solo throughput" in r for r in rows)
    assert any("compute limit 50% |" in r and "GPU time 50.0%" in r and "(NVML)" in r for r in rows)
    assert any("75 → 25% while running: the 1 s after the change" in r and "**yes**" in r
               for r in rows)


def test_a_change_that_takes_too_long_is_not_met(tmp_path):
    p = _short_plan()
    set_limit, _ = _writes_limit(tmp_path)

    def run(extras, tag, seconds, args, during):
        env = _env(tmp_path, FAKE_LAG=1.5, **extras[0])
        return ql.run_group([env], sys.executable, seconds, tmp_path, tag, FAKE, tuple(args), during)
    live = ql._live(p, run, set_limit, 200.0)
    v = live["verdict"]
    assert v["windows"]["first_s"] > 50  # 1.5 s at 75 before it drops
    assert v["effect_met"] is False and v["held_met"] is False
    result = {**_result(), "live": live, "parameters": p}
    assert ql.all_met(result) is False
    assert any("the 1 s after the change" in r and "**no**" in r for r in ql.goals(result))


def test_a_refused_change_is_an_error(tmp_path):
    p = _short_plan()
    p["live"].update(change_at=0.1, seconds=0.4)
    set_limit, _ = _writes_limit(tmp_path, {"ok": False, "error": "no client with pid 1"})

    def run(extras, tag, seconds, args, during):
        return ql.run_group([_env(tmp_path, **extras[0])], sys.executable, seconds, tmp_path, tag,
                            FAKE, tuple(args), during)
    with pytest.raises(RuntimeError, match="no client with pid"):
        ql._live(p, run, set_limit, 200.0)


def test_the_control_operation_lowers_a_clients_limit(start_scheduler):
    from bench.core.protoclient import ProtoClient, ctl

    sched = start_scheduler("auto", 2.0)
    set_limit = ql.scheduler_set_limit(sched.socket)
    with ProtoClient(sched.socket) as c:
        c.attach("GPU-00000000-0000-0000-0000-0000000000c1")
        reply = set_limit(os.getpid(), 25)
        assert reply.get("ok") is True and reply.get("clients") == 1
        me = next(x for x in ctl(sched.socket, "status")["clients"] if x["client_id"] == c.client_id)
        assert me["quota"]["compute_limit"] == 25
    assert set_limit(os.getpid(), 25).get("ok") is False  # gone: nothing to lower

"""CPU tests of bench/scheduling/inference_beside_training.py: the arms' order, the figures of a
result, and a dry run end to end (stand-in programs, a real scheduler per library arm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.scheduling import inference_beside_training as inf
from bench.scheduling import inference_results as res
from bench.scheduling.inference_worker import arrivals


def test_every_arm_runs_once_per_repetition_in_a_rotated_order():
    order = inf.arm_order(3)
    for rep in range(3):
        arms = [a for r, a in order if r == rep]
        assert sorted(arms) == sorted(inf.ARMS)
    firsts = [next(a for r, a in order if r == rep) for rep in range(3)]
    assert len(set(firsts)) == 3  # no arm always goes first


def test_arrivals_are_seeded_and_have_the_mean_asked_for():
    a = arrivals(4000, 20.0, 1)
    assert a == arrivals(4000, 20.0, 1) and a != arrivals(4000, 20.0, 2)
    assert 18.0 < a[-1] / len(a) * 1000 < 22.0


def test_training_in_the_gaps_counts_steps_ending_inside_them():
    assert res.gap_rate([0.5, 1.5, 2.5, 3.5], [(1.0, 2.0), (3.0, 4.0)]) == 1.0
    assert res.gap_rate([0.5], [(1.0, 2.0)]) == 0.0
    assert res.gap_rate([0.5], []) is None


def _server(lat, hashes="h", end=10.0):
    return {"latency_s": lat, "hashes": {"0": hashes}, "start": 0.0, "end": end, "gaps": [(0.0, 5.0)]}


def test_the_summary_compares_each_arm_with_the_alone_arms():
    runs = {"server_alone": [{"server": _server([0.004] * 100)}],
            "training_alone": [{"trainer": {"start": 0.0, "step_ends": [i / 10 for i in range(1, 101)]}}],
            "native": [{"server": _server([0.008] * 100, hashes="other"),
                        "trainer": {"start": 0.0, "step_ends": [i / 5 for i in range(1, 51)]}}]}
    arms = res.summarise(runs)
    assert arms["server_alone"]["p99_vs_alone"] == 1.0 and arms["server_alone"]["identical"]
    native = arms["native"]
    assert native["p99_vs_alone"] == 2.0 and native["identical"] is False
    assert native["train_vs_alone"] == 0.5 and native["train_in_gaps_vs_alone"] == 0.5
    assert native["met"] is False


def test_the_service_time_leaves_out_the_wait_for_earlier_answers():
    server = {**_server([0.004, 0.008]), "service_s": [0.004, 0.004],
              "launch_cpu_s": [(0.001, 0.004), (0.003, 0.004)]}
    row = res.summarise({"server_alone": [{"server": server}]})["server_alone"]
    assert row["service_ms"]["p99"] == 4.0 and row["latency_ms"]["p99"] > 7.9
    assert row["launch_cpu_share"] == 0.5


def test_a_dry_run_end_to_end(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert inf.main(["--dry-run", "--quick", "--requests", "25", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (config,) = result["configs"]
    assert (config["layers"], config["mean_ms"]) == (6, 20.0)
    assert set(config["arms"]) == set(inf.ARMS)
    for arm in ("server_alone", "native", "serial", "auto", "latency_sensitive",
                "serial_latency_sensitive"):
        row = config["arms"][arm]
        assert row["latency_ms"]["n"] == 25 and row["identical"] is True
    assert config["arms"]["latency_sensitive"]["train_steps_per_s"] > 0
    assert "p99/alone" in capsys.readouterr().out


def test_the_training_job_is_chosen_and_recorded(tmp_path):
    out = tmp_path / "r.json"
    assert inf.main(["--dry-run", "--quick", "--requests", "5", "--arms", "native",
                     "--trainer", "small", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["params"]["trainer"] == "small"
    from bench.scheduling.inference_worker import TRAINERS
    assert set(TRAINERS) == {"large", "small"}
    with pytest.raises(SystemExit):
        inf.main(["--dry-run", "--trainer", "tiny", "--json", str(tmp_path / "x.json")])


def test_arms_chosen_with_the_baselines_always(tmp_path):
    assert inf.arm_list("serial_latency_sensitive") == ("server_alone", "training_alone",
                                                        "serial_latency_sensitive")
    with pytest.raises(SystemExit):
        inf.main(["--dry-run", "--arms", "serial,bogus", "--json", str(tmp_path / "r.json")])


def test_arms_of_one_kind_with_their_own_queue_bounds_run_beside_the_same_alone_arms():
    arms = inf.arm_list("latency_sensitive@0.50,native,latency_sensitive@0.2,latency_sensitive")
    assert arms == ("server_alone", "training_alone", "native", "latency_sensitive@0.5",
                    "latency_sensitive@0.2", "latency_sensitive")
    assert [inf.arm_bound_ms(a) for a in arms[3:]] == [0.5, 0.2, None]
    for bad in ("native@0.2", "ungated@1", "server_alone@1", "latency_sensitive@0",
                "latency_sensitive@-1", "latency_sensitive@x", "bogus@1"):
        with pytest.raises(Exception, match="arm"):
            inf.arm_list(bad)


def test_an_arm_may_run_another_library_beside_this_trees():
    arms = inf.arm_list("latency_sensitive+old,latency_sensitive,latency_sensitive@2+old,ungated+b.1")
    assert arms == ("server_alone", "training_alone", "latency_sensitive+old", "latency_sensitive",
                    "latency_sensitive@2+old", "ungated+b.1")
    assert [inf.arm_label(a) for a in arms[2:]] == ["old", None, "old", "b.1"]
    assert [inf.arm_bound_ms(a) for a in arms[2:]] == [None, None, 2.0, None]
    assert {inf.arm_base(a) for a in arms[2:]} == {"latency_sensitive", "ungated"}
    ours, old = Path("/ours/libnvshare.so"), Path("/old/libnvshare.so")
    assert inf.arm_library("latency_sensitive@2+old", ours, {"old": old}) == old
    assert inf.arm_library("latency_sensitive@2", ours, {"old": old}) == ours
    assert inf.arm_library("latency_sensitive+old", None, {"old": old}) is None  # a dry run
    for bad in ("server_alone+old", "native+old", "latency_sensitive+", "latency_sensitive+a/b",
                "latency_sensitive+" + "x" * 33, "bogus+old"):
        with pytest.raises(Exception, match="arm"):
            inf.arm_list(bad)


def test_an_arm_of_another_library_needs_it_named(tmp_path):
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit):  # no --compare old=...
        inf.main(["--dry-run", "--quick", "--arms", "latency_sensitive+old", "--json", str(out)])
    with pytest.raises(SystemExit):  # not a file (checked unless a dry run)
        inf.main(["--quick", "--arms", "latency_sensitive+old", "--compare",
                  f"old={tmp_path / 'missing.so'}", "--json", str(out)])
    with pytest.raises(SystemExit):
        inf.main(["--dry-run", "--compare", "no-equals-sign", "--json", str(out)])
    assert inf.main(["--dry-run", "--quick", "--requests", "5", "--arms",
                     "latency_sensitive,latency_sensitive+old", "--compare", "old=/old/libnvshare.so",
                     "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["params"]["compare"] == {"old": "/old/libnvshare.so"}
    assert {"latency_sensitive", "latency_sensitive+old"} <= set(result["configs"][0]["arms"])


class _FakeScheduler:
    made: list = []

    def __init__(self, mode, tq, extra_args=()):
        self.mode, self.extra_args, self.socket, self.lines = mode, tuple(extra_args), None, []
        _FakeScheduler.made.append(self)

    def stop(self):
        pass


def test_each_arm_gives_its_scheduler_its_own_bound_or_the_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(inf.harness, "Scheduler", _FakeScheduler)
    _FakeScheduler.made = []
    out = tmp_path / "r.json"
    assert inf.main(["--dry-run", "--quick", "--requests", "5", "--latency-queue-ms", "0.7",
                     "--arms", "latency_sensitive@0.2,serial,latency_sensitive",
                     "--json", str(out)]) == 0
    bounds = sorted((s.mode, s.extra_args[s.extra_args.index("--latency-queue-ms") + 1])
                    for s in _FakeScheduler.made)
    assert bounds == [("auto", "0.2"), ("auto", "0.7"), ("serial", "0.7")]
    arms = json.loads(out.read_text())["configs"][0]["arms"]
    assert set(arms) == {"server_alone", "training_alone", "serial", "latency_sensitive",
                         "latency_sensitive@0.2"}
    assert arms["latency_sensitive@0.2"]["latency_ms"]["n"] == 5


def test_library_settings_reach_only_the_roles_and_arms_named(tmp_path):
    roles, key, value = inf.lib_env_item("trainer:NVSHARE_MAX_INFLIGHT=0")
    assert (roles, key, value) == (("trainer",), "NVSHARE_MAX_INFLIGHT", "0")
    assert inf.lib_env_item("NVSHARE_BACKING=managed")[0] == ("server", "trainer")
    for bad in ("nobody:X=1", "X", "=1", "server:bad key=1"):
        with pytest.raises(Exception):
            inf.lib_env_item(bad)
    lib, sock = tmp_path / "libnvshare.so", tmp_path / "s.sock"
    cfg = {"idle_release_ms": 10, "lib_env": {"trainer": {"NVSHARE_MAX_INFLIGHT": "0"}},
           "native_roles": ["server"]}
    trainer = inf._env("auto", "trainer", lib, sock, cfg)
    assert trainer["NVSHARE_MAX_INFLIGHT"] == "0" and str(lib) in trainer["LD_PRELOAD"]
    assert "libnvshare" not in inf._env("auto", "server", lib, sock, cfg).get("LD_PRELOAD", "")
    assert "NVSHARE_MAX_INFLIGHT" not in inf._env("native", "trainer", lib, sock, cfg)
    ungated = inf._env("ungated", "trainer", lib, sock, {"idle_release_ms": 10})
    assert ungated["NVSHARE_SOCK_PATH"] != str(sock)  # nobody listens there: the library runs ungated

"""JOB from the library (native/src/session/job.c, docs/protocol.md `job`): the job its environment names
(NVSHARE_JOB, else a torch distributed run), sent once per connection before any ATTACH, only to
a scheduler whose WELCOME offers JOBS; bad values are warned about and sent as unknown."""

from __future__ import annotations

import pytest

from xpushare.wire.protocol import (
    FEATURE_JOBS, FEATURE_QUOTAS, JOB_EXPLICIT, JOB_TORCH, JOB_UNKNOWN, MessageType,
)

TORCH = {"WORLD_SIZE": 8, "LOCAL_WORLD_SIZE": 4, "RANK": 5, "LOCAL_RANK": 1,
         "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": 29500, "TORCHELASTIC_RUN_ID": "run-7"}


def _job(world, recorder, env, features=FEATURE_JOBS):
    """Run a program that uses device 0 under `env`; the JOBs it sent (at most one expected) and
    the types of its messages in order."""
    recorder.welcome_features = features
    app = world.run("init", "ctx", "0", "launch", "1", env=env)
    types = [r.type for r in recorder.messages()]
    return [r.msg for r in recorder.messages(MessageType.JOB)], types, app


def test_nvshare_job_is_sent_as_explicit_before_attach(world, recorder):
    jobs, types, _ = _job(world, recorder, {"NVSHARE_JOB": "train-a", **TORCH})  # it wins
    assert types[:3] == [MessageType.HELLO, MessageType.JOB, MessageType.ATTACH], types
    (job,) = jobs
    assert (job.kind, job.name, job.rendezvous) == (JOB_EXPLICIT, "train-a", "")
    assert (job.world_size, job.local_world_size, job.rank, job.local_rank) == (
        0, 0, JOB_UNKNOWN, JOB_UNKNOWN)


def test_a_torch_run_is_sent_with_its_fields(world, recorder):
    jobs, types, _ = _job(world, recorder, TORCH, FEATURE_JOBS | FEATURE_QUOTAS)
    assert types.index(MessageType.JOB) < types.index(MessageType.ATTACH), types
    assert types.count(MessageType.SETTINGS) == 1
    (job,) = jobs
    assert (job.kind, job.name, job.rendezvous) == (JOB_TORCH, "run-7", "10.0.0.1:29500")
    assert (job.world_size, job.local_world_size, job.rank, job.local_rank) == (8, 4, 5, 1)


def test_a_torch_run_without_its_optional_variables(world, recorder):
    env = {"WORLD_SIZE": 2, "MASTER_ADDR": "h", "MASTER_PORT": 1}
    (job,), _, _ = _job(world, recorder, env)
    assert (job.kind, job.name, job.rendezvous) == (JOB_TORCH, "", "h:1")
    assert (job.world_size, job.local_world_size, job.rank, job.local_rank) == (
        2, 0, JOB_UNKNOWN, JOB_UNKNOWN)


@pytest.mark.parametrize("env", [
    {},
    {"NVSHARE_JOB": ""},
    {"WORLD_SIZE": 2, "MASTER_ADDR": "h"},                       # no MASTER_PORT: no torch run
    {"WORLD_SIZE": 2, "MASTER_ADDR": "", "MASTER_PORT": 1},
], ids=["none", "empty-name", "no-port", "empty-addr"])
def test_no_job_without_one_in_the_environment(world, recorder, env):
    jobs, types, _ = _job(world, recorder, env)
    assert jobs == [] and MessageType.ATTACH in types


def test_no_job_to_a_scheduler_that_does_not_offer_jobs(world, recorder):
    jobs, types, _ = _job(world, recorder, {"NVSHARE_JOB": "train-a", **TORCH}, FEATURE_QUOTAS)
    assert jobs == [] and MessageType.ATTACH in types and not recorder.errors


def test_bad_numbers_are_unknown_with_one_warning_each(world, recorder):
    env = {**TORCH, "WORLD_SIZE": "eight", "RANK": "-1", "LOCAL_RANK": "4294967295",
           "LOCAL_WORLD_SIZE": "99999999999"}
    (job,), _, app = _job(world, recorder, env)
    assert (job.world_size, job.local_world_size, job.rank, job.local_rank) == (
        0, 0, JOB_UNKNOWN, JOB_UNKNOWN)
    err = app.stderr()
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK"):
        assert err.count(f"ignoring {name}=") == 1, err


def test_long_strings_are_cut_at_a_character_boundary_with_a_warning(world, recorder):
    name = "é" * 100                                   # 200 bytes of UTF-8 into 128
    env = {**TORCH, "TORCHELASTIC_RUN_ID": name, "MASTER_ADDR": "a" * 200}
    (job,), _, app = _job(world, recorder, env)
    assert job.name == "é" * 64
    assert job.rendezvous == "a" * 128
    err = app.stderr()
    assert "TORCHELASTIC_RUN_ID is 200 bytes" in err and "MASTER_ADDR:MASTER_PORT is 206 bytes" in err


def test_one_job_per_connection(world, recorder):
    """A new connection (the scheduler went away and came back) hears the job again, once, before
    its ATTACH."""
    recorder.welcome_features = FEATURE_JOBS
    app = world.app("init", "ctx", "0", "launch", "1", "sleep", "4000", env={"NVSHARE_JOB": "train-a"})
    recorder.wait_count(MessageType.ATTACH, 1)
    recorder.hang_up()
    recorder.wait_count(MessageType.ATTACH, 2)             # re-registered: the device again
    assert app.finish(30) == 0
    conns = sorted({r.conn for r in recorder.messages()})
    assert len(conns) == 2
    for conn in conns:
        types = [r.type for r in recorder.messages() if r.conn == conn]
        assert types.count(MessageType.JOB) == 1, types
        assert types.index(MessageType.JOB) < types.index(MessageType.ATTACH), types
